// Tells what kind of memory a pointer refers to: pageable host, pinned host
// or CUDA device memory. Asks the CUDA driver, loaded with dlopen on first
// use, so that ferry builds and runs on hosts without CUDA; without a driver
// every pointer is host memory. Creates no CUDA context and allocates nothing
// on any GPU.
#pragma once

#include <string>

#include "ferry/memory.h"

namespace ferry::platform {

struct PointerKind {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;
};

PointerKind classify_pointer(const void* p);

// The PCI address ("0000:04:00.0", lower case) of CUDA device `ordinal`, or ""
// without a driver or for an unknown ordinal.
std::string gpu_pci_address(int ordinal);

}  // namespace ferry::platform
