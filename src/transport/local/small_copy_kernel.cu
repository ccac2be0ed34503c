// The small-copy kernel of the local transport (see local_copier.cc). Not built by
// CMake: its PTX is kept in small_copy_kernel_ptx.h, made with
//   nvcc -ptx -arch=compute_80 -O3 small_copy_kernel.cu -o - | (wrapped in a raw string)
// with its .version line lowered to 7.0 (the kernel needs nothing newer), so
// that drivers from CUDA 11 on can load it.
// and loaded through the driver, so ferry builds without the CUDA toolkit.
extern "C" __global__ void ferry_small_copy(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                                            unsigned long long n) {
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  if ((((unsigned long long)src | (unsigned long long)dst) & 15) == 0) {
    unsigned long long nv = n / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (unsigned long long k = i; k < nv; k += stride) d[k] = s[k];
    for (unsigned long long k = nv * 16 + i; k < n; k += stride) dst[k] = src[k];
  } else {
    for (unsigned long long k = i; k < n; k += stride) dst[k] = src[k];
  }
}
