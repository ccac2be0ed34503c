// The source of the staging copy kernel's PTX (staging_kernel_ptx.inc, made
// by scripts/make_ptx.sh; ferry itself builds without a CUDA toolchain).
//
// Copies n16 16-byte words from src to dst, each thread a word at a time,
// striding by the whole grid; staging_kernel.cc picks the grid.
//
// It uses nothing newer than PTX ISA 7.0, so drivers from CUDA 11 on load it.
// ptx-isa: 7.0
extern "C" __global__ void ferry_stage_copy(uint4* __restrict__ dst, const uint4* __restrict__ src,
                                            unsigned long long n16) {
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
#pragma unroll 4
  for (; i < n16; i += step) dst[i] = src[i];
}
