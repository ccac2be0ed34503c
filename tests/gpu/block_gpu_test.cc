// A KV cache's block write in GPU memory, between two engines of this
// process, over TCP (staged through host memory) and over the local
// transport (Options::local_same_process: the peer's GPU memory is this
// process's own, used in place): hundreds of scattered blocks of odd sizes
// GPU->GPU, GPU->host and host->GPU through prepared pools, then one large
// block, then blocks that join into a few long runs, every byte of the
// target pool checked (the ones no block aims at included). Skips without a GPU. The source pool is on GPU 0, a GPU
// target pool on GPU 1 when there is one (else GPU 0 too).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
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
  GpuBuffer gpu;              // when on a GPU
  std::vector<uint8_t> host;  // when in host memory
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

// Two engines of this process over `transport`, `ca` connected to `cb`.
struct EnginePair {
  std::unique_ptr<Engine> a, b;
  std::shared_ptr<Connection> ca, cb;
};

// `linger` > 0 keeps the gather kernel resident (Options::gather_linger).
EnginePair connected(TransportChoice transport, std::chrono::microseconds linger = {}) {
  Options o;
  o.transport = transport;
  o.gather_linger = linger;
  o.local_same_process = true;
  o.listen = "127.0.0.1:0";
  EnginePair p;
  p.a = Engine::create(o).value();
  p.b = Engine::create(o).value();
  std::thread t([&] { p.ca = p.a->connect(p.b->address(), after(10s)).value(); });
  auto cb = p.b->accept(after(10s));
  t.join();
  if (cb.ok()) p.cb = *cb;
  return p;
}

// Every byte of `pool` (GPU or host memory) is `expect`'s; `what` names it.
void expect_pool(const uint8_t* pool, const std::vector<uint8_t>& expect, const std::string& what) {
  std::vector<uint8_t> got(kPool);
  ASSERT_TRUE(copy_to(got.data(), pool, kPool));
  auto diff = std::mismatch(expect.begin(), expect.end(), got.begin());
  ASSERT_TRUE(diff.first == expect.end()) << what << " differs at byte " << (diff.first - expect.begin());
}

// A pool a side for `pair`: the source on `from_device` filled from `seed`,
// the target on `to_device` poisoned, both registered, the target exported,
// the two prepared as block pools.
struct PoolPair {
  Pool src, dst;
  BlockPools pools;
};

void prepare_pool_pair(EnginePair& pair, int from_device, int to_device, uint64_t seed, PoolPair& out) {
  out.src = make_pool(from_device);
  out.dst = make_pool(to_device);
  ASSERT_NE(out.src.data(), nullptr);
  ASSERT_NE(out.dst.data(), nullptr);
  ASSERT_TRUE(fill(out.src.data(), kPool, seed));
  ASSERT_TRUE(poison(out.dst.data(), kPool));
  Region mine = pair.a->reg(out.src.data(), kPool).value();
  Region theirs = pair.b->reg(out.dst.data(), kPool).value();
  RemoteDescriptor to = pair.b->export_region(theirs).value();
  auto pools = pair.ca->prepare_blocks(std::span(&mine, 1), std::span(&to, 1));
  ASSERT_TRUE(pools.ok()) << pools.status().to_string();
  out.pools = *pools;
}

void blocks_between(int from_device, int to_device, TransportChoice transport,
                    std::chrono::microseconds linger = {}) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  EnginePair pair = connected(transport, linger);
  ASSERT_TRUE(pair.ca && pair.cb);
  PoolPair pp;
  ASSERT_NO_FATAL_FAILURE(prepare_pool_pair(pair, from_device, to_device, 5, pp));
  std::mt19937_64 rng(static_cast<uint64_t>(from_device * 10 + to_device + 20));
  const std::vector<uint8_t> source = pattern(5, kPool);
  std::vector<uint8_t> expect(kPool, kUntouched);
  // The last shape: 3,000 blocks of 48 bytes each, so that a chunk of them
  // lists more pieces than a TCP staging table holds (the list then rides in
  // the launch's parameters).
  for (auto [n, hi] : {std::pair<size_t, uint64_t>{256, 16384}, {1024, 4096}, {300, 9000}, {1, 4u << 20}, {3000, 48}}) {
    std::vector<Placed> placed = scatter(n, hi, rng);
    if (n == 3000) {
      for (Placed& p : placed) p.size = hi;
    }
    std::vector<Block> blocks;
    for (const Placed& p : placed) {
      blocks.push_back({0, 0, p.src, p.dst, p.size});
      std::copy_n(source.begin() + static_cast<long>(p.src), p.size, expect.begin() + static_cast<long>(p.dst));
    }
    Transfer w = pair.ca->write_blocks_async(pp.pools, blocks, "blocks");
    ASSERT_TRUE(w.wait(after(60s)).ok()) << w.status().to_string();
    auto note = pair.cb->wait_notification(after(10s));
    ASSERT_TRUE(note.ok()) << note.status().to_string();
    ASSERT_NO_FATAL_FAILURE(expect_pool(pp.dst.data(), expect, std::to_string(n) + " blocks: the target pool"));
  }
  // Blocks that continue each other on both sides: three runs of 256 x 4 KiB
  // (a run of 1 MiB each, too long on average for the gather kernel), then
  // 1,024 x 4 KiB that join into one run.
  for (auto [runs, per] : {std::pair<uint64_t, uint64_t>{3, 256}, {1, 1024}}) {
    std::vector<Block> blocks;
    for (uint64_t r = 0; r < runs; ++r) {
      uint64_t from = 5 + r * (2u << 20) + rng() % 4096, at = 11 + r * (2u << 20) + rng() % 4096;
      for (uint64_t i = 0; i < per; ++i) {
        blocks.push_back({0, 0, from + i * 4096, at + i * 4096, 4096});
        std::copy_n(source.begin() + static_cast<long>(from + i * 4096), 4096,
                    expect.begin() + static_cast<long>(at + i * 4096));
      }
    }
    Transfer w = pair.ca->write_blocks_async(pp.pools, blocks, "runs");
    ASSERT_TRUE(w.wait(after(60s)).ok()) << w.status().to_string();
    auto note = pair.cb->wait_notification(after(10s));
    ASSERT_TRUE(note.ok()) << note.status().to_string();
    ASSERT_NO_FATAL_FAILURE(expect_pool(pp.dst.data(), expect, std::to_string(runs) + " runs: the target pool"));
  }
}

int second_gpu() { return gpu_count() > 1 ? 1 : 0; }

// Two pools a side, in separate allocations and exports, blocks across all
// four pairings with runs of adjacent blocks, on the local transport between
// GPUs (one gather launch a batch once the peer's pools are open). Then the
// peer deregisters one of its pools: a write aiming at it fails and not a
// byte of it changes, and blocks into the other pool still land.
TEST(GpuBlocks, AcrossPoolsOnTheLocalTransportAndAfterThePeerLetsOneGo) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  EnginePair pair = connected(TransportChoice::kLocal);
  ASSERT_TRUE(pair.ca && pair.cb);
  auto& [a, b, ca, cb] = pair;
  std::array<Pool, 2> src = {make_pool(0), make_pool(0)};
  std::array<Pool, 2> dst = {make_pool(second_gpu()), make_pool(second_gpu())};
  std::array<std::vector<uint8_t>, 2> source, expect;
  std::vector<Region> mine, theirs;
  std::vector<RemoteDescriptor> to;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(fill(src[i].data(), kPool, 7 + i));
    ASSERT_TRUE(poison(dst[i].data(), kPool));
    source[i] = pattern(7 + i, kPool);
    expect[i].assign(kPool, kUntouched);
    mine.push_back(a->reg(src[i].data(), kPool).value());
    theirs.push_back(b->reg(dst[i].data(), kPool).value());
    to.push_back(b->export_region(theirs[i]).value());
  }
  auto pools = ca->prepare_blocks(mine, to);
  ASSERT_TRUE(pools.ok()) << pools.status().to_string();
  std::mt19937_64 rng(41);
  auto check_pool = [&](int i) { expect_pool(dst[i].data(), expect[i], "target pool " + std::to_string(i)); };
  // Blocks in runs: a slot of the source and one of the target, cut into
  // 1-4 adjacent blocks of odd sizes, each block into a random pool pairing
  // of the run's.
  auto make_blocks = [&](size_t runs, bool only_pool_one) {
    std::vector<Block> blocks;
    constexpr uint64_t kSlot = 20000;
    std::vector<uint64_t> a_slots(kPool / kSlot), b_slots(kPool / kSlot);
    for (size_t i = 0; i < a_slots.size(); ++i) a_slots[i] = b_slots[i] = i;
    std::shuffle(a_slots.begin(), a_slots.end(), rng);
    std::shuffle(b_slots.begin(), b_slots.end(), rng);
    for (size_t r = 0; r < runs; ++r) {
      uint32_t lp = static_cast<uint32_t>(rng() % 2), rp = only_pool_one ? 1 : static_cast<uint32_t>(rng() % 2);
      uint64_t at_src = a_slots[r] * kSlot + rng() % 61, at_dst = b_slots[r] * kSlot + rng() % 61;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) {
        uint64_t size = 1 + rng() % 4900;
        blocks.push_back({lp, rp, at_src, at_dst, size});
        at_src += size;
        at_dst += size;
      }
    }
    return blocks;
  };
  auto expect_blocks = [&](const std::vector<Block>& blocks) {
    for (const Block& bl : blocks) {
      std::copy_n(source[bl.local_pool].begin() + static_cast<long>(bl.local_offset), bl.size,
                  expect[bl.remote_pool].begin() + static_cast<long>(bl.remote_offset));
    }
  };
  for (int round = 0; round < 4; ++round) {
    std::vector<Block> blocks = make_blocks(100 + 50 * round, false);
    expect_blocks(blocks);
    Transfer w =
        round % 2 == 0 ? ca->write_blocks_async(*pools, blocks, "round") : ca->write_blocks_async(*pools, blocks);
    ASSERT_TRUE(w.wait(after(60s)).ok()) << w.status().to_string();
    if (round % 2 == 0) {
      ASSERT_TRUE(cb->wait_notification(after(10s)).ok());
    }
  }
  check_pool(0);
  check_pool(1);
  // The peer lets pool 0 go (dereg: no byte lands there once it returned);
  // its memory stays allocated, so a late byte would show.
  ASSERT_TRUE(b->dereg(theirs[0]).ok());
  std::vector<Block> into_gone = make_blocks(64, false);
  for (Block& bl : into_gone) bl.remote_pool = 0;
  for (int i = 0; i < 2; ++i) {
    Transfer w = ca->write_blocks_async(*pools, into_gone);
    EXPECT_FALSE(w.wait(after(60s)).ok()) << "a write into a deregistered pool succeeded";
  }
  check_pool(0);
  std::vector<Block> into_kept = make_blocks(120, true);
  expect_blocks(into_kept);
  Transfer w = ca->write_blocks_async(*pools, into_kept);
  ASSERT_TRUE(w.wait(after(60s)).ok()) << w.status().to_string();
  check_pool(1);
  check_pool(0);
}

// Many batches in flight at once on the local transport between GPUs, more
// than the copier has pinned tables for its piece lists (the rest list
// theirs in the launch's parameters), and one batch longer than a table;
// every batch aims at its own part of the target pool.
void many_batches_in_flight(std::chrono::microseconds linger) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  EnginePair pair = connected(TransportChoice::kLocal, linger);
  ASSERT_TRUE(pair.ca && pair.cb);
  PoolPair pp;
  ASSERT_NO_FATAL_FAILURE(prepare_pool_pair(pair, 0, second_gpu(), 13, pp));
  const std::vector<uint8_t> source = pattern(13, kPool);
  std::vector<uint8_t> expect(kPool, kUntouched);
  std::mt19937_64 rng(43);
  // Batch k writes blocks of 1..stride-100 bytes, `stride` apart from byte
  // 3 of its own part of the target, read from anywhere in the source.
  constexpr size_t kBatches = 12;
  constexpr uint64_t kPart = kPool / (kBatches + 1);
  auto batch_into = [&](uint64_t part_at, size_t blocks, uint64_t stride = 700) {
    std::vector<Block> out;
    for (size_t i = 0; i < blocks; ++i) {
      uint64_t size = 1 + rng() % (stride - 100), from = rng() % (kPool - size), at = part_at + 3 + i * stride;
      out.push_back({0, 0, from, at, size});
      std::copy_n(source.begin() + static_cast<long>(from), size, expect.begin() + static_cast<long>(at));
    }
    return out;
  };
  // The first opens the peer's pool (the general path); the rest go at once.
  std::vector<Block> first = batch_into(0, 100);
  ASSERT_TRUE(pair.ca->write_blocks_async(pp.pools, first).wait(after(60s)).ok());
  std::vector<std::vector<Block>> batches;
  for (size_t k = 1; k < kBatches; ++k) batches.push_back(batch_into(k * kPart, 400));
  batches.push_back(batch_into(kBatches * kPart, 2100, 256));  // more pieces than a table holds (2,048)
  ASSERT_LT(3 + 2100 * 256, kPart);
  std::vector<Transfer> posted;
  for (const auto& batch : batches) posted.push_back(pair.ca->write_blocks_async(pp.pools, batch));
  for (Transfer& w : posted) ASSERT_TRUE(w.wait(after(60s)).ok()) << w.status().to_string();
  expect_pool(pp.dst.data(), expect, "the target pool");
}
TEST(GpuBlocks, ManyBatchesInFlightAndALongOneOnTheLocalTransport) { many_batches_in_flight({}); }
// The same with the gather kernel resident: batches posted while it has one
// in hand are launched instead.
TEST(GpuBlocks, ManyBatchesInFlightWithTheGatherKernelResident) { many_batches_in_flight(50ms); }

// The resident gather kernel outlives the application's writes: batches
// read the same source blocks after the application rewrote them (through
// its own stream, the kernel still lingering), and each must carry the new
// bytes, not lines an earlier batch left in a cache. The second batch shows
// the kernel stays (the context's synchronization waits for it); the last
// comes after it lingered out and launches it again.
TEST(GpuBlocks, TheResidentGatherKernelReadsWhatTheApplicationWroteSince) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  EnginePair pair = connected(TransportChoice::kLocal, 300ms);
  ASSERT_TRUE(pair.ca && pair.cb);
  PoolPair pp;
  ASSERT_NO_FATAL_FAILURE(prepare_pool_pair(pair, 0, second_gpu(), 17, pp));
  const auto& d = platform::cuda();
  ASSERT_TRUE(platform::use_device(0).ok());
  cu::Stream stream = nullptr;
  ASSERT_EQ(d.stream_create(&stream, cu::kStreamNonBlocking), cu::kSuccess);
  std::mt19937_64 rng(61);
  constexpr size_t kBatches = 5;
  constexpr uint64_t kPart = kPool / kBatches;
  std::vector<uint8_t> expect(kPool, kUntouched);
  // 256 blocks of odd sizes from the first half of the source, into part k.
  std::vector<std::pair<uint64_t, uint64_t>> from;  // (offset, size)
  for (int i = 0; i < 256; ++i) {
    uint64_t size = 1 + rng() % 6000;
    from.push_back({rng() % (kPool / 2 - size), size});
  }
  for (size_t k = 0; k < kBatches; ++k) {
    SCOPED_TRACE("batch " + std::to_string(k));
    if (k == kBatches - 1) std::this_thread::sleep_for(400ms);  // the kernel lingers out
    const std::vector<uint8_t> source = pattern(100 + k, kPool);
    ASSERT_EQ(d.memcpy_htod_async(reinterpret_cast<cu::DevicePtr>(pp.src.data()), source.data(), kPool, stream),
              cu::kSuccess);
    ASSERT_EQ(d.stream_synchronize(stream), cu::kSuccess);
    std::vector<Block> blocks;
    uint64_t at = k * kPart + 1;
    for (auto [off, size] : from) {
      blocks.push_back({0, 0, off, at, size});
      std::copy_n(source.begin() + static_cast<long>(off), size, expect.begin() + static_cast<long>(at));
      at += size + 7;
    }
    ASSERT_LT(at, (k + 1) * kPart);
    Transfer w = pair.ca->write_blocks_async(pp.pools, blocks, "k");
    ASSERT_TRUE(w.wait(after(60s)).ok()) << w.status().to_string();
    auto note = pair.cb->wait_notification(after(10s));
    ASSERT_TRUE(note.ok()) << note.status().to_string();
    if (k == 1) {
      // The first batch opened the peer's pool (the general path, launched);
      // this one went to a resident kernel: synchronizing GPU 0's context
      // waits for it to linger out (a launched kernel ended with its batch).
      auto t0 = std::chrono::steady_clock::now();
      ASSERT_EQ(d.ctx_synchronize(), cu::kSuccess);
      EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms) << "no gather kernel stayed on the GPU after a batch";
    }
  }
  d.stream_destroy(stream);
  expect_pool(pp.dst.data(), expect, "the target pool");
}

constexpr TransportChoice kTcp = TransportChoice::kTcp;
constexpr TransportChoice kLocal = TransportChoice::kLocal;

TEST(GpuBlocks, GpuToGpuOverTcp) { blocks_between(0, second_gpu(), kTcp); }
TEST(GpuBlocks, GpuToHostOverTcp) { blocks_between(0, -1, kTcp); }
TEST(GpuBlocks, HostToGpuOverTcp) { blocks_between(-1, second_gpu(), kTcp); }
TEST(GpuBlocks, GpuToGpuOnTheLocalTransportInOneProcess) { blocks_between(0, second_gpu(), kLocal); }
TEST(GpuBlocks, GpuToTheSameGpuOnTheLocalTransportInOneProcess) { blocks_between(0, 0, kLocal); }
TEST(GpuBlocks, GpuToGpuOnTheLocalTransportWithTheGatherKernelResident) {
  blocks_between(0, second_gpu(), kLocal, 2ms);
}
TEST(GpuBlocks, GpuToHostOnTheLocalTransportInOneProcess) { blocks_between(0, -1, kLocal); }
TEST(GpuBlocks, HostToGpuOnTheLocalTransportInOneProcess) { blocks_between(-1, second_gpu(), kLocal); }

}  // namespace
}  // namespace ferry::testing
