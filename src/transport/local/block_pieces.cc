// list_block_pieces.
#include "transport/local/block_pieces.h"

#include <algorithm>

namespace ferry::local {

std::optional<size_t> list_block_pieces(std::span<uint8_t* const> far, std::span<uint8_t* const> local,
                                        std::span<const Block> blocks, uint64_t cut, platform::GatherPiece* out,
                                        size_t room, size_t& runs) {
  size_t k = 0;
  runs = 0;
  for (const Block& b : blocks) {
    uint64_t n = b.size;
    if (n == 0) continue;
    uint8_t* dst = far[b.remote_pool] + b.remote_offset;
    const uint8_t* src = local[b.local_pool] + b.local_offset;
    platform::GatherPiece* last = k > 0 ? &out[k - 1] : nullptr;
    if (last != nullptr && last->dst + last->n == dst && last->src + last->n == src) {
      uint64_t join = std::min(cut - std::min(cut, last->n), n);  // what the last piece still takes
      last->n += join;
      dst += join;
      src += join;
      n -= join;
    } else {
      ++runs;
    }
    for (; n > 0; ++k) {
      if (k == room) return std::nullopt;
      uint64_t piece = std::min(cut, n);
      out[k] = {dst, src, piece};
      dst += piece;
      src += piece;
      n -= piece;
    }
  }
  return k;
}

}  // namespace ferry::local
