// BlockTable: encoding and checking a batched write's block table (see block_table.h).
#include "transport/tcp/block_table.h"

#include <algorithm>

#include "wire/frame.h"

namespace ferry::tcp {

void BlockTable::add(const RemoteBlock& b) {
  if (b.size == 0) return;
  if (!blocks_.empty()) {
    RemoteBlock& last = blocks_.back();
    if (last.export_id == b.export_id && last.key == b.key && last.offset + last.size == b.offset) {
      last.size += b.size;
      total_ += b.size;
      return;
    }
  }
  blocks_.push_back(b);
  starts_.push_back(total_);
  total_ += b.size;
}

uint64_t BlockTable::smallest() const {
  uint64_t m = 0;
  for (const RemoteBlock& b : blocks_) m = m == 0 ? b.size : std::min(m, b.size);
  return m;
}

uint64_t BlockTable::chunk_limit(uint64_t wanted) const {
  // A chunk cut anywhere holds at most (size - 2) / smallest + 2 blocks.
  uint64_t m = std::max<uint64_t>(smallest(), 1);
  uint64_t most = m * (kMaxEntriesPerChunk - 2) + 2;
  return std::max<uint64_t>(std::min(wanted, most), 1);
}

size_t BlockTable::encode(uint64_t offset, uint64_t size, std::string& out) const {
  if (size == 0) return 0;
  // The block holding `offset`: the last one starting at or before it.
  size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
  size_t n = 0;
  const uint64_t end = offset + size;
  for (uint64_t at = offset; at < end; ++i, ++n) {
    const RemoteBlock& b = blocks_[i];
    uint64_t skip = at - starts_[i];
    uint64_t take = std::min(b.size - skip, end - at);
    uint8_t e[kEntryBytes];
    wire::put_u64(e + 0, b.export_id);
    wire::put_u64(e + 8, b.key);
    wire::put_u64(e + 16, b.offset + skip);
    wire::put_u64(e + 24, take);
    out.append(reinterpret_cast<const char*>(e), kEntryBytes);
    at += take;
  }
  return n;
}

Status decode_block_table(std::span<const uint8_t> bytes, size_t count, uint64_t payload,
                          std::vector<RemoteBlock>& out) {
  out.clear();
  if (count == 0 || count > BlockTable::kMaxEntriesPerChunk || bytes.size() != count * BlockTable::kEntryBytes) {
    return Status(Code::kDataLoss, "block table of " + std::to_string(count) + " entries in " +
                                       std::to_string(bytes.size()) + " bytes (1 to " +
                                       std::to_string(BlockTable::kMaxEntriesPerChunk) + " entries of " +
                                       std::to_string(BlockTable::kEntryBytes) + " bytes each)");
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* e = bytes.data() + i * BlockTable::kEntryBytes;
    RemoteBlock b{wire::get_u64(e), wire::get_u64(e + 8), wire::get_u64(e + 16), wire::get_u64(e + 24)};
    if (b.size == 0 || b.size > payload - sum) {
      return Status(Code::kDataLoss, "block table entry " + std::to_string(i) + " of " + std::to_string(b.size) +
                                         " bytes: the entries must be non-empty and cover the chunk's " +
                                         std::to_string(payload) + " bytes exactly");
    }
    sum += b.size;
    out.push_back(b);
  }
  if (sum != payload) {
    return Status(Code::kDataLoss, "block table covers " + std::to_string(sum) + " bytes of a chunk of " +
                                       std::to_string(payload));
  }
  return Status();
}

}  // namespace ferry::tcp
