// CUDA IPC and virtual-memory handles for local peers.
#include "transport/local/gpu_sharing.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "gpu/cuda_driver.h"
#include "gpu/memory_kind.h"
#include "transport/local/cross_memory.h"

namespace ferry::local {

namespace {
std::array<char, 16> pci_of(int device) {
  std::array<char, 16> out{};
  std::string s = platform::gpu_pci_address(device);
  std::memcpy(out.data(), s.data(), std::min(s.size(), out.size() - 1));
  return out;
}
}  // namespace

int local_ordinal_of(const std::array<char, 16>& pci) {
  const auto& d = platform::cuda();
  int count = 0;
  if (!d.available() || d.device_get_count(&count) != platform::cu::kSuccess) return -1;
  for (int i = 0; i < count; ++i) {
    if (pci_of(i) == pci) return i;
  }
  return -1;
}

// ---- exports -----------------------------------------------------------------

GpuExports::~GpuExports() {
  for (auto& [key, a] : allocs_) {
    if (a.fd >= 0) ::close(a.fd);
  }
}

Result<GpuExports::Alloc> GpuExports::make(uint64_t address, int device) {
  const auto& d = platform::cuda();
  platform::DeviceScope on(device);
  FERRY_RETURN_IF_ERROR(on.status());
  Alloc a;
  size_t size = 0;
  FERRY_RETURN_IF_ERROR(d.check(d.mem_get_address_range(&a.base, &size, address), "cuMemGetAddressRange"));
  a.size = size;
  a.pci = pci_of(device);
  int legacy = 0;
  if (d.pointer_get_attribute(&legacy, platform::cu::kPointerLegacyIpcCapable, address) == platform::cu::kSuccess &&
      legacy != 0) {
    platform::cu::IpcMemHandle h;
    FERRY_RETURN_IF_ERROR(d.check(d.ipc_get_mem_handle(&h, a.base), "cuIpcGetMemHandle"));
    a.type = HandleType::kLegacy;
    std::memcpy(a.ipc.data(), h.reserved, sizeof(h.reserved));
    return a;
  }
  // Virtual-memory API allocation: export the physical allocation as an fd.
  platform::cu::MemHandle handle = 0;
  FERRY_RETURN_IF_ERROR(d.check(d.mem_retain_allocation_handle(&handle, reinterpret_cast<void*>(a.base)),
                                "cuMemRetainAllocationHandle", Code::kUnimplemented));
  int fd = -1;
  Status s = d.check(d.mem_export_to_shareable_handle(&fd, handle, platform::cu::kHandleTypePosixFd, 0),
                     "cuMemExportToShareableHandle (the allocation must be created with POSIX fd handles allowed)",
                     Code::kUnimplemented);
  d.mem_release(handle);
  FERRY_RETURN_IF_ERROR(s);
  a.type = HandleType::kPosixFd;
  a.fd = fd;
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
  const auto& d = platform::cuda();
  if (!d.available()) return;
  if (m.own) return;
  platform::DeviceScope on(m.device);
  if (!on.status().ok()) return;
  if (m.type == HandleType::kLegacy) {
    d.ipc_close_mem_handle(m.local);
  } else {
    d.mem_unmap(m.local, m.size);
    d.mem_address_free(m.local, m.size);
  }
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
    const auto& d = platform::cuda();
    Mapping m;
    m.device = device;
    m.type = span.handle_type;
    m.size = span.alloc_size;
    if (span.handle_type == HandleType::kLegacy && peer_pid == ::getpid()) {
      // CUDA opens no IPC handle in the process that made it.
      FERRY_ASSIGN_OR_RETURN(m, map_own(span, device));
    } else if (span.handle_type == HandleType::kLegacy) {
      platform::cu::IpcMemHandle h;
      std::memcpy(h.reserved, span.ipc.data(), sizeof(h.reserved));
      FERRY_RETURN_IF_ERROR(d.check(d.ipc_open_mem_handle(&m.local, h, platform::cu::kIpcLazyPeerAccess),
                                    "cuIpcOpenMemHandle of the peer's GPU memory", Code::kUnavailable));
      // The size the peer claimed is checked against what was opened.
      platform::cu::DevicePtr base = 0;
      size_t real = 0;
      if (d.mem_get_address_range != nullptr && d.mem_get_address_range(&base, &real, m.local) == 0 && real < m.size) {
        m.size = real;
      }
    } else {
      FERRY_ASSIGN_OR_RETURN(int fd, fetch_peer_fd(peer_pid, span.fd));
      platform::cu::MemHandle h = 0;
      Status s = d.check(d.mem_import_from_shareable_handle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                            platform::cu::kHandleTypePosixFd),
                         "cuMemImportFromShareableHandle", Code::kUnavailable);
      ::close(fd);
      FERRY_RETURN_IF_ERROR(s);
      s = d.check(d.mem_address_reserve(&m.local, m.size, 0, 0, 0), "cuMemAddressReserve", Code::kResourceExhausted);
      if (s.ok()) {
        s = d.check(d.mem_map(m.local, m.size, 0, h, 0), "cuMemMap", Code::kUnavailable);
        if (!s.ok()) d.mem_address_free(m.local, m.size);
      }
      d.mem_release(h);  // the mapping holds its own reference
      FERRY_RETURN_IF_ERROR(s);
      platform::cu::MemAccessDesc access{{platform::cu::kLocationDevice, device}, platform::cu::kAccessReadWrite};
      s = d.check(d.mem_set_access(m.local, m.size, &access, 1), "cuMemSetAccess", Code::kUnavailable);
      if (!s.ok()) {
        d.mem_unmap(m.local, m.size);
        d.mem_address_free(m.local, m.size);
        return s;
      }
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
  const auto& d = platform::cuda();
  // The span's claim is checked against the allocation the driver knows at
  // that address, as an opened handle's would be. (Pointer attributes
  // answer for any GPU's memory; cuMemGetAddressRange only for the current
  // context's.)
  platform::cu::DevicePtr base = 0;
  size_t real = 0;
  int owner = -1;
  if (d.pointer_get_attribute(&base, platform::cu::kPointerRangeStart, span.alloc_base) != platform::cu::kSuccess ||
      d.pointer_get_attribute(&real, platform::cu::kPointerRangeSize, span.alloc_base) != platform::cu::kSuccess ||
      d.pointer_get_attribute(&owner, platform::cu::kPointerDeviceOrdinal, span.alloc_base) != platform::cu::kSuccess ||
      base != span.alloc_base) {
    return Status(Code::kDataLoss, "a GPU span names " + std::to_string(span.alloc_base) +
                                       ", which is not the start of a GPU allocation of this process");
  }
  if (owner != device) {
    // Copies and the gather kernel on `device` reach the owner's memory
    // directly, as an IPC handle opened with lazy peer access would.
    platform::cu::Device owner_device = 0;
    platform::cu::Context owner_context = nullptr;
    FERRY_RETURN_IF_ERROR(d.check(d.device_get(&owner_device, owner), "cuDeviceGet", Code::kUnavailable));
    FERRY_RETURN_IF_ERROR(
        d.check(d.primary_ctx_retain(&owner_context, owner_device), "cuDevicePrimaryCtxRetain", Code::kUnavailable));
    // The retain is kept: peer access lasts as long as the owner's context,
    // which must not end under this mapping.
    const platform::cu::Result r = d.ctx_enable_peer_access(owner_context, 0);
    if (r != platform::cu::kSuccess && r != platform::cu::kPeerAccessAlreadyEnabled) {
      return d.check(r, "cuCtxEnablePeerAccess", Code::kUnavailable)
          .with_context("GPU " + std::to_string(device) + " reaching GPU " + std::to_string(owner));
    }
  }
  Mapping m;
  m.local = span.alloc_base;
  m.size = std::min<uint64_t>(span.alloc_size, real);
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
