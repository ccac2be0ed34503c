// A KV cache's block write in GPU memory, between two engines of this
// process, over TCP (staged through host memory) and over the local
// transport (Options::local_same_process: the peer's GPU memory is this
// process's own, used in place): hundreds of scattered blocks of odd sizes
// GPU->GPU, GPU->host and host->GPU through prepared pools, then one large
// block, every byte of the target pool checked (the ones no block aims at
// included). Skips without a GPU. The source pool is on GPU 0, a GPU target
// pool on GPU 1 when there is one (else GPU 0 too).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "ferry/ferry.h"
#include "gpu/gpu_memory.h"

namespace ferry::testing {
namespace {

using namespace std::chrono_literals;

constexpr size_t kPool = 8u << 20;
constexpr uint8_t kUntouched = 0;

struct Pool {
  GpuBuffer gpu;                // when on a GPU
  std::vector<uint8_t> host;    // when in host memory
  uint8_t* data() { return gpu.ptr != nullptr ? gpu.ptr : host.data(); }
};

Pool make_pool(int device) {
  Pool p;
  if (device >= 0) {
    p.gpu = gpu_alloc(device, kPool);
  } else {
    p.host.assign(kPool, kUntouched);
  }
  return p;
}

struct Placed {
  uint64_t src, dst, size;
};

// `n` blocks of 1..hi bytes, disjoint on both sides.
std::vector<Placed> scatter(size_t n, uint64_t hi, std::mt19937_64& rng) {
  const uint64_t slot = hi + 64;
  std::vector<uint64_t> a(kPool / slot), b(kPool / slot);
  for (size_t i = 0; i < a.size(); ++i) a[i] = b[i] = i;
  std::shuffle(a.begin(), a.end(), rng);
  std::shuffle(b.begin(), b.end(), rng);
  std::vector<Placed> out;
  for (size_t i = 0; i < n && i < a.size(); ++i) {
    out.push_back({a[i] * slot + rng() % 64, b[i] * slot + rng() % 64, 1 + rng() % hi});
  }
  return out;
}

void blocks_between(int from_device, int to_device, TransportChoice transport) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  Options o;
  o.transport = transport;
  o.local_same_process = true;
  o.listen = "127.0.0.1:0";
  auto a = Engine::create(o).value();
  auto b = Engine::create(o).value();
  std::shared_ptr<Connection> ca;
  std::thread t([&] { ca = a->connect(b->address(), after(10s)).value(); });
  auto cb = b->accept(after(10s));
  t.join();
  ASSERT_TRUE(ca && cb.ok());
  Pool src = make_pool(from_device), dst = make_pool(to_device);
  ASSERT_NE(src.data(), nullptr);
  ASSERT_NE(dst.data(), nullptr);
  ASSERT_TRUE(fill(src.data(), kPool, 5));
  ASSERT_TRUE(poison(dst.data(), kPool));
  Region mine = a->reg(src.data(), kPool).value();
  Region theirs = b->reg(dst.data(), kPool).value();
  RemoteDescriptor to = b->export_region(theirs).value();
  auto pools = ca->prepare_blocks(std::span(&mine, 1), std::span(&to, 1));
  ASSERT_TRUE(pools.ok()) << pools.status().to_string();
  std::mt19937_64 rng(static_cast<uint64_t>(from_device * 10 + to_device + 20));
  const std::vector<uint8_t> source = pattern(5, kPool);
  std::vector<uint8_t> expect(kPool, kUntouched);
  for (auto [n, hi] : {std::pair<size_t, uint64_t>{256, 16384}, {1024, 4096}, {300, 9000}, {1, 4u << 20}}) {
    std::vector<Placed> placed = scatter(n, hi, rng);
    std::vector<Block> blocks;
    for (const Placed& p : placed) {
      blocks.push_back({0, 0, p.src, p.dst, p.size});
      std::copy_n(source.begin() + static_cast<long>(p.src), p.size, expect.begin() + static_cast<long>(p.dst));
    }
    Transfer w = ca->write_blocks_async(*pools, blocks, "blocks");
    ASSERT_TRUE(w.wait(after(60s)).ok()) << w.status().to_string();
    auto note = (*cb)->wait_notification(after(10s));
    ASSERT_TRUE(note.ok()) << note.status().to_string();
    std::vector<uint8_t> got(kPool);
    ASSERT_TRUE(copy_to(got.data(), dst.data(), kPool));
    auto diff = std::mismatch(expect.begin(), expect.end(), got.begin());
    ASSERT_TRUE(diff.first == expect.end()) << n << " blocks: the target pool differs at byte "
                                            << (diff.first - expect.begin());
  }
}

int second_gpu() { return gpu_count() > 1 ? 1 : 0; }

constexpr TransportChoice kTcp = TransportChoice::kTcp;
constexpr TransportChoice kLocal = TransportChoice::kLocal;

TEST(GpuBlocks, GpuToGpuOverTcp) { blocks_between(0, second_gpu(), kTcp); }
TEST(GpuBlocks, GpuToHostOverTcp) { blocks_between(0, -1, kTcp); }
TEST(GpuBlocks, HostToGpuOverTcp) { blocks_between(-1, second_gpu(), kTcp); }
TEST(GpuBlocks, GpuToGpuOnTheLocalTransportInOneProcess) { blocks_between(0, second_gpu(), kLocal); }
TEST(GpuBlocks, GpuToTheSameGpuOnTheLocalTransportInOneProcess) { blocks_between(0, 0, kLocal); }
TEST(GpuBlocks, GpuToHostOnTheLocalTransportInOneProcess) { blocks_between(0, -1, kLocal); }
TEST(GpuBlocks, HostToGpuOnTheLocalTransportInOneProcess) { blocks_between(-1, second_gpu(), kLocal); }

}  // namespace
}  // namespace ferry::testing
