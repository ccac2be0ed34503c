// SegmentList: the bytes of one message or one remote access, as an ordered
// list of spans in registered regions, and the arithmetic that maps a chunk
// (offset, size) of the whole onto I/O vectors.
//
// Thread-compatible: built once when an operation is posted, then only read.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/registry.h"

namespace ferry::core {

// Contiguous bytes of a SegmentList inside one region, with that region's kind.
struct SpanPiece {
  uint8_t* data = nullptr;
  size_t size = 0;
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // GPU ordinal for kCuda
};

class SegmentList {
 public:
  void add(MemorySpan span);
  // The same for `size` bytes at `data` of `region`. A batch of blocks adds
  // thousands: the list holds one reference to a region for a run of spans
  // in it, and those spans' own references own nothing, so that neither
  // adding them nor copying or freeing the list touches the region's count
  // per span (a count written by two threads at once, the poster and the
  // thread freeing the previous batch, cost tens of nanoseconds a span).
  void add(const RegionRef& region, uint8_t* data, size_t size);
  // Room for `spans` spans, for a list whose length is known.
  void reserve(size_t spans) {
    spans_.reserve(spans);
    starts_.reserve(spans);
  }
  uint64_t total() const { return total_; }
  bool empty() const { return spans_.empty(); }
  const std::vector<MemorySpan>& spans() const { return spans_; }

  // Writes the iovecs covering [offset, offset+size) into `out` (appending).
  // REQUIRES: offset + size <= total().
  void slice(uint64_t offset, uint64_t size, std::vector<struct iovec>& out) const;

  // Like slice, with each piece's memory kind (appending to `out`).
  // REQUIRES: offset + size <= total().
  void pieces(uint64_t offset, uint64_t size, std::vector<SpanPiece>& out) const;

  // True if any span lies in GPU memory.
  bool has_gpu() const;

  // The spans touched by [offset, offset+size), for region access checks.
  void regions(uint64_t offset, uint64_t size, std::vector<const RegionRef*>& out) const;

  // The list of [offset, offset+size) of this one.
  // REQUIRES: offset + size <= total().
  SegmentList part(uint64_t offset, uint64_t size) const;

  // Copies [offset, offset+len) of `src` into the list at `offset`.
  void copy_in(uint64_t offset, const uint8_t* src, uint64_t len) const;

 private:
  // Index of the span holding byte `offset` and the offset inside it.
  size_t locate(uint64_t offset, uint64_t& inner) const;

  std::vector<MemorySpan> spans_;
  // What keeps the regions of spans whose reference owns nothing alive
  // (add(region, data, size)); a region may be here more than once.
  std::vector<RegionRef> held_;
  std::vector<uint64_t> starts_;  // starts_[i] = offset of spans_[i] in the whole
  uint64_t total_ = 0;
};

// For transports that cannot move GPU memory: the refusal they give up front.
inline Status gpu_not_supported(const char* what) {
  return Status(Code::kUnimplemented, std::string(what) + " is GPU memory, which this transport cannot move");
}

// Resolves (data, size) parts against `registry` into one SegmentList, in
// order, skipping empty parts. `what` names the buffer in errors. GPU memory
// is refused (gpu_not_supported) unless `allow_gpu`.
template <typename Buffer>
Result<SegmentList> resolve_parts(const Registry& registry, std::span<const Buffer> parts, const char* what,
                                  bool allow_gpu = false) {
  SegmentList list;
  for (const Buffer& part : parts) {
    if (part.size == 0) continue;
    auto span = registry.resolve_local(part.data, part.size, what);
    if (!span.ok()) return span.status();
    if (!allow_gpu && span->region->region.kind == MemoryKind::kCuda) return gpu_not_supported(what);
    list.add(std::move(span).value());
  }
  return list;
}

// Holds every region of a chunk open while its bytes move; ok() is false if
// any of them was deregistered.
class ChunkAccess {
 public:
  ChunkAccess(const SegmentList& list, uint64_t offset, uint64_t size);
  bool ok() const { return ok_; }

 private:
  std::vector<RegionAccess> accesses_;
  bool ok_ = true;
};

}  // namespace ferry::core
