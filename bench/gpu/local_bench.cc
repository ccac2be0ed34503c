// The local transport against its anchors, measured in one invocation on a
// host with two GPUs: copy-engine peer copies in one process (what
// cudaMemcpyPeerAsync does), NCCL send/recv between two processes through its
// C API, and memcpy for host memory. Prints one table of ratios.
//
// Usage: ferry_local_bench [NCCL_LIBRARY]   (spawns its peer processes)
// Timing: each operation is posted and completed before the next (blocking
// semantics); per-size figure = median over iterations of posting-to-
// completion time at the receiver, after a warm-up.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ferry/engine.h"
#include "gpu/gpu_memory.h"

using namespace ferry;
using namespace ferry::testing;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }
int iters_for(size_t n) { return n >= (256u << 20) ? 20 : n >= (16u << 20) ? 100 : 1000; }

const std::vector<size_t> kSizes = {4096, 65536, 1u << 20, 16u << 20, 64u << 20, 256u << 20, 1u << 30};

// ---- anchor: peer copies in one process ------------------------------------------
std::map<size_t, double> anchor_ce(double& bidir_gbs) {
  const auto& d = platform::cuda();
  auto enable = reinterpret_cast<int (*)(cu::Context, unsigned)>(dlsym(RTLD_DEFAULT, "cuCtxEnablePeerAccess"));
  if (enable == nullptr) enable = reinterpret_cast<int (*)(cu::Context, unsigned)>(
                             dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuCtxEnablePeerAccess"));
  GpuBuffer a = gpu_alloc(0, 1u << 30), b = gpu_alloc(1, 1u << 30), a2 = gpu_alloc(0, 1u << 30),
            b2 = gpu_alloc(1, 1u << 30);
  cu::Context c0, c1;
  platform::use_device(1);
  d.ctx_get_current(&c1);
  platform::use_device(0);
  d.ctx_get_current(&c0);
  enable(c1, 0);
  platform::use_device(1);
  enable(c0, 0);
  cu::Stream s1;
  d.stream_create(&s1, cu::kStreamNonBlocking);
  platform::use_device(0);
  cu::Stream s0;
  d.stream_create(&s0, cu::kStreamNonBlocking);
  std::map<size_t, double> out;
  for (size_t n : kSizes) {
    std::vector<double> t;
    for (int i = 0; i < iters_for(n) + 5; ++i) {
      auto t0 = Clock::now();
      d.memcpy_async(reinterpret_cast<cu::DevicePtr>(b.ptr), reinterpret_cast<cu::DevicePtr>(a.ptr), n, s0);
      d.stream_synchronize(s0);
      if (i >= 5) t.push_back(us_since(t0));
    }
    out[n] = median(t);
  }
  std::vector<double> t;
  size_t n = 256u << 20;
  for (int i = 0; i < 25; ++i) {
    auto t0 = Clock::now();
    d.memcpy_async(reinterpret_cast<cu::DevicePtr>(b.ptr), reinterpret_cast<cu::DevicePtr>(a.ptr), n, s0);
    platform::use_device(1);
    d.memcpy_async(reinterpret_cast<cu::DevicePtr>(a2.ptr), reinterpret_cast<cu::DevicePtr>(b2.ptr), n, s1);
    d.stream_synchronize(s1);
    platform::use_device(0);
    d.stream_synchronize(s0);
    if (i >= 5) t.push_back(us_since(t0));
  }
  bidir_gbs = 2.0 * n / median(t) / 1e3;
  return out;
}

// ---- NCCL through its C API, one process per GPU -------------------------------------
struct NcclId {
  char internal[128];
};
using NcclComm = struct ncclComm*;

int nccl_peer(const char* lib, int rank, const std::string& id_hex, const char* out_path) {
  void* h = dlopen(lib, RTLD_NOW);
  if (h == nullptr) return 2;
  auto init = reinterpret_cast<int (*)(NcclComm*, int, NcclId, int)>(dlsym(h, "ncclCommInitRank"));
  auto send = reinterpret_cast<int (*)(const void*, size_t, int, int, NcclComm, cu::Stream)>(dlsym(h, "ncclSend"));
  auto recv = reinterpret_cast<int (*)(void*, size_t, int, int, NcclComm, cu::Stream)>(dlsym(h, "ncclRecv"));
  auto destroy = reinterpret_cast<int (*)(NcclComm)>(dlsym(h, "ncclCommDestroy"));
  NcclId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i) id.internal[i] = static_cast<char>(std::stoi(id_hex.substr(2 * i, 2), nullptr, 16));
  const auto& d = platform::cuda();
  platform::use_device(0);  // each NCCL process sees its one GPU as device 0
  NcclComm comm;
  if (init(&comm, 2, id, rank) != 0) return 3;
  GpuBuffer buf = gpu_alloc(0, 1u << 30);
  fill(buf.ptr, 1 << 20, 5);
  cu::Stream s;
  d.stream_create(&s, cu::kStreamNonBlocking);
  FILE* out = std::fopen(out_path, "w");
  for (size_t n : kSizes) {
    std::vector<double> t;
    for (int i = 0; i < iters_for(n) + 5; ++i) {
      auto t0 = Clock::now();
      if (rank == 0) send(buf.ptr, n, 0 /*ncclInt8*/, 1, comm, s);
      else recv(buf.ptr, n, 0, 0, comm, s);
      d.stream_synchronize(s);
      if (i >= 5) t.push_back(us_since(t0));
    }
    if (rank == 1) std::fprintf(out, "%zu %f\n", n, median(t));
  }
  std::fclose(out);
  destroy(comm);
  return 0;
}

std::map<size_t, double> anchor_nccl(const char* lib, const char* self) {
  std::map<size_t, double> out;
  void* h = dlopen(lib, RTLD_NOW);
  if (h == nullptr) {
    std::fprintf(stderr, "NCCL not loaded from %s: %s\n", lib, dlerror());
    return out;
  }
  auto get_id = reinterpret_cast<int (*)(NcclId*)>(dlsym(h, "ncclGetUniqueId"));
  NcclId id;
  get_id(&id);
  char hex[2 * sizeof(id.internal) + 1];
  for (size_t i = 0; i < sizeof(id.internal); ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<uint8_t>(id.internal[i]));
  std::string path = "/tmp/ferry-nccl-" + std::to_string(getpid());
  pid_t kids[2];
  for (int r = 0; r < 2; ++r) {
    kids[r] = fork();
    if (kids[r] == 0) {
      setenv("CUDA_VISIBLE_DEVICES", r == 0 ? "0" : "1", 1);
      execl(self, self, "nccl", lib, std::to_string(r).c_str(), hex, path.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  FILE* f = std::fopen(path.c_str(), "r");
  size_t n;
  double us;
  while (f != nullptr && std::fscanf(f, "%zu %lf", &n, &us) == 2) out[n] = us;
  if (f) std::fclose(f);
  unlink(path.c_str());
  return out;
}

// ---- ferry, one process per GPU ------------------------------------------------------
struct FerryResult {
  std::map<size_t, double> recv_us;
  double write8_p50 = 0, bidir_gbs = 0, host64_gbs = 0;
};

int ferry_peer(const char* addr, int device) {
  Options o;
  o.transport = TransportChoice::kLocal;
  auto engine = Engine::create(o).value();
  auto conn = engine->connect(addr, after(std::chrono::seconds(30))).value();
  GpuBuffer buf = gpu_alloc(device, 1u << 30), buf2 = gpu_alloc(device, 256u << 20);
  std::vector<uint8_t> host(64u << 20);
  auto r = engine->reg(buf.ptr, buf.size).value();
  engine->reg(buf2.ptr, buf2.size).value();
  engine->reg(host.data(), host.size()).value();
  std::string desc = engine->export_region(r).value().serialize();
  engine->reg(desc.data(), desc.size()).value();
  conn->send(desc.data(), desc.size());
  // Receiver side of the send/recv sweep: time posting to completion.
  std::vector<double> results;
  for (size_t n : kSizes) {
    std::vector<double> t;
    for (int i = 0; i < iters_for(n) + 5; ++i) {
      auto t0 = Clock::now();
      conn->recv(buf.ptr, n);
      if (i >= 5) t.push_back(us_since(t0));
    }
    results.push_back(median(t));
  }
  // Bidirectional: send 256 MiB back while receiving 256 MiB.
  for (int i = 0; i < 12; ++i) {
    Transfer a = conn->recv_async(buf.ptr, 256u << 20);
    Transfer b = conn->send_async(buf2.ptr, 256u << 20);
    a.wait(kNoDeadline);
    b.wait(kNoDeadline);
  }
  // Host to host 64 MiB.
  for (int i = 0; i < 12; ++i) conn->recv(host.data(), host.size());
  std::string rs;
  for (double v : results) rs += std::to_string(v) + " ";
  std::vector<uint8_t> out(rs.begin(), rs.end());
  out.resize(4096, ' ');
  engine->reg(out.data(), out.size()).value();
  conn->send(out.data(), out.size());
  conn->recv(out.data(), 1);  // wait for A to finish
  return 0;
}

FerryResult run_ferry(const char* self) {
  FerryResult res;
  Options o;
  o.transport = TransportChoice::kLocal;
  auto engine = Engine::create(o).value();
  pid_t kid = fork();
  if (kid == 0) {
    execl(self, self, "ferry", engine->address().c_str(), "1", static_cast<char*>(nullptr));
    _exit(127);
  }
  auto conn = engine->accept(after(std::chrono::seconds(30))).value();
  GpuBuffer buf = gpu_alloc(0, 1u << 30), buf2 = gpu_alloc(0, 256u << 20);
  fill(buf.ptr, 1 << 20, 9);
  std::vector<uint8_t> host(64u << 20, 1), back(4096);
  engine->reg(buf.ptr, buf.size).value();
  engine->reg(buf2.ptr, buf2.size).value();
  engine->reg(host.data(), host.size()).value();
  engine->reg(back.data(), back.size()).value();
  std::string desc(48, '\0');
  engine->reg(desc.data(), desc.size()).value();
  conn->recv(desc.data(), desc.size());
  RemoteDescriptor far = RemoteDescriptor::parse(desc).value();
  for (size_t n : kSizes) {
    for (int i = 0; i < iters_for(n) + 5; ++i) conn->send(buf.ptr, n);
  }
  auto t0 = Clock::now();
  for (int i = 0; i < 12; ++i) {
    if (i == 2) t0 = Clock::now();
    Transfer a = conn->send_async(buf.ptr, 256u << 20);
    Transfer b = conn->recv_async(buf2.ptr, 256u << 20);
    a.wait(kNoDeadline);
    b.wait(kNoDeadline);
  }
  res.bidir_gbs = 2.0 * 10 * (256u << 20) / us_since(t0) / 1e3;
  t0 = Clock::now();
  for (int i = 0; i < 12; ++i) {
    if (i == 2) t0 = Clock::now();
    conn->send(host.data(), host.size());
  }
  res.host64_gbs = 10.0 * host.size() / us_since(t0) / 1e3;
  conn->recv(back.data(), back.size());
  std::string s(back.begin(), back.end());
  size_t pos = 0;
  for (size_t n : kSizes) {
    size_t used = 0;
    res.recv_us[n] = std::stod(s.substr(pos), &used);
    pos += used;
  }
  // 8-byte writes into the peer's GPU, posting to completion at the initiator.
  std::vector<double> t;
  for (int i = 0; i < 10500; ++i) {
    auto w0 = Clock::now();
    conn->write(buf.ptr, 8, far, 64 * (i % 1000));
    if (i >= 500) t.push_back(us_since(w0));
  }
  res.write8_p50 = median(t);
  conn->send(back.data(), 1);
  waitpid(kid, nullptr, 0);
  return res;
}

double memcpy_gbs() {
  std::vector<uint8_t> a(64u << 20, 3), b(64u << 20, 0);
  std::vector<double> t;
  for (int i = 0; i < 12; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    if (i >= 2) t.push_back(us_since(t0));
  }
  return a.size() / median(t) / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  if (argc >= 6 && std::string(argv[1]) == "nccl") return nccl_peer(argv[2], std::atoi(argv[3]), argv[4], argv[5]);
  if (argc >= 4 && std::string(argv[1]) == "ferry") return ferry_peer(argv[2], std::atoi(argv[3]));
  if (gpu_count() < 2) {
    std::printf("skip: needs two GPUs\n");
    return 77;
  }
  const char* nccl = argc >= 2 ? argv[1] : "libnccl.so.2";
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 1;
  std::map<size_t, double> nccl_us = anchor_nccl(nccl, self);
  FerryResult f = run_ferry(self);
  double ce_bidir = 0;
  std::map<size_t, double> ce_us = anchor_ce(ce_bidir);
  double mc = memcpy_gbs();
  std::printf("\n%-10s %12s %12s %12s %10s %10s %10s\n", "size", "ferry_us", "nccl_us", "ce_us", "ferry_GB/s",
              "x_nccl", "x_ce");
  for (size_t n : kSizes) {
    double fu = f.recv_us[n], nu = nccl_us.count(n) ? nccl_us[n] : 0, cu_ = ce_us[n];
    std::printf("%-10zu %12.1f %12.1f %12.1f %10.1f %10.2f %10.3f\n", n, fu, nu, cu_, n / fu / 1e3,
                nu > 0 ? nu / fu : 0.0, cu_ / fu);
  }
  std::printf("8-byte write p50 (posting to completion): %.2f us\n", f.write8_p50);
  std::printf("bidirectional 256 MiB: ferry %.1f GB/s, copy engines %.1f GB/s, ratio %.3f\n", f.bidir_gbs, ce_bidir,
              f.bidir_gbs / ce_bidir);
  std::printf("host->host 64 MiB: ferry %.2f GB/s, memcpy %.2f GB/s, ratio %.3f\n", f.host64_gbs, mc,
              f.host64_gbs / mc);
  return 0;
}
