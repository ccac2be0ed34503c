// Pointer classification through the CUDA driver API (dlopen'd).
#include "platform/memory_kind.h"

#include <dlfcn.h>

#include <cstdint>
#include <mutex>

namespace ferry::platform {
namespace {

// The three driver entry points used, declared here so the build needs no CUDA headers.
using CuInit = int (*)(unsigned int);
using CuPointerGetAttribute = int (*)(void* data, int attribute, uintptr_t ptr);
constexpr int kAttrMemoryType = 2;         // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttrDeviceOrdinal = 9;      // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kMemoryTypeHost = 1;    // CU_MEMORYTYPE_HOST
constexpr unsigned kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE

struct Driver {
  CuPointerGetAttribute get_attribute = nullptr;
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

}  // namespace ferry::platform
