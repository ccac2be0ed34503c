// copy_floor: what one GPU-to-GPU copy costs from posting to the host seeing
// it done, in one process with peer access, for the copy engines pushing
// (a stream on the source GPU) and pulling (a stream on the destination),
// for a grid-stride copy kernel pushing with 8, 32 and 132 blocks and pulling
// with 132, and for an empty kernel. Completion is seen by polling an event,
// as ferry's local transport does. No transfer that posts a copy can finish
// sooner than these; the same-host issue's 1 MiB target is weighed against
// them in docs/benchmarks/2026-11-23.md.
//
//   nvcc -O2 -arch=sm_90 -o copy_floor bench/gpu/copy_floor.cu && ./copy_floor
//
// Needs two GPUs with peer access. Prints medians of 300 repetitions (after
// 20 untimed), in microseconds.
#include <cstdint>

#include "floor_common.cuh"

__global__ void copy16(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n16;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

int main() {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::fprintf(stderr, "copy_floor: needs two GPUs, found %d\n", n);
    return 77;
  }
  const size_t kMax = size_t{16} << 20;
  void *src = nullptr, *dst = nullptr;
  cudaStream_t s0, s1;
  cudaEvent_t e0, e1;
  CHECK(cudaSetDevice(1));
  CHECK(cudaMalloc(&dst, kMax));
  CHECK(cudaDeviceEnablePeerAccess(0, 0));
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&src, kMax));
  CHECK(cudaDeviceEnablePeerAccess(1, 0));
  CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CHECK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming));
  auto* d16 = static_cast<uint4*>(dst);
  auto* s16 = static_cast<const uint4*>(src);

  std::printf("%-10s %9s %9s %9s %9s %9s %9s %9s\n", "bytes", "ce_push", "ce_pull", "k8_push", "k32_push", "k132_push",
              "k132_pull", "empty");
  for (size_t bytes : {size_t{8}, size_t{4096}, size_t{65536}, size_t{1} << 20, size_t{4} << 20, kMax}) {
    size_t n16 = std::max<size_t>(bytes / 16, 1);
    CHECK(cudaSetDevice(0));
    double ce_push = median_us([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s0); }, e0, s0);
    double k_push[3];
    const int blocks[3] = {8, 32, 132};
    for (int b = 0; b < 3; ++b) {
      k_push[b] = median_us([&] { copy16<<<blocks[b], 512, 0, s0>>>(d16, s16, n16); }, e0, s0);
    }
    double empty = median_us([&] { copy16<<<1, 32, 0, s0>>>(d16, s16, 0); }, e0, s0);
    CHECK(cudaSetDevice(1));
    double ce_pull = median_us([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s1); }, e1, s1);
    double k_pull = median_us([&] { copy16<<<132, 512, 0, s1>>>(d16, s16, n16); }, e1, s1);
    CHECK(cudaGetLastError());
    std::printf("%-10zu %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", bytes, ce_push, ce_pull, k_push[0], k_push[1],
                k_push[2], k_pull, empty);
  }
  return 0;
}
