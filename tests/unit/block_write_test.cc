// A KV cache's write: hundreds of small blocks scattered over several
// registered pools, written one-sided as one operation with one
// notification, over both transports between two engines of this process.
// Random bytes, odd block sizes and offsets, adjacent blocks (which travel
// joined), blocks cut by chunk boundaries; every byte of the target checked,
// the ones no block aims at included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

constexpr uint8_t kUntouched = 0xA5;

struct Pools {
  std::vector<std::vector<uint8_t>> src, dst;  // initiator's and target's
  std::vector<Region> src_regions;
  std::vector<RemoteDescriptor> dst_exports;
};

Pools make_pools(EnginePair& p, size_t count, size_t bytes, std::mt19937_64& rng) {
  Pools pools;
  for (size_t i = 0; i < count; ++i) {
    pools.src.emplace_back(bytes);
    for (auto& v : pools.src.back()) v = static_cast<uint8_t>(rng());
    pools.dst.emplace_back(bytes, kUntouched);
    pools.src_regions.push_back(p.a->reg(pools.src.back().data(), bytes).value());
    Region r = p.b->reg(pools.dst.back().data(), bytes).value();
    pools.dst_exports.push_back(p.b->export_region(r).value());
  }
  return pools;
}

struct Block {
  size_t src_pool, src_offset, dst_pool, dst_offset, size;
};

// `count` blocks of `lo`..`hi` bytes at random places that do not overlap on
// the target; every fourth one continues the previous one on both sides.
std::vector<Block> scatter(const Pools& pools, size_t count, size_t lo, size_t hi, std::mt19937_64& rng) {
  const size_t bytes = pools.dst.front().size();
  std::vector<std::vector<bool>> taken(pools.dst.size(), std::vector<bool>(bytes / 16 + 1));
  auto free_at = [&](size_t pool, size_t off, size_t size) {
    for (size_t u = off / 16; u <= (off + size - 1) / 16; ++u) {
      if (taken[pool][u]) return false;
    }
    return true;
  };
  auto take = [&](size_t pool, size_t off, size_t size) {
    // Whole 16-byte units around it, so that neighbours keep a gap.
    for (size_t u = off / 16; u <= (off + size - 1) / 16 && u < taken[pool].size(); ++u) taken[pool][u] = true;
  };
  std::vector<Block> blocks;
  for (size_t tries = 0; blocks.size() < count && tries < 1'000'000; ++tries) {
    size_t size = lo + rng() % (hi - lo + 1);
    Block b{};
    bool placed = false;
    if (blocks.size() % 4 == 3 && blocks.back().dst_offset + blocks.back().size + size <= bytes &&
        blocks.back().src_offset + blocks.back().size + size <= bytes) {
      const Block& prev = blocks.back();
      b = {prev.src_pool, prev.src_offset + prev.size, prev.dst_pool, prev.dst_offset + prev.size, size};
      // Adjacent to the previous one, whose last unit it may share.
      placed = true;
      for (size_t u = (b.dst_offset + 15) / 16; u <= (b.dst_offset + size - 1) / 16; ++u) {
        placed = placed && !taken[b.dst_pool][u];
      }
    }
    if (!placed) {
      b = {rng() % pools.src.size(), rng() % (bytes - size), rng() % pools.dst.size(), rng() % (bytes - size), size};
      if (!free_at(b.dst_pool, b.dst_offset, size)) continue;
    }
    take(b.dst_pool, b.dst_offset, size);
    blocks.push_back(b);
  }
  return blocks;
}

std::vector<WriteItem> items_of(const Pools& pools, const std::vector<Block>& blocks) {
  std::vector<WriteItem> items;
  for (const Block& b : blocks) {
    items.push_back({pools.src[b.src_pool].data() + b.src_offset, b.size, pools.dst_exports[b.dst_pool], b.dst_offset});
  }
  return items;
}

// Every target byte is the source's where a block aimed it, untouched elsewhere.
void expect_landed(const Pools& pools, const std::vector<Block>& blocks) {
  std::vector<std::vector<uint8_t>> expect;
  for (const auto& d : pools.dst) expect.emplace_back(d.size(), kUntouched);
  for (const Block& b : blocks) {
    std::memcpy(expect[b.dst_pool].data() + b.dst_offset, pools.src[b.src_pool].data() + b.src_offset, b.size);
  }
  for (size_t i = 0; i < expect.size(); ++i) {
    auto diff = std::mismatch(expect[i].begin(), expect[i].end(), pools.dst[i].begin());
    ASSERT_TRUE(diff.first == expect[i].end())
        << "pool " << i << " differs at byte " << (diff.first - expect[i].begin()) << " of " << expect[i].size();
  }
}

class BlockWrite : public ::testing::TestWithParam<const char*> {};

TEST_P(BlockWrite, HundredsOfScatteredBlocksLandWithOneNotificationAfterThem) {
  EnginePair p = connect_pair(GetParam());
  ASSERT_TRUE(p.ca && p.cb);
  std::mt19937_64 rng(31);
  Pools pools = make_pools(p, 3, 3 << 20, rng);
  for (auto [count, lo, hi] : {std::tuple<size_t, size_t, size_t>{256, 16384, 16384}, {1024, 4096, 4096},
                               {700, 1, 9000}, {10, 1, 600000}}) {
    std::vector<Block> blocks = scatter(pools, count, lo, hi, rng);
    ASSERT_EQ(blocks.size(), count) << "no room for the blocks: the test is wrong";
    for (auto& d : pools.dst) std::fill(d.begin(), d.end(), kUntouched);
    std::string note = "kv " + std::to_string(count);
    Transfer t = p.ca->writev_async(items_of(pools, blocks), note);
    ASSERT_TRUE(t.wait(after(30s)).ok()) << t.status().to_string();
    size_t total = 0;
    for (const Block& b : blocks) total += b.size;
    EXPECT_EQ(t.bytes(), total);
    // The notification is there once the write completed; the data before it.
    auto got = p.cb->wait_notification(after(10s));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, note);
    ASSERT_NO_FATAL_FAILURE(expect_landed(pools, blocks)) << count << " blocks of " << lo << ".." << hi;
  }
}

TEST_P(BlockWrite, ManyBatchesInFlightEachLandWhole) {
  EnginePair p = connect_pair(GetParam());
  ASSERT_TRUE(p.ca && p.cb);
  std::mt19937_64 rng(43);
  Pools pools = make_pools(p, 2, 4 << 20, rng);
  // Eight batches over disjoint blocks, all posted before any is awaited.
  std::vector<Block> all = scatter(pools, 8 * 64, 100, 20000, rng);
  ASSERT_EQ(all.size(), 8u * 64) << "no room for the blocks: the test is wrong";
  std::vector<Transfer> posted;
  for (size_t k = 0; k < 8; ++k) {
    std::vector<Block> part(all.begin() + static_cast<long>(k * 64), all.begin() + static_cast<long>((k + 1) * 64));
    posted.push_back(p.ca->writev_async(items_of(pools, part), "batch " + std::to_string(k)));
  }
  for (auto& t : posted) ASSERT_TRUE(t.wait(after(30s)).ok()) << t.status().to_string();
  for (size_t k = 0; k < 8; ++k) {
    auto got = p.cb->wait_notification(after(10s));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, "batch " + std::to_string(k));  // in the order they were posted
  }
  ASSERT_NO_FATAL_FAILURE(expect_landed(pools, all));
}

// A batch aimed partly at an export the target withdrew fails as a whole
// and gives its notification's number up: the next notification is not held
// back waiting for it.
TEST_P(BlockWrite, ABatchIntoAWithdrawnExportFailsAndItsNotificationIsSkipped) {
  EnginePair p = connect_pair(GetParam());
  ASSERT_TRUE(p.ca && p.cb);
  std::mt19937_64 rng(59);
  std::vector<uint8_t> src(1 << 20), live(1 << 20, kUntouched), gone(1 << 20, kUntouched);
  for (auto& v : src) v = static_cast<uint8_t>(rng());
  ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
  Region live_region = p.b->reg(live.data(), live.size()).value();
  Region gone_region = p.b->reg(gone.data(), gone.size()).value();
  RemoteDescriptor to_live = p.b->export_region(live_region).value();
  RemoteDescriptor to_gone = p.b->export_region(gone_region).value();
  ASSERT_TRUE(p.b->dereg(gone_region).ok());
  std::vector<WriteItem> items;
  for (size_t i = 0; i < 64; ++i) items.push_back({src.data() + i * 8192, 4096, i == 40 ? to_gone : to_live, i * 8192});
  Transfer t = p.ca->writev_async(items, "never");
  Status s = t.wait(after(30s));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.code() == Code::kNotFound || s.code() == Code::kPermissionDenied) << s.to_string();
  EXPECT_EQ(gone, std::vector<uint8_t>(gone.size(), kUntouched));
  ASSERT_TRUE(p.ca->notify("after", after(10s)).ok());
  auto got = p.cb->wait_notification(after(10s));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "after");
  EXPECT_TRUE(p.ca->health().ok()) << p.ca->health().to_string();
}

std::vector<ferry::Block> blocks_of(const std::vector<Block>& blocks) {
  std::vector<ferry::Block> out;
  for (const Block& b : blocks) {
    out.push_back({static_cast<uint32_t>(b.src_pool), static_cast<uint32_t>(b.dst_pool), b.src_offset, b.dst_offset,
                   b.size});
  }
  return out;
}

TEST_P(BlockWrite, PreparedPoolsCarryManyBlockWritesOfDifferentBlocks) {
  EnginePair p = connect_pair(GetParam());
  ASSERT_TRUE(p.ca && p.cb);
  std::mt19937_64 rng(71);
  Pools pools = make_pools(p, 3, 2 << 20, rng);
  auto prepared = p.ca->prepare_blocks(pools.src_regions, pools.dst_exports);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  EXPECT_EQ(prepared->local_pools(), 3u);
  EXPECT_EQ(prepared->remote_pools(), 3u);
  for (int round = 0; round < 4; ++round) {
    std::vector<Block> blocks = scatter(pools, 300, 1, 20000, rng);
    ASSERT_EQ(blocks.size(), 300u) << "no room for the blocks: the test is wrong";
    for (auto& d : pools.dst) std::fill(d.begin(), d.end(), kUntouched);
    std::string note = "round " + std::to_string(round);
    Transfer t = p.ca->write_blocks_async(*prepared, blocks_of(blocks), note);
    ASSERT_TRUE(t.wait(after(30s)).ok()) << t.status().to_string();
    auto got = p.cb->wait_notification(after(10s));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, note);
    ASSERT_NO_FATAL_FAILURE(expect_landed(pools, blocks)) << "round " << round;
  }
}

// Empty blocks move nothing and fail nothing: a batch of only empty blocks
// (or a vector write of empty items) completes with its notification
// delivered, and empty blocks among others are skipped; the connection keeps
// serving. (Over TCP a batch of nothing once went as a chunk naming no block,
// which the peer rightly took for a protocol violation.)
TEST_P(BlockWrite, EmptyBlocksMoveNothingAndBreakNothing) {
  EnginePair p = connect_pair(GetParam());
  ASSERT_TRUE(p.ca && p.cb);
  std::mt19937_64 rng(97);
  Pools pools = make_pools(p, 2, 1 << 20, rng);
  auto prepared = p.ca->prepare_blocks(pools.src_regions, pools.dst_exports).value();
  std::vector<ferry::Block> empty = {{0, 0, 64, 128, 0}, {1, 1, 0, 0, 0}};
  Status s = p.ca->write_blocks_async(prepared, empty, "nothing").wait(after(10s));
  EXPECT_TRUE(s.ok()) << s.to_string();
  auto got = p.cb->wait_notification(after(10s));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "nothing");
  EXPECT_EQ(pools.dst[0], std::vector<uint8_t>(1 << 20, kUntouched));
  // The same as a vector write of empty items.
  s = p.ca->writev_async(items_of(pools, {{0, 64, 0, 128, 0}, {1, 0, 1, 0, 0}}), "nothing either").wait(after(10s));
  EXPECT_TRUE(s.ok()) << s.to_string();
  got = p.cb->wait_notification(after(10s));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "nothing either");
  // Among others, over paths (more than fits inline).
  std::vector<Block> blocks = scatter(pools, 40, 3000, 9000, rng);
  std::vector<ferry::Block> with_empty;
  for (const Block& b : blocks) {
    with_empty.push_back({static_cast<uint32_t>(b.src_pool), static_cast<uint32_t>(b.dst_pool), b.src_offset,
                          b.dst_offset, b.size});
    with_empty.push_back({static_cast<uint32_t>(b.src_pool), static_cast<uint32_t>(b.dst_pool), 0, 0, 0});
  }
  s = p.ca->write_blocks_async(prepared, with_empty, "some").wait(after(30s));
  ASSERT_TRUE(s.ok()) << s.to_string();
  got = p.cb->wait_notification(after(10s));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "some");
  ASSERT_NO_FATAL_FAILURE(expect_landed(pools, blocks));
}

TEST_P(BlockWrite, BlocksOutsideTheirPoolsAreRefusedAndNothingIsPosted) {
  EnginePair p = connect_pair(GetParam());
  ASSERT_TRUE(p.ca && p.cb);
  std::mt19937_64 rng(83);
  Pools pools = make_pools(p, 2, 1 << 20, rng);
  auto prepared = p.ca->prepare_blocks(pools.src_regions, pools.dst_exports).value();
  const uint64_t n = 1 << 20;
  struct Bad {
    ferry::Block block;
    Code code;
  };
  for (const Bad& bad : {Bad{{2, 0, 0, 0, 16}, Code::kInvalidArgument}, Bad{{0, 5, 0, 0, 16}, Code::kInvalidArgument},
                         Bad{{0, 0, n - 8, 0, 16}, Code::kOutOfRange}, Bad{{0, 0, 0, n - 8, 16}, Code::kOutOfRange},
                         Bad{{1, 1, ~uint64_t{0} - 4, 0, 16}, Code::kOutOfRange},
                         Bad{{1, 1, 0, 0, ~uint64_t{0}}, Code::kOutOfRange}}) {
    // A good block first: the bad one must stop the whole write.
    std::vector<ferry::Block> blocks = {{0, 0, 0, 4096, 100}, bad.block};
    Status s = p.ca->write_blocks_async(prepared, blocks, "bad").wait(after(10s));
    EXPECT_EQ(s.code(), bad.code) << s.to_string();
    EXPECT_NE(s.message().find("block 1"), std::string::npos) << s.to_string();
  }
  EXPECT_EQ(pools.dst[0], std::vector<uint8_t>(n, kUntouched));
  EXPECT_FALSE(p.cb->poll_notification().has_value());
  // Pools prepared on another connection are not this one's.
  EnginePair q = connect_pair(GetParam());
  ASSERT_TRUE(q.ca);
  Status s = q.ca->write_blocks_async(prepared, std::vector<ferry::Block>{{0, 0, 0, 0, 8}}).wait(after(10s));
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  // Nor are a descriptor of another engine, or a region not registered.
  EXPECT_FALSE(p.ca->prepare_blocks(pools.src_regions, std::vector<RemoteDescriptor>{
                                                           q.b->export_region(q.b->reg(pools.dst[0].data(), 64).value())
                                                               .value()})
                   .ok());
  Region unregistered{0, pools.src[0].data() + 1, 10, MemoryKind::kHost, -1};
  std::vector<uint8_t> elsewhere(64);
  unregistered.base = elsewhere.data();
  EXPECT_EQ(p.ca->prepare_blocks(std::vector<Region>{unregistered}, pools.dst_exports).status().code(),
            Code::kNotFound);
}

TEST_P(BlockWrite, APoolDeregisteredAfterPreparingFailsTheWritesThatUseIt) {
  EnginePair p = connect_pair(GetParam());
  ASSERT_TRUE(p.ca && p.cb);
  std::mt19937_64 rng(97);
  Pools pools = make_pools(p, 2, 1 << 20, rng);
  auto prepared = p.ca->prepare_blocks(pools.src_regions, pools.dst_exports).value();
  ASSERT_TRUE(p.a->dereg(pools.src_regions[1]).ok());
  Status s = p.ca->write_blocks_async(prepared, std::vector<ferry::Block>{{1, 0, 0, 0, 4096}, {0, 0, 8192, 8192, 64}})
                 .wait(after(10s));
  EXPECT_EQ(s.code(), Code::kNotFound) << s.to_string();
  // The other pool still works.
  ASSERT_TRUE(p.ca->write_blocks_async(prepared, std::vector<ferry::Block>{{0, 1, 100, 200, 5000}}).wait(after(10s)).ok());
  EXPECT_EQ(0, std::memcmp(pools.dst[1].data() + 200, pools.src[0].data() + 100, 5000));
}

INSTANTIATE_TEST_SUITE_P(Transports, BlockWrite, ::testing::Values("tcp", "local"));

}  // namespace
}  // namespace ferry
