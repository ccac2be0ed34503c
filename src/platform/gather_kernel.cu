// The source of the gather kernel's PTX (gather_kernel_ptx.inc, made by
// scripts/gather_ptx.sh; ferry itself builds without a CUDA toolchain).
//
// One launch copies a list of pieces, each from any address to any address
// the launching GPU can reach (its own memory, a peer GPU's mapped memory):
// a batch of a KV cache's blocks costs one launch instead of a copy-engine
// call per block. The list rides in the launch's parameters, so nothing needs
// freeing after the kernel ran. A block of threads takes a piece at a time;
// pieces whose addresses agree modulo 16 move as 16-byte words (four loads in
// flight per thread before their stores), others byte by byte.
typedef unsigned long long u64;

struct GatherItem {
  u64 dst, src, n;
};
template <int N>
struct GatherList {
  GatherItem item[N];
};

__device__ __forceinline__ void copy_item(char* dst, const char* src, u64 n) {
  const u64 t = threadIdx.x, T = blockDim.x;
  if (((reinterpret_cast<u64>(dst) ^ reinterpret_cast<u64>(src)) & 15) == 0) {
    u64 head = (16 - (reinterpret_cast<u64>(dst) & 15)) & 15;
    if (head > n) head = n;
    if (t < head) dst[t] = src[t];
    const u64 body = (n - head) / 16;
    uint4* d = reinterpret_cast<uint4*>(dst + head);
    const uint4* s = reinterpret_cast<const uint4*>(src + head);
    u64 i = t;
    for (; i + 3 * T < body; i += 4 * T) {
      uint4 a = s[i], b = s[i + T], c = s[i + 2 * T], e = s[i + 3 * T];
      d[i] = a;
      d[i + T] = b;
      d[i + 2 * T] = c;
      d[i + 3 * T] = e;
    }
    for (; i < body; i += T) d[i] = s[i];
    const u64 done = head + body * 16;
    if (t < n - done) dst[done + t] = src[done + t];
  } else {
    for (u64 i = t; i < n; i += T) dst[i] = src[i];
  }
}

template <int N>
__device__ __forceinline__ void gather(const GatherList<N>& list, unsigned count) {
  for (unsigned k = blockIdx.x; k < count; k += gridDim.x) {
    const GatherItem& it = list.item[k];
    copy_item(reinterpret_cast<char*>(it.dst), reinterpret_cast<const char*>(it.src), it.n);
  }
}

// 168 pieces fill the 4 KiB of parameters every driver takes; 1,360 fill the
// 32 KiB that drivers of CUDA 12.1 on take (the list and the count). A
// launch costs more the more parameter bytes it declares (3.8 us for 4 KiB,
// 7.4 us for 32 KiB, posting 256 pieces on an H100), hence a size between.
extern "C" __global__ void ferry_gather_small(const __grid_constant__ GatherList<168> list, unsigned count) {
  gather(list, count);
}
extern "C" __global__ void ferry_gather_medium(const __grid_constant__ GatherList<340> list, unsigned count) {
  gather(list, count);
}
extern "C" __global__ void ferry_gather_large(const __grid_constant__ GatherList<1360> list, unsigned count) {
  gather(list, count);
}

// Each block of threads copies the items k, k + gridDim.x, ... of `table`
// with `copy(dst, src, n)` (copy_item; the bench tools measure variants),
// thread 0 fetching each into `it` (the kernel's own shared memory).
template <class Copy>
__device__ __forceinline__ void gather_table(const GatherItem* table, unsigned count, GatherItem& it, Copy copy) {
  for (unsigned k = blockIdx.x; k < count; k += gridDim.x) {
    if (threadIdx.x == 0) it = table[k];
    __syncthreads();
    copy(reinterpret_cast<char*>(it.dst), reinterpret_cast<const char*>(it.src), it.n);
    __syncthreads();
  }
}

// The list in memory the launching GPU reads (pinned host memory, written
// before the launch): a launch of two parameters posts in a fraction of the
// time of one that carries 8-32 KiB of them (about 10 and 15 us against 2 on
// the two-H200 host). Thread 0 of a block fetches its item for the others,
// through the coherent path (no read-only cache): a table is written again
// for a later launch.
extern "C" __global__ void ferry_gather_table(const GatherItem* table, unsigned count) {
  __shared__ GatherItem it;
  gather_table(table, count, it, [](char* dst, const char* src, u64 n) { copy_item(dst, src, n); });
}
