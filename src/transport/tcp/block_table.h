// BlockTable: where the bytes of a batched write go in the peer's exports.
//
// Why this file exists: a write of many small scattered blocks (a KV cache's)
// travels over TCP as one operation. Its sources are concatenated into one
// byte stream that is cut into chunks like any write's; each chunk carries
// the part of this table that covers it, so the receiver checks and lands
// every chunk on its own, whatever path brings it. The table is the whole
// wire format of that part; docs/protocol.md describes it.
//
// A table is built block by block (add(), a WriteBatch's targets), or over
// prepared pools (over_pools(), write_blocks): the application's list is
// kept as given, and each chunk's entries and local spans are worked out on
// the path that sends it. Posting 1,024 blocks then costs a copy of the list
// instead of a table and a span list written block by block, which took
// about 80 us on a 32-CPU host before the first chunk could go.
//
// Entry on the wire, 32 bytes, little-endian: export id, key, offset in the
// export, size. A chunk's entries cover its payload exactly, in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/segments.h"
#include "ferry/memory.h"
#include "ferry/status.h"
#include "wire/messages.h"

namespace ferry::tcp {

struct RemoteBlock {
  uint64_t export_id = 0;
  uint64_t key = 0;
  uint64_t offset = 0;  // in the export
  uint64_t size = 0;
};

class BlockTable {
 public:
  static constexpr size_t kEntryBytes = wire::kBlockEntryBytes;
  // The most entries one chunk may carry; a receiver refuses more.
  static constexpr size_t kMaxEntriesPerChunk = wire::kMaxBlockEntries;

  // A table over prepared pools: `blocks` between this side's pools `local`
  // (each a whole region) and the peer's `remote` ones, in order; empty
  // blocks are skipped. REQUIRES: each block names pools that exist and lies
  // within both of them (the connection checked it).
  static std::shared_ptr<const BlockTable> over_pools(std::span<const core::MemorySpan> local,
                                                      std::span<const RemoteDescriptor> remote,
                                                      std::span<const Block> blocks);

  // Appends a block of the stream. One that continues the previous block in
  // the same export joins it (adjacent blocks travel as one). Empty: ignored.
  // REQUIRES: not over pools.
  void add(const RemoteBlock& b);
  // Blocks in the stream (at least as many as any chunk's entries).
  size_t size() const { return starts_.size(); }
  uint64_t total() const { return total_; }
  // The size of the smallest block (0 when empty).
  uint64_t smallest() const;
  // The largest chunk that carries at most kMaxEntriesPerChunk entries
  // wherever it is cut, at most `wanted`.
  uint64_t chunk_limit(uint64_t wanted) const;

  // Appends to `out` the entries that cover [offset, offset + size) of the
  // stream, clipped to it, blocks that follow each other in one export
  // joined; returns how many. REQUIRES: offset + size <= total().
  size_t encode(uint64_t offset, uint64_t size, std::string& out) const;

  // Over pools: whether the table knows the local bytes (sources()).
  bool over_pools() const { return pools_; }
  // Whether any local pool is GPU memory. REQUIRES: over_pools().
  bool any_gpu_source() const;
  // Appends the local bytes of [offset, offset + size) of the stream to
  // `out`, spans that follow each other joined. REQUIRES: over_pools(),
  // offset + size <= total().
  void sources(uint64_t offset, uint64_t size, core::SegmentList& out) const;

 private:
  RemoteBlock remote_at(size_t i) const;
  // Index of the block holding stream byte `offset`.
  size_t locate(uint64_t offset) const;

  std::vector<RemoteBlock> blocks_;  // built by add()
  // Over pools: the application's blocks and the pools they name.
  bool pools_ = false;
  std::vector<Block> list_;
  std::vector<core::MemorySpan> local_;
  std::vector<RemoteDescriptor> remote_;
  std::vector<uint64_t> starts_;  // where each block begins in the stream
  uint64_t total_ = 0;
  uint64_t smallest_ = 0;  // over pools (built by add(): worked out when asked)
};

// The `count` entries in `bytes` (count * kEntryBytes of them), checked:
// kDataLoss unless every entry is non-empty and their sizes add up to
// `payload` exactly. Appends to `out` (cleared first).
Status decode_block_table(std::span<const uint8_t> bytes, size_t count, uint64_t payload,
                          std::vector<RemoteBlock>& out);

}  // namespace ferry::tcp
