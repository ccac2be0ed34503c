// Memory the soak moves bytes through: host memory mapped on its own (so that
// the survivor's resident size shows the engine, not the allocator's
// caching), or GPU memory through the CUDA driver when --gpu is given.
//
// Filling and checking go through host copies for GPU memory, so the same
// pattern code checks both kinds. Thread-compatible: one lane uses one
// SoakMemory at a time; the read-only source is only read after its fill.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/status.h"

namespace ferry::soak {

class SoakMemory {
 public:
  // `device` < 0: host memory, touched at once so its pages count from the
  // start. Otherwise device memory of GPU `device`.
  static Result<std::unique_ptr<SoakMemory>> create(size_t size, int device);
  ~SoakMemory();
  SoakMemory(const SoakMemory&) = delete;
  SoakMemory& operator=(const SoakMemory&) = delete;

  uint8_t* data() const { return base_; }
  size_t size() const { return size_; }
  bool on_gpu() const { return device_ >= 0; }

  // Writes bytes [start, start + n) of stream `seed` at data() + offset.
  Status fill(size_t offset, size_t n, uint64_t seed, uint64_t start);
  // Where data()[offset, offset + n) first differs from the stream, or
  // kNoMismatch; a failed copy back from the GPU is an error.
  Result<size_t> check(size_t offset, size_t n, uint64_t seed, uint64_t start);
  // Flips one byte (the --corrupt-one debug fault).
  Status flip(size_t offset);

 private:
  SoakMemory(uint8_t* base, size_t size, int device) : base_(base), size_(size), device_(device) {}
  uint8_t* base_;
  size_t size_;
  int device_;
  std::vector<uint8_t> scratch_;  // GPU only: host bounce buffer
};

// OK when GPU `device` can be used; otherwise a status that says why (no
// driver, no such device), for --gpu's error message.
Status gpu_usable(int device);
// The number of GPUs the driver sees (0 without a driver).
int gpu_count();
// Whether the CUDA driver loaded and initialised.
bool platform_cuda_loaded();

}  // namespace ferry::soak
