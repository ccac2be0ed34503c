// SegmentList arithmetic.
#include "core/segments.h"

#include <algorithm>
#include <cstring>

namespace ferry::core {

void SegmentList::add(MemorySpan span) {
  if (span.size == 0) return;
  starts_.push_back(total_);
  total_ += span.size;
  spans_.push_back(std::move(span));
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
  accesses_.reserve(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    const RegionRef* r = refs[i];
    // A region appears once even if several spans of the chunk lie in it:
    // its lock is not recursive.
    bool seen = false;
    for (size_t j = 0; j < i; ++j) seen = seen || refs[j]->get() == r->get();
    if (seen) continue;
    accesses_.emplace_back(*r);
    if (!accesses_.back().ok()) ok_ = false;
  }
}

}  // namespace ferry::core
