// StagingKernels: the copy kernel's PTX, its loading and its launch.
#include "gpu/staging_kernel.h"

#include <algorithm>
#include <cstdint>

namespace ferry::platform {
namespace {

constexpr char kPtx[] =
#include "gpu/staging_kernel_ptx.inc"
    ;

// 512 threads a block, a block per 64 KiB up to 16: a 512 KiB chunk gets 8.
// With 16 paths copying at once, 4 to 16 blocks a copy measured alike.
constexpr unsigned kThreads = 512;
constexpr size_t kBytesPerBlock = 64 * 1024;
constexpr unsigned kMaxBlocks = 16;

}  // namespace

StagingKernels::StagingKernels() : kernels_(kPtx, {"ferry_stage_copy"}, "staging copy kernel") {}

bool StagingKernels::fits(const void* dst, const void* src, size_t n) {
  return ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | n) & 15) == 0;
}

Status StagingKernels::copy(int device, cu::Stream stream, void* dst, const void* src, size_t n) {
  const CudaDriver& d = cuda();
  if (device < 0 || device >= kMaxDevices) {
    return Status(Code::kInvalidArgument, "staging copy on CUDA device " + std::to_string(device));
  }
  cu::Function f = kernels_.function(device, 0);
  if (f == nullptr) return Status(Code::kUnimplemented, "no staging copy kernel on GPU " + std::to_string(device));
  unsigned long long n16 = n / 16;
  unsigned blocks = static_cast<unsigned>(std::clamp<size_t>(n / kBytesPerBlock, 1, kMaxBlocks));
  void* params[] = {&dst, &src, &n16};
  return d.check(d.launch_kernel(f, blocks, 1, 1, kThreads, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel");
}

}  // namespace ferry::platform
