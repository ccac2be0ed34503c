// Pointer classification through the CUDA driver API (dlopen'd).
#include "platform/memory_kind.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdint>
#include <mutex>

namespace ferry::platform {
namespace {

// The three driver entry points used, declared here so the build needs no CUDA headers.
using CuInit = int (*)(unsigned int);
using CuPointerGetAttribute = int (*)(void* data, int attribute, uintptr_t ptr);
using CuDeviceGet = int (*)(int* device, int ordinal);
using CuDeviceGetPciBusId = int (*)(char* bus_id, int len, int device);
constexpr int kAttrMemoryType = 2;         // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttrDeviceOrdinal = 9;      // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kMemoryTypeHost = 1;    // CU_MEMORYTYPE_HOST
constexpr unsigned kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE

struct Driver {
  CuPointerGetAttribute get_attribute = nullptr;
  CuDeviceGet device_get = nullptr;
  CuDeviceGetPciBusId pci_bus_id = nullptr;
};

const Driver& driver() {
  static const Driver d = [] {
    Driver out;
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return out;
    auto init = reinterpret_cast<CuInit>(::dlsym(lib, "cuInit"));
    auto get = reinterpret_cast<CuPointerGetAttribute>(::dlsym(lib, "cuPointerGetAttribute"));
    if (init == nullptr || get == nullptr || init(0) != 0) return out;
    out.get_attribute = get;
    out.device_get = reinterpret_cast<CuDeviceGet>(::dlsym(lib, "cuDeviceGet"));
    out.pci_bus_id = reinterpret_cast<CuDeviceGetPciBusId>(::dlsym(lib, "cuDeviceGetPCIBusId"));
    return out;
  }();
  return d;
}

}  // namespace

PointerKind classify_pointer(const void* p) {
  PointerKind k;
  const Driver& d = driver();
  if (d.get_attribute == nullptr) return k;
  unsigned type = 0;
  if (d.get_attribute(&type, kAttrMemoryType, reinterpret_cast<uintptr_t>(p)) != 0) return k;
  if (type == kMemoryTypeHost) {
    k.kind = MemoryKind::kHostPinned;
  } else if (type == kMemoryTypeDevice) {
    int ordinal = -1;
    d.get_attribute(&ordinal, kAttrDeviceOrdinal, reinterpret_cast<uintptr_t>(p));
    k.kind = MemoryKind::kCuda;
    k.device = ordinal;
  }
  return k;
}

std::string gpu_pci_address(int ordinal) {
  const Driver& d = driver();
  if (d.device_get == nullptr || d.pci_bus_id == nullptr || ordinal < 0) return "";
  int dev = 0;
  char id[32] = {};
  if (d.device_get(&dev, ordinal) != 0 || d.pci_bus_id(id, sizeof(id), dev) != 0) return "";
  std::string s(id);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // The driver writes an 8-digit domain ("00000000:04:00.0"); sysfs uses 4.
  if (s.size() > 12 && s.find(':') == 8) s = s.substr(4);
  return s;
}

}  // namespace ferry::platform
