// ferry_nixl_bench: what the FERRY NIXL plugin costs over ferry's own API,
// measured in one run. The same transfer both ways between two engines of
// this process, alternating round by round:
//   ferry   Connection::write_blocks_async between pools prepared once, wait()
//   nixl    nixlAgent: one createXferReq, then postXferReq and getXferStatus
//           polled until done (as NIXL's users do), FERRY backend
// Shapes: one 64 MiB descriptor, and 256 scattered 16 KiB descriptors (a KV
// cache's blocks). Memory: host, or GPU 0 -> GPU 1 (--memory gpu). The
// transport is FERRY_TRANSPORT's (tcp for loopback TCP). Prints one line per
// shape: the medians and nixl/ferry, the ratio the plugin keeps.
//
// usage: ferry_nixl_bench [--memory host|gpu] [--rounds N]
// NIXL_PLUGIN_DIR must name the folder holding libplugin_FERRY.so.
#include <nixl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/pattern.h"
#include "ferry/engine.h"
#include "gpu/gpu_memory.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr size_t kBytes = (64u << 20) + (1u << 20);

struct Shape {
  const char* name;
  std::vector<ferry::Block> blocks;  // offsets within the two buffers
  size_t bytes = 0;
};

Shape one_big() {
  Shape s{"64MiB x1", {{0, 0, 0, 0, 64u << 20}}, 64u << 20};
  return s;
}

Shape kv_blocks() {
  Shape s{"16KiB x256", {}, 0};
  // Every other 16 KiB slot on each side, the target's in reverse order.
  for (uint64_t i = 0; i < 256; ++i) {
    s.blocks.push_back({0, 0, 2 * i * 16384, (511 - 2 * i) * 16384, 16384});
    s.bytes += 16384;
  }
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Buffer {
  uint8_t* data = nullptr;
  std::vector<uint8_t> host;
  ferry::testing::GpuBuffer gpu;
};

Buffer make_buffer(bool gpu, int device) {
  Buffer b;
  if (gpu) {
    b.gpu = ferry::testing::gpu_alloc(device, kBytes);
    b.data = b.gpu.ptr;
  } else {
    b.host.resize(kBytes);
    ferry::core::fill_random(b.host.data(), b.host.size(), 1 + device);
    b.data = b.host.data();
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  bool gpu = false;
  int rounds = 15;
  std::chrono::microseconds poll_pause{0};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--memory" && i + 1 < argc) {
      gpu = std::string(argv[++i]) == "gpu";
    } else if (a == "--poll-pause-us" && i + 1 < argc) {
      poll_pause = std::chrono::microseconds(std::atoi(argv[++i]));
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(3, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: ferry_nixl_bench [--memory host|gpu] [--rounds N]\n");
      return 2;
    }
  }
  if (gpu && ferry::testing::gpu_count() < 2) {
    std::printf("nixl bench: --memory gpu needs two GPUs; skipped\n");
    return 77;
  }
  Buffer src = make_buffer(gpu, 0), dst = make_buffer(gpu, 1);
  if (src.data == nullptr || dst.data == nullptr) {
    std::fprintf(stderr, "nixl bench: allocation failed\n");
    return 1;
  }
  const nixl_mem_t mem = gpu ? VRAM_SEG : DRAM_SEG;

  // ferry's own API.
  ferry::Options options;
  options.local_same_process = true;
  auto target = ferry::Engine::create(options).value();
  auto initiator = ferry::Engine::create(options).value();
  auto dst_region = target->reg(dst.data, kBytes).value();
  auto dst_export = target->export_region(dst_region).value();
  auto src_region = initiator->reg(src.data, kBytes).value();
  auto conn = initiator->connect(target->metadata(), ferry::after(10s)).value();
  auto accepted = target->accept(ferry::after(10s)).value();
  auto pools = conn->prepare_blocks({&src_region, 1}, {&dst_export, 1}).value();

  // The same through NIXL.
  nixlAgent nixl_target("bench-target", nixlAgentConfig(false));
  nixlAgent nixl_initiator("bench-initiator", nixlAgentConfig(false));
  nixlBackendH* backend = nullptr;
  if (nixl_target.createBackend("FERRY", {}, backend) != NIXL_SUCCESS ||
      nixl_initiator.createBackend("FERRY", {}, backend) != NIXL_SUCCESS) {
    std::fprintf(stderr, "nixl bench: no FERRY backend (set NIXL_PLUGIN_DIR)\n");
    return 1;
  }
  nixl_reg_dlist_t dst_reg(mem), src_reg(mem);
  dst_reg.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(dst.data), kBytes, gpu ? 1 : 0, ""));
  src_reg.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(src.data), kBytes, 0, ""));
  std::string md, name;
  if (nixl_target.registerMem(dst_reg) != NIXL_SUCCESS || nixl_initiator.registerMem(src_reg) != NIXL_SUCCESS ||
      nixl_target.getLocalMD(md) != NIXL_SUCCESS || nixl_initiator.loadRemoteMD(md, name) != NIXL_SUCCESS) {
    std::fprintf(stderr, "nixl bench: registration or metadata exchange failed\n");
    return 1;
  }

  std::printf("nixl bench: %s memory, transport %s\n", gpu ? "GPU 0 -> GPU 1" : "host",
              std::string(conn->transport_name()).c_str());
  std::printf("%-12s %12s %12s %12s %12s %8s\n", "shape", "ferry GB/s", "nixl GB/s", "ferry us", "nixl us",
              "nixl/ferry");
  int status = 0;
  for (const Shape& shape : {one_big(), kv_blocks()}) {
    nixl_xfer_dlist_t local(mem), remote(mem);
    for (const ferry::Block& b : shape.blocks) {
      local.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(src.data) + b.local_offset, b.size, 0));
      remote.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(dst.data) + b.remote_offset, b.size, gpu ? 1 : 0));
    }
    nixlXferReqH* request = nullptr;
    if (nixl_initiator.createXferReq(NIXL_WRITE, local, remote, "bench-target", request) != NIXL_SUCCESS) {
      std::fprintf(stderr, "nixl bench: createXferReq failed\n");
      return 1;
    }
    const int iters = shape.bytes >= (1u << 20) * 32 ? 4 : 64;
    std::vector<double> ferry_us, nixl_us;
    for (int round = -2; round < rounds; ++round) {
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) {
        ferry::Status s = conn->write_blocks_async(pools, shape.blocks).wait(ferry::after(30s));
        if (!s.ok()) {
          std::fprintf(stderr, "ferry write: %s\n", s.to_string().c_str());
          return 1;
        }
      }
      auto t1 = Clock::now();
      for (int i = 0; i < iters; ++i) {
        nixl_status_t s = nixl_initiator.postXferReq(request);
        const auto deadline = Clock::now() + 30s;
        while (s == NIXL_IN_PROG && Clock::now() < deadline) {
          if (poll_pause.count() > 0) std::this_thread::sleep_for(poll_pause);
          s = nixl_initiator.getXferStatus(request);
        }
        if (s != NIXL_SUCCESS) {
          std::fprintf(stderr, "nixl write: status %d\n", s);
          return 1;
        }
      }
      auto t2 = Clock::now();
      if (round < 0) continue;  // warm-up
      ferry_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
      nixl_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count() / iters);
    }
    nixl_initiator.releaseXferReq(request);
    const double f = median(ferry_us), n = median(nixl_us);
    std::printf("%-12s %12.2f %12.2f %12.1f %12.1f %8.3f\n", shape.name, shape.bytes / f / 1e3, shape.bytes / n / 1e3,
                f, n, f / n);
  }
  // The last shape's bytes landed: a check that the benchmark moved data.
  std::vector<uint8_t> expect(16384), got(16384);
  if (!gpu) {
    std::memcpy(expect.data(), src.data + 2 * 5 * 16384, 16384);
    std::memcpy(got.data(), dst.data + (511 - 2 * 5) * 16384, 16384);
    if (expect != got) {
      std::fprintf(stderr, "nixl bench: the target's bytes differ from the source's\n");
      status = 1;
    }
  }
  return status;
}
