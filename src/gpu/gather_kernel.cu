// The source of the gather kernel's PTX (gather_kernel_ptx.inc, made by
// scripts/make_ptx.sh; ferry itself builds without a CUDA toolchain).
//
// One launch copies a list of pieces, each from any address to any address
// the launching GPU can reach (its own memory, a peer GPU's mapped memory):
// a batch of a KV cache's blocks costs one launch instead of a copy-engine
// call per block. The list rides in the launch's parameters, so nothing needs
// freeing after the kernel ran. A block of threads takes a piece at a time;
// pieces whose addresses agree modulo 16 move as 16-byte words (four loads in
// flight per thread before their stores), others byte by byte.
//
// Its header is lowered to PTX ISA 8.1, the first with 32 KiB of kernel
// parameters, so that drivers from CUDA 12.1 on load it.
// ptx-isa: 8.1
typedef unsigned long long u64;

struct GatherItem {
  u64 dst, src, n;
};
template <int N>
struct GatherList {
  GatherItem item[N];
};

// Thread t of T threads copies its share of n bytes, reading through `load`
// (PlainLoads or, for a kernel that outlives the writes it copies, L2Loads).
template <class Load>
__device__ __forceinline__ void copy_span(char* dst, const char* src, u64 n, u64 t, u64 T, Load load) {
  if (((reinterpret_cast<u64>(dst) ^ reinterpret_cast<u64>(src)) & 15) == 0) {
    u64 head = (16 - (reinterpret_cast<u64>(dst) & 15)) & 15;
    if (head > n) head = n;
    if (t < head) dst[t] = load(src + t);
    const u64 body = (n - head) / 16;
    uint4* d = reinterpret_cast<uint4*>(dst + head);
    const uint4* s = reinterpret_cast<const uint4*>(src + head);
    u64 i = t;
    for (; i + 3 * T < body; i += 4 * T) {
      uint4 a = load(s + i), b = load(s + i + T), c = load(s + i + 2 * T), e = load(s + i + 3 * T);
      d[i] = a;
      d[i + T] = b;
      d[i + 2 * T] = c;
      d[i + 3 * T] = e;
    }
    for (; i < body; i += T) d[i] = load(s + i);
    const u64 done = head + body * 16;
    if (t < n - done) dst[done + t] = load(src + done + t);
  } else {
    for (u64 i = t; i < n; i += T) dst[i] = load(src + i);
  }
}

struct PlainLoads {
  __device__ __forceinline__ uint4 operator()(const uint4* p) const { return *p; }
  __device__ __forceinline__ char operator()(const char* p) const { return *p; }
};

// A block of threads copies n bytes.
__device__ __forceinline__ void copy_item(char* dst, const char* src, u64 n) {
  copy_span(dst, src, n, threadIdx.x, blockDim.x, PlainLoads{});
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

// ---- A gather kernel kept resident (ResidentGather, resident_gather.h) ----
//
// A launch costs about 4 us to post and 2 us more on the GPU than a copy
// before its first byte moves. This kernel is launched once and then fed
// through a mailbox in pinned host memory, so a batch posts by writing three
// words; it leaves on its own once no request came for `linger_ns`.

// Mapped pinned host memory. Request and answer words carry the launch's
// generation in their upper 32 bits: a kernel of an earlier launch, still
// lingering, never takes a later one's request.
struct ResidentBox {
  u64 request;  // host: (generation << 32) | number of the newest request (from 1)
  u64 table;    // host: the request's pieces (GatherItem*, memory the GPU reads)
  u64 count;    // host: how many
  u64 pad0[5];
  u64 done;  // kernel: (generation << 32) | number of the last request finished
  u64 pad1[7];
};
// Device memory, zeroed before each launch: block 0 relays each request to
// the other blocks here (a block polling host memory costs every request a
// PCIe round trip), and every block counts itself done.
struct ResidentRelay {
  u64 request;
  u64 table;
  u64 count;
  unsigned long long finished;
};

__device__ __forceinline__ u64 global_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ u64 load_acquire_sys(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ u64 load_acquire_gpu(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release_gpu(u64* p, u64 v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// The kernel outlives the writes of the application it copies for: its
// loads skip the SM's own cache (not coherent with later writes) for L2.
struct L2Loads {
  __device__ __forceinline__ uint4 operator()(const uint4* p) const { return __ldcg(p); }
  __device__ __forceinline__ char operator()(const char* p) const { return __ldcg(p); }
};

constexpr u64 kResidentLeave = ~0ull;

// Block 0's thread 0: waits for the next request of `generation` after
// `last` and relays it, or kResidentLeave once none came for linger_ns or a
// later launch took over. One thread polls: reads of one host address from
// several SMs at once queue behind each other (four pollers made a request
// take 19 us instead of 8).
__device__ void poll_mailbox(ResidentBox* box, ResidentRelay* relay, u64 generation, u64 last, u64 linger_ns) {
  const u64 idle_from = global_ns();
  for (;;) {
    // Polling is what the kernel is for; each load is a PCIe round trip
    // (about a microsecond), which paces the loop.
    const u64 r = load_acquire_sys(&box->request);
    if ((r >> 32) != generation || global_ns() - idle_from > linger_ns) {
      store_release_gpu(&relay->request, kResidentLeave);
      return;
    }
    if (r != last) {
      relay->table = *reinterpret_cast<volatile u64*>(&box->table);
      relay->count = *reinterpret_cast<volatile u64*>(&box->count);
      store_release_gpu(&relay->request, r);
      return;
    }
  }
}

// The calling block's share of `count` pieces at `table`: an equal run of
// them for each of its warps, a block's runs side by side. The block's
// threads fetch its descriptors together, a word each (consecutive threads,
// consecutive words: a few PCIe reads for the block), into `shared`,
// kSharePieces at a time, and each warp copies its run from there. Reads of
// one line of host memory by several SMs queue behind each other: when each
// warp fetched its own descriptors, five or six warps on as many SMs read
// each line, and 256 pieces of 16 KiB took 14.6 us on the GPU of one H200
// against 6.7 for 1,024 of 4 KiB (four descriptors a warp, about one warp a
// line).
constexpr unsigned kSharePieces = 256;
__device__ __forceinline__ void copy_block_share(const GatherItem* table, unsigned count,
                                                 u64 (&shared)[3 * kSharePieces]) {
  const unsigned warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const unsigned per = (count + gridDim.x * warps - 1) / (gridDim.x * warps);
  const unsigned first = min(count, blockIdx.x * warps * per), end = min(count, first + warps * per);
  const unsigned mine = first + warp * per, mine_end = min(end, mine + per);  // this warp's run
  for (unsigned base = first; base < end; base += kSharePieces) {
    const unsigned n = min(kSharePieces, end - base);
    const volatile u64* w = reinterpret_cast<const volatile u64*>(table + base);
    for (unsigned i = threadIdx.x; i < 3 * n; i += blockDim.x) shared[i] = w[i];
    __syncthreads();
    for (unsigned k = max(mine, base); k < min(mine_end, base + n); ++k) {
      const unsigned at = 3 * (k - base);
      copy_span(reinterpret_cast<char*>(shared[at]), reinterpret_cast<const char*>(shared[at + 1]), shared[at + 2],
                lane, 32, L2Loads{});
    }
    __syncthreads();
  }
}

struct NoHooks {
  __device__ void seen(u64) const {}
  __device__ void end(u64) const {}
};

// The resident kernel's body; `hooks` sees the GPU's clock when a request
// was taken and when its last block finished (NoHooks; the bench tools time
// the two).
template <class Hooks>
__device__ void resident_gather(ResidentBox* box, ResidentRelay* relay, u64 generation, u64 linger_ns, Hooks hooks) {
  __shared__ u64 request;
  __shared__ u64 descriptors[3 * kSharePieces];
  u64 last = generation << 32;
  unsigned long long served = 0;
  for (;;) {
    if (threadIdx.x == 0) {
      if (blockIdx.x == 0) poll_mailbox(box, relay, generation, last, linger_ns);
      // Every block waits in device memory (0: nothing relayed yet); the
      // rest of its threads wait at the barrier below, issuing nothing.
      u64 r;
      while ((r = load_acquire_gpu(&relay->request)) == last || r == 0) {
      }
      request = r;
      if (blockIdx.x == 0) hooks.seen(global_ns());
    }
    __syncthreads();
    const u64 r = request;
    if (r == kResidentLeave) return;
    const GatherItem* table = reinterpret_cast<const GatherItem*>(*reinterpret_cast<volatile u64*>(&relay->table));
    const unsigned count = static_cast<unsigned>(*reinterpret_cast<volatile u64*>(&relay->count));
    copy_block_share(table, count, descriptors);
    // The barrier orders every thread's stores before thread 0's fence and
    // count; the last block's system-scope fence then publishes every
    // block's stores (cumulatively) before the answer.
    __syncthreads();
    ++served;
    if (threadIdx.x == 0) {
      __threadfence();
      const unsigned long long before = atomicAdd(&relay->finished, 1ull);
      if (before + 1 == served * gridDim.x) {
        hooks.end(global_ns());
        __threadfence_system();
        *reinterpret_cast<volatile u64*>(&box->done) = r;
      }
    }
    last = r;
  }
}

extern "C" __global__ void ferry_gather_resident(ResidentBox* box, ResidentRelay* relay, u64 generation,
                                                 u64 linger_ns) {
  resident_gather(box, relay, generation, linger_ns, NoHooks{});
}
