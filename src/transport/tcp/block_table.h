// BlockTable: where the bytes of a batched write go in the peer's exports.
//
// Why this file exists: a write of many small scattered blocks (a KV cache's)
// travels over TCP as one operation. Its sources are concatenated into one
// byte stream that is cut into chunks like any write's; each chunk carries
// the part of this table that covers it, so the receiver checks and lands
// every chunk on its own, whatever path brings it. The table is the whole
// wire format of that part; docs/protocol.md describes it.
//
// Entry on the wire, 32 bytes, little-endian: export id, key, offset in the
// export, size. A chunk's entries cover its payload exactly, in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ferry/status.h"

namespace ferry::tcp {

struct RemoteBlock {
  uint64_t export_id = 0;
  uint64_t key = 0;
  uint64_t offset = 0;  // in the export
  uint64_t size = 0;
};

class BlockTable {
 public:
  static constexpr size_t kEntryBytes = 32;
  // The most entries one chunk may carry; a receiver refuses more.
  static constexpr size_t kMaxEntriesPerChunk = 4096;

  // Appends a block of the stream. One that continues the previous block in
  // the same export joins it (adjacent blocks travel as one). Empty: ignored.
  void add(const RemoteBlock& b);
  size_t size() const { return blocks_.size(); }
  uint64_t total() const { return total_; }
  // The size of the smallest block (0 when empty).
  uint64_t smallest() const;
  // The largest chunk that carries at most kMaxEntriesPerChunk entries
  // wherever it is cut, at most `wanted`.
  uint64_t chunk_limit(uint64_t wanted) const;

  // Appends to `out` the entries that cover [offset, offset + size) of the
  // stream, clipped to it; returns how many. REQUIRES: offset + size <= total().
  size_t encode(uint64_t offset, uint64_t size, std::string& out) const;

 private:
  std::vector<RemoteBlock> blocks_;
  std::vector<uint64_t> starts_;  // where each block begins in the stream
  uint64_t total_ = 0;
};

// The `count` entries in `bytes` (count * kEntryBytes of them), checked:
// kDataLoss unless every entry is non-empty and their sizes add up to
// `payload` exactly. Appends to `out` (cleared first).
Status decode_block_table(std::span<const uint8_t> bytes, size_t count, uint64_t payload,
                          std::vector<RemoteBlock>& out);

}  // namespace ferry::tcp
