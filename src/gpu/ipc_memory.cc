// Exporting, opening, mapping and closing GPU allocations across processes
// through the driver table.
#include "gpu/ipc_memory.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "gpu/cuda_driver.h"
#include "gpu/memory_kind.h"

namespace ferry::platform {

std::array<char, 16> gpu_pci_field(int ordinal) {
  std::array<char, 16> out{};
  std::string s = gpu_pci_address(ordinal);
  std::memcpy(out.data(), s.data(), std::min(s.size(), out.size() - 1));
  return out;
}

int gpu_ordinal_of(const std::array<char, 16>& pci) {
  const auto& d = cuda();
  int count = 0;
  if (!d.available() || d.device_get_count(&count) != cu::kSuccess) return -1;
  for (int i = 0; i < count; ++i) {
    if (gpu_pci_field(i) == pci) return i;
  }
  return -1;
}

Result<ExportedAllocation> export_gpu_allocation(uint64_t address, int device) {
  const auto& d = cuda();
  DeviceScope on(device);
  FERRY_RETURN_IF_ERROR(on.status());
  ExportedAllocation a;
  size_t size = 0;
  FERRY_RETURN_IF_ERROR(d.check(d.mem_get_address_range(&a.base, &size, address), "cuMemGetAddressRange"));
  a.size = size;
  int legacy = 0;
  if (d.pointer_get_attribute(&legacy, cu::kPointerLegacyIpcCapable, address) == cu::kSuccess && legacy != 0) {
    cu::IpcMemHandle h;
    FERRY_RETURN_IF_ERROR(d.check(d.ipc_get_mem_handle(&h, a.base), "cuIpcGetMemHandle"));
    a.type = GpuHandleType::kLegacy;
    std::memcpy(a.ipc.data(), h.reserved, sizeof(h.reserved));
    return a;
  }
  // Virtual-memory API allocation: export the physical allocation as an fd.
  cu::MemHandle handle = 0;
  FERRY_RETURN_IF_ERROR(d.check(d.mem_retain_allocation_handle(&handle, reinterpret_cast<void*>(a.base)),
                                "cuMemRetainAllocationHandle", Code::kUnimplemented));
  int fd = -1;
  Status s = d.check(d.mem_export_to_shareable_handle(&fd, handle, cu::kHandleTypePosixFd, 0),
                     "cuMemExportToShareableHandle (the allocation must be created with POSIX fd handles allowed)",
                     Code::kUnimplemented);
  d.mem_release(handle);
  FERRY_RETURN_IF_ERROR(s);
  a.type = GpuHandleType::kPosixFd;
  a.fd = fd;
  return a;
}

Result<MappedAllocation> open_ipc_allocation(const std::array<char, 64>& handle, uint64_t claimed) {
  const auto& d = cuda();
  cu::IpcMemHandle h;
  std::memcpy(h.reserved, handle.data(), sizeof(h.reserved));
  MappedAllocation m;
  m.size = claimed;
  FERRY_RETURN_IF_ERROR(d.check(d.ipc_open_mem_handle(&m.local, h, cu::kIpcLazyPeerAccess),
                                "cuIpcOpenMemHandle of the peer's GPU memory", Code::kUnavailable));
  // The size the peer claimed is checked against what was opened.
  cu::DevicePtr base = 0;
  size_t real = 0;
  if (d.mem_get_address_range != nullptr && d.mem_get_address_range(&base, &real, m.local) == 0 && real < m.size) {
    m.size = real;
  }
  return m;
}

Result<MappedAllocation> map_fd_allocation(int fd, uint64_t size, int device) {
  const auto& d = cuda();
  MappedAllocation m;
  m.size = size;
  cu::MemHandle h = 0;
  FERRY_RETURN_IF_ERROR(d.check(d.mem_import_from_shareable_handle(
                                    &h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), cu::kHandleTypePosixFd),
                                "cuMemImportFromShareableHandle", Code::kUnavailable));
  Status s = d.check(d.mem_address_reserve(&m.local, m.size, 0, 0, 0), "cuMemAddressReserve", Code::kResourceExhausted);
  if (s.ok()) {
    s = d.check(d.mem_map(m.local, m.size, 0, h, 0), "cuMemMap", Code::kUnavailable);
    if (!s.ok()) d.mem_address_free(m.local, m.size);
  }
  d.mem_release(h);  // the mapping holds its own reference
  FERRY_RETURN_IF_ERROR(s);
  cu::MemAccessDesc access{{cu::kLocationDevice, device}, cu::kAccessReadWrite};
  s = d.check(d.mem_set_access(m.local, m.size, &access, 1), "cuMemSetAccess", Code::kUnavailable);
  if (!s.ok()) {
    d.mem_unmap(m.local, m.size);
    d.mem_address_free(m.local, m.size);
    return s;
  }
  return m;
}

Result<MappedAllocation> own_allocation(uint64_t base, uint64_t claimed, int device) {
  const auto& d = cuda();
  // The claim is checked against the allocation the driver knows at that
  // address, as an opened handle's would be. (Pointer attributes answer for
  // any GPU's memory; cuMemGetAddressRange only for the current context's.)
  cu::DevicePtr start = 0;
  size_t real = 0;
  int owner = -1;
  if (d.pointer_get_attribute(&start, cu::kPointerRangeStart, base) != cu::kSuccess ||
      d.pointer_get_attribute(&real, cu::kPointerRangeSize, base) != cu::kSuccess ||
      d.pointer_get_attribute(&owner, cu::kPointerDeviceOrdinal, base) != cu::kSuccess || start != base) {
    return Status(Code::kDataLoss, "a GPU span names " + std::to_string(base) +
                                       ", which is not the start of a GPU allocation of this process");
  }
  if (owner != device) {
    // Copies and the gather kernel on `device` reach the owner's memory
    // directly, as an IPC handle opened with lazy peer access would.
    cu::Device owner_device = 0;
    cu::Context owner_context = nullptr;
    FERRY_RETURN_IF_ERROR(d.check(d.device_get(&owner_device, owner), "cuDeviceGet", Code::kUnavailable));
    FERRY_RETURN_IF_ERROR(
        d.check(d.primary_ctx_retain(&owner_context, owner_device), "cuDevicePrimaryCtxRetain", Code::kUnavailable));
    // The retain is kept: peer access lasts as long as the owner's context,
    // which must not end under this mapping.
    const cu::Result r = d.ctx_enable_peer_access(owner_context, 0);
    if (r != cu::kSuccess && r != cu::kPeerAccessAlreadyEnabled) {
      return d.check(r, "cuCtxEnablePeerAccess", Code::kUnavailable)
          .with_context("GPU " + std::to_string(device) + " reaching GPU " + std::to_string(owner));
    }
  }
  return MappedAllocation{base, std::min<uint64_t>(claimed, real)};
}

void close_gpu_mapping(const MappedAllocation& m, GpuHandleType type, int device) {
  const auto& d = cuda();
  if (!d.available()) return;
  DeviceScope on(device);
  if (!on.status().ok()) return;
  if (type == GpuHandleType::kLegacy) {
    d.ipc_close_mem_handle(m.local);
  } else {
    d.mem_unmap(m.local, m.size);
    d.mem_address_free(m.local, m.size);
  }
}

}  // namespace ferry::platform
