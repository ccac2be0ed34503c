// Registry of regions and exports.
#include "core/registry.h"

#include <cinttypes>
#include <cstdio>

#include "platform/crypto.h"

namespace ferry::core {
namespace {

std::string range_text(const void* p, size_t size) {
  char buf[80];
  std::snprintf(buf, sizeof(buf), "[%p, +%zu)", p, size);
  return buf;
}

}  // namespace

Result<Region> Registry::add(void* data, size_t size, platform::PointerKind kind) {
  if (data == nullptr) return Status(Code::kInvalidArgument, "reg: null pointer");
  if (size == 0) return Status(Code::kInvalidArgument, "reg: zero size at " + range_text(data, size));
  auto base = reinterpret_cast<uintptr_t>(data);
  if (base + size < base) return Status(Code::kInvalidArgument, "reg: range wraps around " + range_text(data, size));
  platform::WriterLock lock(mu_);
  auto [lo, hi] = by_base_.equal_range(base);
  for (auto it = lo; it != hi; ++it) {
    if (it->second->region.length == size) {
      ++it->second->registrations;
      return it->second->region;
    }
  }
  auto entry = std::make_shared<RegionEntry>();
  entry->region = Region{next_region_id_++, data, size, kind.kind, kind.device};
  by_base_.emplace(base, entry);
  by_id_.emplace(entry->region.id, entry);
  if (size > max_length_) max_length_ = size;
  return entry->region;
}

Status Registry::remove(uint64_t region_id) {
  RegionRef entry;
  {
    platform::WriterLock lock(mu_);
    auto it = by_id_.find(region_id);
    if (it == by_id_.end()) {
      return Status(Code::kNotFound, "dereg: region " + std::to_string(region_id) + " is not registered");
    }
    entry = it->second;
    if (--entry->registrations > 0) return Status();
    by_id_.erase(it);
    auto [lo, hi] = by_base_.equal_range(reinterpret_cast<uintptr_t>(entry->region.base));
    for (auto b = lo; b != hi; ++b) {
      if (b->second == entry) {
        by_base_.erase(b);
        break;
      }
    }
    if (auto owned = exports_by_region_.find(region_id); owned != exports_by_region_.end()) {
      for (uint64_t export_id : owned->second) exports_.erase(export_id);
      exports_by_region_.erase(owned);
    }
  }
  // Outside the table lock: wait for bytes moving in the region right now.
  platform::WriterLock retire(entry->access);
  entry->alive = false;
  return Status();
}

Result<RemoteDescriptor> Registry::export_slice(uint64_t engine_id, uint64_t region_id, uint64_t offset,
                                                uint64_t length) {
  platform::WriterLock lock(mu_);
  auto it = by_id_.find(region_id);
  if (it == by_id_.end()) {
    return Status(Code::kNotFound, "export: region " + std::to_string(region_id) + " is not registered");
  }
  const Region& r = it->second->region;
  if (offset > r.length) {
    return Status(Code::kOutOfRange, "export: offset " + std::to_string(offset) + " is past the end of region " +
                                         std::to_string(region_id) + " (" + std::to_string(r.length) + " bytes)");
  }
  if (length == 0) length = r.length - offset;
  if (length > r.length - offset) {
    return Status(Code::kOutOfRange, "export: slice [" + std::to_string(offset) + ", +" + std::to_string(length) +
                                         ") leaves region " + std::to_string(region_id) + " (" +
                                         std::to_string(r.length) + " bytes)");
  }
  RemoteDescriptor d;
  d.engine_id = engine_id;
  d.export_id = next_export_id_++;
  d.key = platform::random_u64();
  d.length = length;
  d.kind = r.kind;
  d.device = r.device;
  exports_.emplace(d.export_id, ExportEntry{d.key, it->second, offset, length});
  exports_by_region_[region_id].push_back(d.export_id);
  return d;
}

Result<MemorySpan> Registry::resolve_local(const void* p, size_t size, const char* what) const {
  auto addr = reinterpret_cast<uintptr_t>(p);
  platform::ReaderLock lock(mu_);
  const RegionEntry* partial = nullptr;
  auto it = by_base_.upper_bound(addr);
  while (it != by_base_.begin()) {
    --it;
    uintptr_t distance = addr - it->first;
    if (distance >= max_length_) break;  // no region at or before here reaches addr
    const Region& r = it->second->region;
    if (distance < r.length) {
      if (size <= r.length - distance) {
        return MemorySpan{it->second, static_cast<uint8_t*>(const_cast<void*>(p)), size};
      }
      partial = it->second.get();
    }
  }
  if (partial != nullptr) {
    return Status(Code::kOutOfRange, std::string(what) + " " + range_text(p, size) + " runs past the end of region " +
                                         std::to_string(partial->region.id) + " " +
                                         range_text(partial->region.base, partial->region.length));
  }
  return Status(Code::kNotFound, std::string(what) + " " + range_text(p, size) +
                                     " is not inside any registered region (register it with reg())");
}

Result<MemorySpan> within_export(const MemorySpan& whole, uint64_t offset, uint64_t size, uint64_t export_id) {
  if (offset > whole.size || size > whole.size - offset) {
    return Status(Code::kOutOfRange, "access [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                         ") leaves export " + std::to_string(export_id) + " of " +
                                         std::to_string(whole.size) + " bytes");
  }
  return MemorySpan{whole.region, whole.data + offset, static_cast<size_t>(size)};
}

Result<MemorySpan> Registry::resolve_whole_export(uint64_t export_id, uint64_t key) const {
  platform::ReaderLock lock(mu_);
  auto it = exports_.find(export_id);
  if (it == exports_.end()) {
    return Status(Code::kNotFound, "export " + std::to_string(export_id) +
                                       " does not exist here (never exported, or its region was deregistered)");
  }
  const ExportEntry& e = it->second;
  if (!platform::constant_time_equal(reinterpret_cast<const uint8_t*>(&e.key), reinterpret_cast<const uint8_t*>(&key),
                                     sizeof(key))) {
    return Status(Code::kPermissionDenied, "wrong key for export " + std::to_string(export_id));
  }
  auto* base = static_cast<uint8_t*>(e.region->region.base) + e.offset;
  return MemorySpan{e.region, base, static_cast<size_t>(e.length)};
}

Result<MemorySpan> Registry::resolve_export(uint64_t export_id, uint64_t key, uint64_t offset, uint64_t size) const {
  FERRY_ASSIGN_OR_RETURN(MemorySpan whole, resolve_whole_export(export_id, key));
  return within_export(whole, offset, size, export_id);
}

size_t Registry::region_count() const {
  platform::ReaderLock lock(mu_);
  return by_id_.size();
}

bool Registry::contains(uint64_t region_id) const {
  platform::ReaderLock lock(mu_);
  return by_id_.count(region_id) != 0;
}

}  // namespace ferry::core
