// list_block_pieces: a batch of blocks between prepared pools as the gather
// kernel's list of pieces, written in one pass wherever the kernel reads it
// (a pinned table): a KV cache's batch of a thousand 4 KiB blocks spent
// more time on the host being listed twice than the kernel spent moving it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "ferry/memory.h"
#include "gpu/gather_kernel.h"

namespace ferry::local {

// The most pieces list_block_pieces writes for `blocks` of `bytes` in all,
// cut every `cut` bytes.
inline size_t most_block_pieces(size_t blocks, uint64_t bytes, uint64_t cut) {
  return blocks + static_cast<size_t>(bytes / cut);
}

// Lists `blocks`, whose pools start at `local` here and at `far` there
// (blocks already checked against their pools), into `out`, which has room
// for `room` pieces: blocks that continue each other on both sides join into
// one run, and a piece ends every `cut` bytes of a run (no block of the
// kernel's threads then holds up the rest). Empty blocks are skipped.
// Returns how many pieces, and sets `runs` to how many runs; nullopt, with
// `out` partly written, when they need more room. most_block_pieces() of
// room always does.
std::optional<size_t> list_block_pieces(std::span<uint8_t* const> far, std::span<uint8_t* const> local,
                                        std::span<const Block> blocks, uint64_t cut, platform::GatherPiece* out,
                                        size_t room, size_t& runs);

}  // namespace ferry::local
