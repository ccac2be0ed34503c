// Host and GPU memory for the soak (see memory.h). GPU memory comes from the
// CUDA driver that ferry itself loads at run time, as tests/gpu does, so the
// soak needs no CUDA toolkit to build and fails clearly where no GPU is.
#include "soak/memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "gpu/cuda_driver.h"
#include "soak/pattern.h"

namespace ferry::soak {

namespace cu = platform::cu;

namespace {
constexpr size_t kBounce = 4u << 20;

Status copy(void* dst, const void* src, size_t n, int device) {
  const auto& d = platform::cuda();
  platform::DeviceScope scope(device);
  if (!scope.ok()) return scope.status();
  FERRY_RETURN_IF_ERROR(
      d.check(d.memcpy(reinterpret_cast<cu::DevicePtr>(dst), reinterpret_cast<cu::DevicePtr>(src), n), "cuMemcpy"));
  return d.check(d.ctx_synchronize(), "cuCtxSynchronize");
}
}  // namespace

bool platform_cuda_loaded() { return platform::cuda().available(); }

int gpu_count() {
  const auto& d = platform::cuda();
  int n = 0;
  if (!d.available() || d.device_get_count(&n) != cu::kSuccess) return 0;
  return n;
}

Status gpu_usable(int device) {
  if (!platform::cuda().available()) {
    return Status(Code::kUnimplemented,
                  "--gpu needs the CUDA driver (libcuda.so.1) and a GPU; the driver could not be loaded or "
                  "initialised on this host");
  }
  int n = gpu_count();
  if (device >= n) {
    return Status(Code::kUnimplemented,
                  "--gpu: GPU " + std::to_string(device) + " asked for, the driver sees " + std::to_string(n));
  }
  return platform::use_device(device);
}

Result<std::unique_ptr<SoakMemory>> SoakMemory::create(size_t size, int device) {
  if (device < 0) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Status(Code::kResourceExhausted, "mmap of " + std::to_string(size) + " bytes failed");
    std::memset(p, 0, size);
    return std::unique_ptr<SoakMemory>(new SoakMemory(static_cast<uint8_t*>(p), size, -1));
  }
  FERRY_RETURN_IF_ERROR(gpu_usable(device));
  const auto& d = platform::cuda();
  platform::DeviceScope scope(device);
  if (!scope.ok()) return scope.status();
  cu::DevicePtr p = 0;
  FERRY_RETURN_IF_ERROR(d.check(d.mem_alloc(&p, size), "cuMemAlloc", Code::kResourceExhausted));
  std::unique_ptr<SoakMemory> m(new SoakMemory(reinterpret_cast<uint8_t*>(p), size, device));
  m->scratch_.resize(kBounce);
  return m;
}

SoakMemory::~SoakMemory() {
  if (device_ < 0) {
    ::munmap(base_, size_);
    return;
  }
  platform::DeviceScope scope(device_);
  if (scope.ok()) (void)platform::cuda().mem_free(reinterpret_cast<cu::DevicePtr>(base_));
}

Status SoakMemory::fill(size_t offset, size_t n, uint64_t seed, uint64_t start) {
  if (offset + n > size_) return Status(Code::kOutOfRange, "fill past the buffer");
  if (device_ < 0) {
    pattern_fill(base_ + offset, n, seed, start);
    return Status();
  }
  for (size_t done = 0; done < n;) {
    size_t k = std::min(kBounce, n - done);
    pattern_fill(scratch_.data(), k, seed, start + done);
    FERRY_RETURN_IF_ERROR(copy(base_ + offset + done, scratch_.data(), k, device_));
    done += k;
  }
  return Status();
}

Result<size_t> SoakMemory::check(size_t offset, size_t n, uint64_t seed, uint64_t start) {
  if (offset + n > size_) return Status(Code::kOutOfRange, "check past the buffer");
  if (device_ < 0) return pattern_check(base_ + offset, n, seed, start);
  for (size_t done = 0; done < n;) {
    size_t k = std::min(kBounce, n - done);
    FERRY_RETURN_IF_ERROR(copy(scratch_.data(), base_ + offset + done, k, device_));
    size_t bad = pattern_check(scratch_.data(), k, seed, start + done);
    if (bad != kNoMismatch) return done + bad;
    done += k;
  }
  return kNoMismatch;
}

Status SoakMemory::flip(size_t offset) {
  if (offset >= size_) return Status(Code::kOutOfRange, "flip past the buffer");
  if (device_ < 0) {
    base_[offset] ^= 0x5a;
    return Status();
  }
  uint8_t b = 0;
  FERRY_RETURN_IF_ERROR(copy(&b, base_ + offset, 1, device_));
  b ^= 0x5a;
  return copy(base_ + offset, &b, 1, device_);
}

}  // namespace ferry::soak
