// SegmentList arithmetic.
#include "core/segments.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace ferry::core {

void SegmentList::add(MemorySpan span) {
  if (span.size == 0) return;
  if (!spans_.empty()) {
    // Continues the last span in the same region: one span (one I/O vector).
    MemorySpan& last = spans_.back();
    if (last.region.get() == span.region.get() && last.data + last.size == span.data) {
      last.size += span.size;
      total_ += span.size;
      return;
    }
  }
  starts_.push_back(total_);
  total_ += span.size;
  spans_.push_back(std::move(span));
}

void SegmentList::add(const RegionRef& region, uint8_t* data, size_t size) {
  if (size == 0) return;
  if (!spans_.empty()) {
    MemorySpan& last = spans_.back();
    if (last.region.get() == region.get() && last.data + last.size == data) {
      last.size += size;
      total_ += size;
      return;
    }
  }
  // Held once for the run of spans in this region; the span's reference
  // shares no ownership (aliasing an empty pointer), so copying it is free.
  if (held_.empty() || held_.back().get() != region.get()) held_.push_back(region);
  add(MemorySpan{RegionRef(RegionRef(), region.get()), data, size});
}

SegmentList SegmentList::part(uint64_t offset, uint64_t size) const {
  SegmentList out;
  if (size == 0) return out;
  out.held_ = held_;  // what its spans borrow from
  uint64_t inner = 0;
  for (size_t i = locate(offset, inner); size > 0; ++i, inner = 0) {
    const MemorySpan& s = spans_[i];
    uint64_t take = std::min<uint64_t>(s.size - inner, size);
    out.add(MemorySpan{s.region, s.data + inner, static_cast<size_t>(take)});
    size -= take;
  }
  return out;
}

size_t SegmentList::locate(uint64_t offset, uint64_t& inner) const {
  auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
  size_t i = static_cast<size_t>(it - starts_.begin()) - 1;
  inner = offset - starts_[i];
  return i;
}

void SegmentList::slice(uint64_t offset, uint64_t size, std::vector<struct iovec>& out) const {
  if (size == 0) return;
  uint64_t inner = 0;
  for (size_t i = locate(offset, inner); size > 0 && i < spans_.size(); ++i, inner = 0) {
    uint64_t n = std::min<uint64_t>(size, spans_[i].size - inner);
    out.push_back({spans_[i].data + inner, static_cast<size_t>(n)});
    size -= n;
  }
}

void SegmentList::pieces(uint64_t offset, uint64_t size, std::vector<SpanPiece>& out) const {
  if (size == 0) return;
  uint64_t inner = 0;
  for (size_t i = locate(offset, inner); size > 0 && i < spans_.size(); ++i, inner = 0) {
    uint64_t n = std::min<uint64_t>(size, spans_[i].size - inner);
    const Region& r = spans_[i].region->region;
    out.push_back({spans_[i].data + inner, static_cast<size_t>(n), r.kind, r.device});
    size -= n;
  }
}

bool SegmentList::has_gpu() const {
  return std::any_of(spans_.begin(), spans_.end(),
                     [](const MemorySpan& s) { return s.region->region.kind == MemoryKind::kCuda; });
}

void SegmentList::regions(uint64_t offset, uint64_t size, std::vector<const RegionRef*>& out) const {
  if (size == 0) return;
  uint64_t inner = 0;
  for (size_t i = locate(offset, inner); size > 0 && i < spans_.size(); ++i, inner = 0) {
    uint64_t n = std::min<uint64_t>(size, spans_[i].size - inner);
    out.push_back(&spans_[i].region);
    size -= n;
  }
}

void SegmentList::copy_in(uint64_t offset, const uint8_t* src, uint64_t len) const {
  std::vector<struct iovec> iov;
  slice(offset, len, iov);
  for (const auto& v : iov) {
    std::memcpy(v.iov_base, src, v.iov_len);
    src += v.iov_len;
  }
}

ChunkAccess::ChunkAccess(const SegmentList& list, uint64_t offset, uint64_t size) {
  std::vector<const RegionRef*> refs;
  list.regions(offset, size, refs);
  // A region appears once even if several spans of the chunk lie in it (its
  // lock is not recursive), and the regions are taken in one order, by
  // address, whatever order the spans name them in: two chunks of batched
  // writes over the same pools, taken on two threads, never wait on each
  // other's regions. A chunk has hundreds of spans in a few regions: each is
  // compared with the distinct ones only.
  std::vector<const RegionRef*> distinct;
  for (const RegionRef* r : refs) {
    auto same = [r](const RegionRef* d) { return d->get() == r->get(); };
    if (std::find_if(distinct.begin(), distinct.end(), same) == distinct.end()) distinct.push_back(r);
  }
  std::sort(distinct.begin(), distinct.end(),
            [](const RegionRef* a, const RegionRef* b) { return std::less<>()(a->get(), b->get()); });
  accesses_.reserve(distinct.size());
  for (const RegionRef* r : distinct) {
    accesses_.emplace_back(*r);
    if (!accesses_.back().ok()) ok_ = false;
  }
}

}  // namespace ferry::core
