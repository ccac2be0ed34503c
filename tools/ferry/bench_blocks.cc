// Block layouts of `ferry bench --blocks` (see bench_blocks.h).
#include "ferry/bench_blocks.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace ferry::cli {

std::vector<BlockPlace> block_layout(uint64_t blocks, uint64_t block_bytes, bool scatter, int i) {
  std::vector<BlockPlace> places(blocks);
  if (!scatter) {
    for (uint64_t k = 0; k < blocks; ++k) places[k] = {k * block_bytes, k * block_bytes};
    return places;
  }
  // Fixed seeds: the target computes the same places as the initiator.
  std::mt19937_64 rng(0x5107 + static_cast<uint64_t>(i % kBlockLayouts));
  std::vector<uint64_t> src(2 * blocks), dst(2 * blocks);
  std::iota(src.begin(), src.end(), 0);
  std::iota(dst.begin(), dst.end(), 0);
  std::shuffle(src.begin(), src.end(), rng);
  std::shuffle(dst.begin(), dst.end(), rng);
  for (uint64_t k = 0; k < blocks; ++k) places[k] = {src[k] * block_bytes, dst[k] * block_bytes};
  return places;
}

}  // namespace ferry::cli
