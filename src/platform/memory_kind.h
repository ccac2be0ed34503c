// Tells what kind of memory a pointer refers to: pageable host, pinned host
// or CUDA device memory. Asks the CUDA driver, loaded with dlopen on first
// use, so that ferry builds and runs on hosts without CUDA; without a driver
// every pointer is host memory. Creates no CUDA context and allocates nothing
// on any GPU.
#pragma once

#include "ferry/memory.h"

namespace ferry::platform {

struct PointerKind {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;
};

PointerKind classify_pointer(const void* p);

}  // namespace ferry::platform
