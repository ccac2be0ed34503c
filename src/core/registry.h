// Registry: the engine's table of registered regions and of the slices it
// exported to peers, and the only place that decides whether a local pointer
// or a peer's (export id, key, offset, size) may be touched.
//
// Thread-safe. Lookups take a shared lock on the table; moving bytes in or out
// of a region holds that region's own shared lock (RegionAccess), so dereg can
// wait for bytes landing at that instant and then guarantee that none land
// after it returns.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "ferry/memory.h"
#include "ferry/status.h"
#include "gpu/memory_kind.h"
#include "platform/mutex.h"

namespace ferry::core {

struct RegionEntry {
  Region region;
  int registrations = 1;         // guarded by the lock of the Registry that holds it
  platform::SharedMutex access;  // shared: bytes moving; exclusive: retiring
  bool alive GUARDED_BY(access) = true;
};
using RegionRef = std::shared_ptr<RegionEntry>;

// Bytes inside one registered region.
struct MemorySpan {
  RegionRef region;
  uint8_t* data = nullptr;
  size_t size = 0;
};

// Whether [p, p+size) lies inside `r`.
inline bool holds(const Region& r, const uint8_t* p, size_t size) {
  auto* base = static_cast<const uint8_t*>(r.base);
  return p >= base && static_cast<size_t>(p - base) <= r.length && size <= r.length - static_cast<size_t>(p - base);
}

// [offset, offset+size) of `whole`, export `export_id` (resolve_whole_export),
// or kOutOfRange if it leaves it.
Result<MemorySpan> within_export(const MemorySpan& whole, uint64_t offset, uint64_t size, uint64_t export_id);

// Holds a region open while bytes move; ok() is false once it was deregistered.
class RegionAccess {
 public:
  explicit RegionAccess(const RegionRef& r) : lock_(r->access) {
    r->access.assert_shared_held();  // by lock_, for as long as this object lives
    alive_ = r->alive;
  }
  bool ok() const { return alive_; }

 private:
  std::shared_lock<platform::SharedMutex> lock_;
  bool alive_;
};

class Registry {
 public:
  // Registers [data, data+size) of the given kind; the same range again
  // returns the same region with its count raised.
  Result<Region> add(void* data, size_t size, platform::PointerKind kind);
  // Drops one registration; the last one revokes the region's exports and
  // waits for bytes moving in it at this instant.
  Status remove(uint64_t region_id);
  // Exports [offset, offset+length) of a registered region (length 0: to the end).
  Result<RemoteDescriptor> export_slice(uint64_t engine_id, uint64_t region_id, uint64_t offset, uint64_t length);

  // The registered region holding [p, p+size). `what` names the buffer in
  // errors ("send buffer"). kNotFound / kOutOfRange.
  Result<MemorySpan> resolve_local(const void* p, size_t size, const char* what) const;
  // What a peer asks for: checks export id, key and bounds.
  // kNotFound (unknown or revoked export), kPermissionDenied (key),
  // kOutOfRange (bounds).
  Result<MemorySpan> resolve_export(uint64_t export_id, uint64_t key, uint64_t offset, uint64_t size) const;
  // The whole of an export, its key checked: a span of its `length` bytes.
  // For many accesses to one export (a batch's blocks), each then checked
  // against it with within(). kNotFound / kPermissionDenied.
  Result<MemorySpan> resolve_whole_export(uint64_t export_id, uint64_t key) const;

  size_t region_count() const;
  // Whether `region_id` is registered (still counted).
  bool contains(uint64_t region_id) const;

 private:
  struct ExportEntry {
    uint64_t key;
    RegionRef region;
    uint64_t offset;
    uint64_t length;
  };

  mutable platform::SharedMutex mu_;
  std::multimap<uintptr_t, RegionRef> by_base_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, RegionRef> by_id_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, ExportEntry> exports_ GUARDED_BY(mu_);
  size_t max_length_ GUARDED_BY(mu_) = 0;  // bounds the backward scan
  uint64_t next_region_id_ GUARDED_BY(mu_) = 1;
  uint64_t next_export_id_ GUARDED_BY(mu_) = 1;

  // Export ids of each region that has any, so that a dereg costs the
  // region's own exports rather than the whole table.
  std::unordered_map<uint64_t, std::vector<uint64_t>> exports_by_region_ GUARDED_BY(mu_);
};

}  // namespace ferry::core
