// list_block_pieces, on host memory standing in for the pools: the pieces
// move exactly the bytes the blocks name and nothing else, runs of blocks
// that continue each other on both sides join, a piece never passes the cut,
// the count stays within most_block_pieces, and a list that needs more room
// than it was given says so without writing past it.
#include "transport/local/block_pieces.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

namespace ferry::local {
namespace {

using platform::GatherPiece;

struct Pools {
  std::vector<std::vector<uint8_t>> local, far;
  std::vector<uint8_t*> local_at, far_at;
};

Pools make_pools(size_t n, size_t bytes, std::mt19937_64& rng) {
  Pools p;
  for (size_t i = 0; i < n; ++i) {
    auto& l = p.local.emplace_back(bytes);
    auto& f = p.far.emplace_back(bytes);
    for (auto* v : {&l, &f}) {
      for (size_t at = 0; at + 8 <= bytes; at += 8) {
        uint64_t r = rng();
        std::memcpy(v->data() + at, &r, 8);
      }
    }
  }
  for (auto& l : p.local) p.local_at.push_back(l.data());
  for (auto& f : p.far) p.far_at.push_back(f.data());
  return p;
}

// A batch in which blocks often continue the one before on both sides, at
// times on one side only, and otherwise start a run elsewhere; no two blocks
// share a byte of the target, sizes from 0 to 3 cuts.
std::vector<Block> make_blocks(size_t count, size_t pools, size_t pool_bytes, uint64_t cut, std::mt19937_64& rng) {
  std::vector<Block> out;
  std::vector<uint64_t> local_end(pools, 0), far_end(pools, 0);  // next free byte of each pool
  for (size_t i = 0; i < count; ++i) {
    Block b;
    uint64_t pick = rng() % 10;
    b.size = pick == 0 ? 0 : pick < 5 ? 1 + rng() % 4096 : 1 + rng() % (3 * cut);
    const Block* prev = out.empty() ? nullptr : &out.back();
    bool both = prev != nullptr && rng() % 3 != 0;
    bool far_only = prev != nullptr && !both && rng() % 4 == 0;
    if (both || far_only) {
      b.local_pool = prev->local_pool;
      b.remote_pool = prev->remote_pool;
      b.remote_offset = prev->remote_offset + prev->size;
      b.local_offset = both ? prev->local_offset + prev->size : local_end[b.local_pool] + 1 + rng() % 64;
    } else {
      b.local_pool = static_cast<uint32_t>(rng() % pools);
      b.remote_pool = static_cast<uint32_t>(rng() % pools);
      b.local_offset = local_end[b.local_pool] + rng() % 64;
      b.remote_offset = far_end[b.remote_pool] + rng() % 64;
    }
    if (b.local_offset + b.size > pool_bytes || b.remote_offset + b.size > pool_bytes) break;
    local_end[b.local_pool] = std::max(local_end[b.local_pool], b.local_offset + b.size);
    far_end[b.remote_pool] = std::max(far_end[b.remote_pool], b.remote_offset + b.size);
    out.push_back(b);
  }
  return out;
}

TEST(BlockPieces, MoveExactlyTheBlocksBytesInRunsCutAtTheLimit) {
  std::mt19937_64 rng(20261128);
  for (uint64_t cut : {uint64_t{65536}, uint64_t{4096}, uint64_t{1000}}) {
    for (int round = 0; round < 20; ++round) {
      constexpr size_t kPools = 3, kPoolBytes = 2 << 20;
      Pools p = make_pools(kPools, kPoolBytes, rng);
      std::vector<Block> blocks = make_blocks(1 + rng() % 400, kPools, kPoolBytes, cut, rng);
      uint64_t bytes = 0;
      for (const Block& b : blocks) bytes += b.size;

      // What the blocks name, moved block by block; the runs and pieces the
      // joining should give.
      std::vector<std::vector<uint8_t>> want = p.far;
      size_t want_runs = 0, want_pieces = 0;
      uint64_t run = 0;
      const Block* last = nullptr;
      for (const Block& b : blocks) {
        if (b.size == 0) continue;
        std::memcpy(want[b.remote_pool].data() + b.remote_offset, p.local[b.local_pool].data() + b.local_offset,
                    b.size);
        bool joins = last != nullptr && last->local_pool == b.local_pool && last->remote_pool == b.remote_pool &&
                     last->local_offset + last->size == b.local_offset &&
                     last->remote_offset + last->size == b.remote_offset;
        if (!joins) {
          want_pieces += (run + cut - 1) / cut;
          run = 0;
          ++want_runs;
        }
        run += b.size;
        last = &b;
      }
      want_pieces += (run + cut - 1) / cut;

      const size_t room = most_block_pieces(blocks.size(), bytes, cut);
      std::vector<GatherPiece> out(room + 1);
      const GatherPiece guard{reinterpret_cast<uint8_t*>(1), reinterpret_cast<const uint8_t*>(2), 3};
      out[room] = guard;
      size_t runs = 0;
      if (want_pieces > 0) {
        // One piece short of the room it needs: it says so, and stays inside.
        EXPECT_FALSE(list_block_pieces(p.far_at, p.local_at, blocks, cut, out.data(), want_pieces - 1, runs));
        EXPECT_TRUE(list_block_pieces(p.far_at, p.local_at, blocks, cut, out.data(), want_pieces, runs));
      }
      std::optional<size_t> listed = list_block_pieces(p.far_at, p.local_at, blocks, cut, out.data(), room, runs);
      ASSERT_TRUE(listed) << "cut " << cut << " round " << round;
      const size_t n = *listed;
      ASSERT_LE(n, room) << "cut " << cut << " round " << round;
      EXPECT_EQ(out[room].dst, guard.dst) << "wrote past the room it was given";
      EXPECT_EQ(runs, want_runs) << "cut " << cut << " round " << round;
      EXPECT_EQ(n, want_pieces) << "cut " << cut << " round " << round;
      uint64_t moved = 0;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_GT(out[i].n, 0u);
        ASSERT_LE(out[i].n, cut);
        moved += out[i].n;
        std::memcpy(out[i].dst, out[i].src, out[i].n);  // into p.far, as the kernel would
      }
      EXPECT_EQ(moved, bytes);
      for (size_t i = 0; i < kPools; ++i) {
        ASSERT_TRUE(p.far[i] == want[i]) << "far pool " << i << ", cut " << cut << " round " << round;
      }
    }
  }
}

TEST(BlockPieces, EmptyBlocksListNothingAndDoNotBreakARun) {
  std::vector<uint8_t> here(64), there(64);
  std::vector<uint8_t*> local{here.data()}, far{there.data()};
  std::vector<Block> blocks{{0, 0, 0, 0, 8}, {0, 0, 8, 8, 0}, {0, 0, 8, 8, 8}, {0, 0, 40, 16, 4}};
  std::vector<GatherPiece> out(most_block_pieces(blocks.size(), 20, 64));
  size_t runs = 0;
  ASSERT_EQ(list_block_pieces(far, local, blocks, 64, out.data(), out.size(), runs), 2u);
  EXPECT_EQ(runs, 2u);
  EXPECT_EQ(out[0].dst, there.data());
  EXPECT_EQ(out[0].n, 16u);
  EXPECT_EQ(out[1].src, here.data() + 40);
  EXPECT_EQ(out[1].n, 4u);

  std::vector<Block> none{{0, 0, 3, 5, 0}};
  EXPECT_EQ(list_block_pieces(far, local, none, 64, out.data(), 0, runs), 0u);
  EXPECT_EQ(runs, 0u);
}

}  // namespace
}  // namespace ferry::local
