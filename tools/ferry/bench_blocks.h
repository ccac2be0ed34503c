// `ferry bench --blocks N --block-size S [--scatter]`: a KV cache's write.
//
// Why this file exists: serving stacks write hundreds of small blocks
// scattered in large registered pools as one operation. Each side's pool
// is twice the blocks' footprint (2N slots of S bytes); operation i writes
// N blocks from slots of the initiator's pool into slots of the target's,
// chosen at random (--scatter) or the first N in order (adjacent blocks,
// which travel as one). Both sides derive the same layout from the session's
// configuration, so the target can check what landed.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::cli {

// Where one block is read from and written to, in bytes into each pool.
struct BlockPlace {
  uint64_t src = 0;
  uint64_t dst = 0;
};

// Operations cycle through this many layouts (built once, before timing).
inline constexpr int kBlockLayouts = 8;
// The timed operations go in this many slices, a slice of contiguous writes
// then one of batches, in turn.
inline constexpr int kBlockSlices = 10;
// The most blocks one operation may have.
inline constexpr uint64_t kMaxBlocks = uint64_t{1} << 20;

// The layout of operation `i`: `blocks` places of `block_bytes` each.
std::vector<BlockPlace> block_layout(uint64_t blocks, uint64_t block_bytes, bool scatter, int i);

}  // namespace ferry::cli
