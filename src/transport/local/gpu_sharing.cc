// CUDA IPC and virtual-memory handles for local peers.
#include "transport/local/gpu_sharing.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "gpu/ipc_memory.h"
#include "transport/local/cross_memory.h"

namespace ferry::local {

int local_ordinal_of(const std::array<char, 16>& pci) { return platform::gpu_ordinal_of(pci); }

// ---- exports -----------------------------------------------------------------

GpuExports::~GpuExports() {
  for (auto& [key, a] : allocs_) {
    if (a.fd >= 0) ::close(a.fd);
  }
}

Result<GpuExports::Alloc> GpuExports::make(uint64_t address, int device) {
  FERRY_ASSIGN_OR_RETURN(platform::ExportedAllocation e, platform::export_gpu_allocation(address, device));
  Alloc a;
  a.base = e.base;
  a.size = e.size;
  a.type = e.type;
  a.fd = e.fd;
  a.ipc = e.ipc;
  a.pci = platform::gpu_pci_field(device);
  return a;
}

Status GpuExports::describe(const core::MemorySpan& span, std::vector<SharedSpan>& out) {
  const Region& r = span.region->region;
  if (r.kind != MemoryKind::kCuda) {
    SharedSpan s;
    s.kind = r.kind;
    s.address = reinterpret_cast<uintptr_t>(span.data);
    s.length = span.size;
    out.push_back(s);
    return Status();
  }
  uint64_t at = reinterpret_cast<uintptr_t>(span.data);
  uint64_t end = at + span.size;
  while (at < end) {
    Alloc a;
    {
      platform::MutexLock lock(mu_);
      // The allocation containing `at`, if made before for this region.
      auto it = allocs_.upper_bound({r.id, at});
      if (it != allocs_.begin()) {
        --it;
        if (it->first.first == r.id && it->second.base <= at && at < it->second.base + it->second.size) a = it->second;
      }
    }
    if (a.size == 0) {
      FERRY_ASSIGN_OR_RETURN(a, make(at, r.device));
      platform::MutexLock lock(mu_);
      auto [it, fresh] = allocs_.emplace(std::make_pair(r.id, a.base), a);
      if (fresh) it->second.id = next_id_++;
      if (!fresh && a.fd >= 0) ::close(a.fd);  // another thread made it first
      a = it->second;
    }
    SharedSpan s;
    s.kind = MemoryKind::kCuda;
    s.handle_type = a.type;
    s.device = r.device;
    s.address = at;
    s.length = std::min(end, a.base + a.size) - at;
    s.alloc_base = a.base;
    s.alloc_size = a.size;
    s.fd = a.fd;
    s.alloc_id = a.id;
    s.pci = a.pci;
    s.ipc = a.ipc;
    out.push_back(s);
    at += s.length;
  }
  return Status();
}

void GpuExports::retire(uint64_t region_id) {
  platform::MutexLock lock(mu_);
  for (auto it = allocs_.lower_bound({region_id, 0}); it != allocs_.end() && it->first.first == region_id;) {
    if (it->second.fd >= 0) ::close(it->second.fd);
    it = allocs_.erase(it);
  }
}

// ---- imports -----------------------------------------------------------------

GpuImports::~GpuImports() {
  platform::MutexLock lock(mu_);
  for (auto& [key, m] : maps_) close(m);
  for (const Mapping& m : held_) close(m);
}

void GpuImports::close_held() {
  if (held_.empty()) return;
  platform::StreamSignals::Quiet quiet(signals_.get());
  if (!quiet.ok()) return;
  for (const Mapping& m : held_) close(m);
  held_.clear();
}

void GpuImports::close(const Mapping& m) {
  if (m.own) return;
  platform::close_gpu_mapping({m.local, m.size}, m.type, m.device);
}

Result<uint8_t*> GpuImports::map(const void* user, uint64_t peer_engine, pid_t peer_pid, const SharedSpan& span,
                                 int device) {
  FERRY_ASSIGN_OR_RETURN(Opened opened, open(user, peer_engine, peer_pid, span, device));
  return locate(opened, span);
}

Result<uint8_t*> GpuImports::locate(const Opened& opened, const SharedSpan& span) {
  // decode_spans checked the span against the allocation it names; the
  // mapping's size is what was opened (the first claim, or less).
  uint64_t at = span.address - span.alloc_base;
  if (span.alloc_base != opened.base || span.alloc_id != opened.alloc_id || span.address < span.alloc_base ||
      at > opened.size || span.length > opened.size - at) {
    return Status(Code::kDataLoss, "a GPU span of " + std::to_string(span.length) + " bytes at offset " +
                                       std::to_string(at) + " runs past the peer's allocation of " +
                                       std::to_string(opened.size) + " bytes");
  }
  return opened.local + at;
}

Result<GpuImports::Opened> GpuImports::open(const void* user, uint64_t peer_engine, pid_t peer_pid,
                                            const SharedSpan& span, int device) {
  auto key = std::make_tuple(peer_pid, peer_engine, span.alloc_base, span.alloc_id, device);
  platform::MutexLock lock(mu_);
  close_held();
  auto it = maps_.find(key);
  if (it == maps_.end()) {
    const size_t held_for_peer = static_cast<size_t>(std::count_if(held_.begin(), held_.end(), [&](const Mapping& h) {
      return h.peer_pid == peer_pid && h.peer_engine == peer_engine;
    }));
    if (held_for_peer >= kMaxHeldPerPeer) {
      return Status(Code::kResourceExhausted,
                    "the peer revoked " + std::to_string(held_for_peer) +
                        " GPU allocations this process still maps, because an application stream waits on a "
                        "transfer and closing them would wait for that stream; no more of the peer's allocations are "
                        "opened until the stream's wait ends");
    }
    Mapping m;
    m.device = device;
    m.type = span.handle_type;
    m.size = span.alloc_size;
    if (span.handle_type == HandleType::kLegacy && peer_pid == ::getpid()) {
      // CUDA opens no IPC handle in the process that made it.
      FERRY_ASSIGN_OR_RETURN(m, map_own(span, device));
    } else {
      platform::MappedAllocation mapped;
      if (span.handle_type == HandleType::kLegacy) {
        FERRY_ASSIGN_OR_RETURN(mapped, platform::open_ipc_allocation(span.ipc, span.alloc_size));
      } else {
        FERRY_ASSIGN_OR_RETURN(int fd, fetch_peer_fd(peer_pid, span.fd));
        Result<platform::MappedAllocation> r = platform::map_fd_allocation(fd, span.alloc_size, device);
        ::close(fd);
        FERRY_ASSIGN_OR_RETURN(mapped, std::move(r));
      }
      m.local = mapped.local;
      m.size = mapped.size;
    }
    m.peer_pid = peer_pid;
    m.peer_engine = peer_engine;
    it = maps_.emplace(key, m).first;
  }
  it->second.users.insert(user);
  const Mapping& m = it->second;
  return Opened{span.alloc_base, span.alloc_id, reinterpret_cast<uint8_t*>(m.local), m.size};
}

Result<GpuImports::Mapping> GpuImports::map_own(const SharedSpan& span, int device) {
  FERRY_ASSIGN_OR_RETURN(platform::MappedAllocation own,
                         platform::own_allocation(span.alloc_base, span.alloc_size, device));
  Mapping m;
  m.local = own.local;
  m.size = own.size;
  m.type = span.handle_type;
  m.device = device;
  m.own = true;
  return m;
}

void GpuImports::forget(const void* user, uint64_t peer_engine, pid_t peer_pid, uint64_t alloc_base) {
  platform::MutexLock lock(mu_);
  for (auto it = maps_.begin(); it != maps_.end();) {
    if (std::get<0>(it->first) == peer_pid && std::get<1>(it->first) == peer_engine &&
        (alloc_base == 0 || std::get<2>(it->first) == alloc_base)) {
      it->second.users.erase(user);
      if (it->second.users.empty()) {
        if (!it->second.own) held_.push_back(it->second);
        it = maps_.erase(it);
        continue;
      }
    }
    ++it;
  }
  close_held();
}

}  // namespace ferry::local
