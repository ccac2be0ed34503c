// BlockTable: encoding and checking a batched write's block table (see block_table.h).
#include "transport/tcp/block_table.h"

#include <algorithm>

#include "wire/frame.h"

namespace ferry::tcp {

std::shared_ptr<const BlockTable> BlockTable::over_pools(std::span<const core::MemorySpan> local,
                                                        std::span<const RemoteDescriptor> remote,
                                                        std::span<const Block> blocks) {
  auto t = std::make_shared<BlockTable>();
  t->pools_ = true;
  t->local_.assign(local.begin(), local.end());
  t->remote_.assign(remote.begin(), remote.end());
  t->list_.reserve(blocks.size());
  t->starts_.reserve(blocks.size());
  for (const Block& b : blocks) {
    if (b.size == 0) continue;
    t->list_.push_back(b);
    t->starts_.push_back(t->total_);
    t->total_ += b.size;
    t->smallest_ = t->smallest_ == 0 ? b.size : std::min(t->smallest_, b.size);
  }
  return t;
}

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
  if (over_pools()) return smallest_;
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

RemoteBlock BlockTable::remote_at(size_t i) const {
  if (!over_pools()) return blocks_[i];
  const Block& b = list_[i];
  const RemoteDescriptor& r = remote_[b.remote_pool];
  return RemoteBlock{r.export_id, r.key, b.remote_offset, b.size};
}

size_t BlockTable::locate(uint64_t offset) const {
  // The last block starting at or before `offset`.
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
}

size_t BlockTable::encode(uint64_t offset, uint64_t size, std::string& out) const {
  if (size == 0) return 0;
  size_t n = 0;
  RemoteBlock pending;  // the entry being joined, written once the next one does not continue it
  auto flush = [&] {
    uint8_t e[kEntryBytes];
    wire::put_u64(e + 0, pending.export_id);
    wire::put_u64(e + 8, pending.key);
    wire::put_u64(e + 16, pending.offset);
    wire::put_u64(e + 24, pending.size);
    out.append(reinterpret_cast<const char*>(e), kEntryBytes);
    ++n;
  };
  const uint64_t end = offset + size;
  for (size_t i = locate(offset); offset < end; ++i) {
    RemoteBlock b = remote_at(i);
    uint64_t skip = offset - starts_[i];
    uint64_t take = std::min(b.size - skip, end - offset);
    if (pending.size != 0 && pending.export_id == b.export_id && pending.key == b.key &&
        pending.offset + pending.size == b.offset + skip) {
      pending.size += take;
    } else {
      if (pending.size != 0) flush();
      pending = RemoteBlock{b.export_id, b.key, b.offset + skip, take};
    }
    offset += take;
  }
  flush();
  return n;
}

bool BlockTable::any_gpu_source() const {
  return std::any_of(local_.begin(), local_.end(),
                     [](const core::MemorySpan& m) { return m.region->region.kind == MemoryKind::kCuda; });
}

void BlockTable::sources(uint64_t offset, uint64_t size, core::SegmentList& out) const {
  const uint64_t end = offset + size;
  for (size_t i = locate(offset); offset < end; ++i) {
    const Block& b = list_[i];
    const core::MemorySpan& pool = local_[b.local_pool];
    uint64_t skip = offset - starts_[i];
    uint64_t take = std::min(b.size - skip, end - offset);
    out.add(pool.region, pool.data + b.local_offset + skip, static_cast<size_t>(take));
    offset += take;
  }
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
