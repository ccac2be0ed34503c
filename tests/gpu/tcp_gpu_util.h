// Helpers shared by the GPU-over-TCP tests and their peer process: device
// memory through the driver table (no CUDA headers needed to build), random
// bytes and a fast checksum both sides compute alike.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/pattern.h"
#include "ferry/ferry.h"
#include "gpu/cuda_driver.h"

namespace ferry::test {

// Number of usable GPUs (0 without a driver).
inline int gpu_count() {
  const platform::CudaDriver& d = platform::cuda();
  if (!d.available()) return 0;
  int n = 0;
  return d.device_get_count(&n) == platform::cu::kSuccess ? n : 0;
}

inline platform::cu::DevicePtr dptr(const void* p) {
  return static_cast<platform::cu::DevicePtr>(reinterpret_cast<uintptr_t>(p));
}

// `bytes` of device memory on GPU `gpu`, or of host memory for gpu < 0.
class Memory {
 public:
  Memory(int gpu, size_t bytes) : gpu_(gpu), bytes_(bytes) {
    if (gpu < 0) {
      host_.assign(bytes, 0);
      data_ = host_.data();
      return;
    }
    const platform::CudaDriver& d = platform::cuda();
    if (!platform::use_device(gpu).ok()) return;
    platform::cu::DevicePtr p = 0;
    if (d.mem_alloc(&p, bytes) != platform::cu::kSuccess) return;
    data_ = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(p));
  }
  ~Memory() {
    if (gpu_ >= 0 && data_ != nullptr) {
      (void)platform::use_device(gpu_);
      platform::cuda().mem_free(dptr(data_));
    }
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  bool ok() const { return data_ != nullptr; }
  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }
  int gpu() const { return gpu_; }

  // Copies between this memory and host bytes (synchronous).
  void put(size_t off, const uint8_t* src, size_t n) {
    if (gpu_ < 0) {
      std::memcpy(data_ + off, src, n);
      return;
    }
    (void)platform::use_device(gpu_);
    // cuMemcpy from pageable memory may return before the bytes land on the
    // device; the engine's copies run on streams of their own and would read
    // the old bytes (seen on one GPU shared by two processes).
    platform::cuda().memcpy(dptr(data_ + off), dptr(src), n);
    (void)platform::cuda().ctx_synchronize();
  }
  void get(size_t off, uint8_t* dst, size_t n) const {
    if (gpu_ < 0) {
      std::memcpy(dst, data_ + off, n);
      return;
    }
    (void)platform::use_device(gpu_);
    platform::cuda().memcpy(dptr(dst), dptr(data_ + off), n);
  }

 private:
  int gpu_;
  size_t bytes_;
  uint8_t* data_ = nullptr;
  std::vector<uint8_t> host_;
};

using core::fill_random;
using core::fnv1a;

// Hash of [off, off+n) of `m` (copied to the host first).
inline uint64_t hash_of(const Memory& m, size_t off, size_t n) {
  std::vector<uint8_t> tmp(n);
  m.get(off, tmp.data(), n);
  return fnv1a(tmp.data(), n);
}

}  // namespace ferry::test
