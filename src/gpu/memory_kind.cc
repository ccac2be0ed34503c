// Pointer classification through the CUDA driver (gpu/cuda_driver.h).
#include "gpu/memory_kind.h"

#include <cctype>
#include <cstdint>

#include "gpu/cuda_driver.h"

namespace ferry::platform {

PointerKind classify_pointer(const void* p) {
  PointerKind k;
  const CudaDriver& d = cuda();
  if (!d.available()) return k;
  auto at = static_cast<cu::DevicePtr>(reinterpret_cast<uintptr_t>(p));
  unsigned type = 0;
  if (d.pointer_get_attribute(&type, cu::kPointerMemoryType, at) != cu::kSuccess) return k;
  if (type == cu::kMemoryTypeHost) {
    k.kind = MemoryKind::kHostPinned;
  } else if (type == cu::kMemoryTypeDevice) {
    int ordinal = -1;
    d.pointer_get_attribute(&ordinal, cu::kPointerDeviceOrdinal, at);
    k.kind = MemoryKind::kCuda;
    k.device = ordinal;
  }
  return k;
}

std::string gpu_pci_address(int ordinal) {
  const CudaDriver& d = cuda();
  if (!d.available() || ordinal < 0) return "";
  cu::Device dev = 0;
  char id[32] = {};
  if (d.device_get(&dev, ordinal) != cu::kSuccess || d.device_get_pci_bus_id(id, sizeof(id), dev) != cu::kSuccess) {
    return "";
  }
  std::string s(id);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // The driver writes an 8-digit domain ("00000000:04:00.0"); sysfs uses 4.
  if (s.size() > 12 && s.find(':') == 8) s = s.substr(4);
  return s;
}

}  // namespace ferry::platform
