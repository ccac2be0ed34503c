// resident_gather: a batch of scattered blocks GPU 0 -> GPU 1, posting to the
// host seeing it done, four ways: one copy-engine copy of all the bytes (the
// anchor), one launch of ferry's table gather kernel, ferry's resident
// gather kernel fed through its mailbox in pinned host memory (G blocks of T
// threads, pieces cut at CUT bytes), and a variant of it rung through a word
// in device memory that a stream memory operation writes ("bell": no
// polling across PCIe). One process, peer access, events polled by the
// posting thread, the resident kernels' answer word likewise. "empty" rows
// post a batch of no pieces: the signalling round trip alone.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/gpu/resident_gather.cu -o resident_gather -lcuda
//   resident_gather BLOCKS BLOCK_SIZE ITERS
//
// Every method's bytes are checked; the resident kernels' twice, the source
// rewritten in between by the copy engine (a kernel that outlives the writes
// it copies must not read stale cached lines). Rounds alternate the methods.
// One line a method, p50s in microseconds ("gpu": from the kernel taking the
// batch to its last block finishing, by the GPU's clock):
//   METHOD BLOCKS x SIZE post P total T p10 P10 gpu G verify=ok|FAILED
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../src/platform/gather_kernel.cu"
#include "cuda_check.cuh"
#include "peer_pools.cuh"

// GPU clock stamps (mapped pinned memory): when block 0 took a request, and
// when the last block finished it.
struct ProbeHooks {
  volatile u64* stamps;
  __device__ void seen(u64 t) const { stamps[0] = t; }
  __device__ void end(u64 t) const { stamps[1] = t; }
};
__global__ void probe_resident(ResidentBox* box, ResidentRelay* relay, u64 generation, u64 linger_ns,
                               volatile u64* stamps) {
  resident_gather(box, relay, generation, linger_ns, ProbeHooks{stamps});
}

__device__ __forceinline__ u64 cas_gpu(u64* p, u64 expect, u64 v) {
  return atomicCAS(reinterpret_cast<unsigned long long*>(p), expect, v);
}

// The bell variant: the host rings a word in device memory with a stream
// memory operation (cuStreamWriteValue64 on another stream) that every block
// polls in L2, instead of block 0 polling host memory and relaying; table
// and count are read from the mailbox in host memory after the ring.
__global__ void bell_resident(u64* bell, ResidentBox* box, u64 generation, u64 linger_ns, volatile u64* stamps) {
  __shared__ u64 request;
  __shared__ u64 tbl, cnt;
  u64 last = generation << 32;
  unsigned long long* finished = reinterpret_cast<unsigned long long*>(bell + 1);
  unsigned long long served = 0;
  for (;;) {
    if (threadIdx.x == 0) {
      const u64 idle_from = global_ns();
      u64 r;
      for (;;) {
        r = load_acquire_gpu(bell);
        if (r != last && r != 0) {
          if ((r >> 32) != generation) r = kResidentLeave;
          break;
        }
        if (blockIdx.x == 0 && global_ns() - idle_from > linger_ns) {
          cas_gpu(bell, r, kResidentLeave);
        }
      }
      request = r;
      if (r != kResidentLeave) {
        tbl = *reinterpret_cast<volatile u64*>(bell + 2);
        cnt = *reinterpret_cast<volatile u64*>(bell + 3);
      }
      if (blockIdx.x == 0) stamps[0] = global_ns();
    }
    __syncthreads();
    const u64 r = request;
    if (r == kResidentLeave) return;
    const GatherItem* table = reinterpret_cast<const GatherItem*>(tbl);
    const unsigned count = static_cast<unsigned>(cnt);
    copy_warp_share(table, count);
    __syncthreads();
    ++served;
    if (threadIdx.x == 0) {
      __threadfence();
      const unsigned long long before = atomicAdd(finished, 1ull);
      if (before + 1 == served * gridDim.x) {
        stamps[1] = global_ns();
        __threadfence_system();
        *reinterpret_cast<volatile u64*>(&box->done) = r;
      }
    }
    last = r;
  }
}

using Clock = std::chrono::steady_clock;
static double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

int main(int argc, char** argv) {
  const BlockShape shape = block_shape(argc, argv, "resident_gather");
  const unsigned blocks = shape.blocks;
  const size_t bs = shape.block_bytes, pool = shape.pool();
  const int iters = shape.iters;
  const PeerPools pools = peer_pools(pool);
  uint8_t *const src = pools.src, *const dst = pools.dst;
  cudaStream_t s, rs;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking));
  std::vector<uint8_t> host(pool);
  std::mt19937_64 rng(7);
  auto fill = [&] {
    for (auto& b : host) b = static_cast<uint8_t>(rng());
    // From pageable memory cudaMemcpy may return before its DMA landed.
    CK(cudaMemcpyAsync(src, host.data(), pool, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
  };
  fill();
  std::vector<unsigned> ss(2 * blocks), ds(2 * blocks);
  for (unsigned i = 0; i < 2 * blocks; ++i) ss[i] = ds[i] = i;
  std::shuffle(ss.begin(), ss.end(), rng);
  std::shuffle(ds.begin(), ds.end(), rng);
  const size_t max_pieces = blocks * ((bs + 4095) / 4096);
  GatherItem* table;
  CK(cudaHostAlloc(&table, max_pieces * sizeof(GatherItem), cudaHostAllocPortable));
  auto list = [&](size_t cut) {
    unsigned n = 0;
    for (unsigned i = 0; i < blocks; ++i) {
      for (size_t at = 0; at < bs; at += cut) {
        table[n++] = {reinterpret_cast<u64>(dst + ds[i] * bs + at), reinterpret_cast<u64>(src + ss[i] * bs + at),
                      std::min(cut, bs - at)};
      }
    }
    return n;
  };
  ResidentBox* box;
  CK(cudaHostAlloc(&box, sizeof(ResidentBox), cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(box, 0, sizeof(ResidentBox));
  ResidentBox* box_dev;
  CK(cudaHostGetDevicePointer(&box_dev, box, 0));
  ResidentRelay* relay;
  CK(cudaMalloc(&relay, sizeof(ResidentRelay)));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const unsigned threads = std::clamp<size_t>(bs / 16, 128, 512);

  struct M {
    std::string name;
    int kind;  // 0 copy engine, 1 launched table kernel, 2 resident
    unsigned grid = 0, threads = 0;
    size_t cut = 0;
    std::vector<double> post, total, gpu;
    bool ok = true;
  };
  std::vector<M> ms;
  ms.push_back({"ce", 0});
  ms.push_back({"table", 1});
  ms.push_back({"resident_empty", 2, 32, 256, 0});
  for (auto [g, t] : {std::pair{32u, 256u}, {64u, 256u}, {32u, 512u}}) {
    for (size_t cut : bs > 4096 ? std::vector<size_t>{bs, 4096} : std::vector<size_t>{bs}) {
      ms.push_back({"resident_g" + std::to_string(g) + "_t" + std::to_string(t) + "_c" + std::to_string(cut), 2, g,
                    t, cut});
    }
  }
  ms.push_back({"bell_empty", 3, 32, 256, 0});
  for (auto [g, t] : {std::pair{32u, 256u}, {64u, 256u}}) {
    for (size_t cut : bs > 4096 ? std::vector<size_t>{bs, 4096} : std::vector<size_t>{bs}) {
      ms.push_back({"bell_g" + std::to_string(g) + "_t" + std::to_string(t) + "_c" + std::to_string(cut), 3, g, t, cut});
    }
  }
  u64* stamps;
  CK(cudaHostAlloc(&stamps, 64, cudaHostAllocMapped | cudaHostAllocPortable));
  u64* bell;
  CK(cudaMalloc(&bell, 64));
  cudaStream_t ring;
  CK(cudaStreamCreateWithFlags(&ring, cudaStreamNonBlocking));
  u64 generation = 0, number = 0;
  unsigned listed = 0;
  size_t listed_cut = 0;
  auto start = [&](M& m) {
    ++generation;
    number = 0;
    if (m.kind == 3) {
      CK(cudaMemsetAsync(bell, 0, 64, ring));
      CK(cudaStreamSynchronize(ring));
      bell_resident<<<m.grid, m.threads, 0, rs>>>(bell, box_dev, generation, 2'000'000'000ull, stamps);
      CK(cudaGetLastError());
      return;
    }
    reinterpret_cast<std::atomic<u64>*>(&box->request)->store(generation << 32, std::memory_order_release);
    CK(cudaMemsetAsync(relay, 0, sizeof(ResidentRelay), rs));
    probe_resident<<<m.grid, m.threads, 0, rs>>>(box_dev, relay, generation, 2'000'000'000ull, stamps);
    CK(cudaGetLastError());
  };
  auto leave_bell = [&] {
    if (cuStreamWriteValue64(ring, reinterpret_cast<CUdeviceptr>(bell), (generation + 1) << 32, 0) != CUDA_SUCCESS) {
      std::fprintf(stderr, "cuStreamWriteValue64 failed\n");
      std::_Exit(1);
    }
    CK(cudaStreamSynchronize(rs));
  };
  auto leave = [&] {
    // A request of a later generation sends the kernel away.
    reinterpret_cast<std::atomic<u64>*>(&box->request)->store((generation + 1) << 32, std::memory_order_release);
    CK(cudaStreamSynchronize(rs));
  };
  // Polls the answer word until it reads `r`; 5 s without it ends the run.
  auto await = [&](u64 r, const std::string& name) {
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (reinterpret_cast<std::atomic<u64>*>(&box->done)->load(std::memory_order_acquire) != r) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "%s: request not done in 5 s\n", name.c_str());
        std::_Exit(1);
      }
    }
  };
  auto once = [&](M& m) {
    auto t0 = Clock::now();
    Clock::time_point t1;
    if (m.kind == 0) {
      CK(cudaMemcpyPeerAsync(dst, 1, src, 0, blocks * bs, s));
    } else if (m.kind == 1) {
      if (listed_cut != bs) listed = list(listed_cut = bs);
      ferry_gather_table<<<std::min(blocks, 1024u), threads, 0, s>>>(table, blocks);
    } else if (m.kind == 3) {
      if (m.cut != 0 && listed_cut != m.cut) listed = list(listed_cut = m.cut);
      const u64 r = (generation << 32) | ++number;
      // Table and count, then the ring, in one call; each write is fenced
      // after the one before (default flags).
      CUstreamBatchMemOpParams ops[3] = {};
      const u64 values[3] = {reinterpret_cast<u64>(table), m.cut == 0 ? 0 : listed, r};
      const int at[3] = {2, 3, 0};
      for (int k = 0; k < 3; ++k) {
        ops[k].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
        ops[k].writeValue.address = reinterpret_cast<CUdeviceptr>(bell + at[k]);
        ops[k].writeValue.value64 = values[k];
        ops[k].writeValue.flags = 0;
      }
      if (cuStreamBatchMemOp(ring, 3, ops, 0) != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuStreamBatchMemOp failed\n");
        std::_Exit(1);
      }
      t1 = Clock::now();
      await(r, m.name);
    } else {
      if (m.cut != 0 && listed_cut != m.cut) listed = list(listed_cut = m.cut);
      box->table = reinterpret_cast<u64>(table);
      box->count = m.cut == 0 ? 0 : listed;
      const u64 r = (generation << 32) | ++number;
      reinterpret_cast<std::atomic<u64>*>(&box->request)->store(r, std::memory_order_release);
      t1 = Clock::now();
      await(r, m.name);
    }
    if (m.kind < 2) {
      t1 = Clock::now();
      CK(cudaEventRecord(ev, s));
      while (cudaEventQuery(ev) == cudaErrorNotReady) {
      }
    }
    auto t2 = Clock::now();
    if (m.kind >= 2) m.gpu.push_back((static_cast<double>(stamps[1]) - static_cast<double>(stamps[0])) / 1000.0);
    m.post.push_back(us(t1 - t0));
    m.total.push_back(us(t2 - t0));
  };
  auto verify = [&](M& m) {
    const std::vector<uint8_t> got = read_target(pools, pool, s);
    size_t bad = 0, zero = 0, first = SIZE_MAX;
    for (unsigned i = 0; i < blocks; ++i) {
      const uint8_t* want = m.kind != 0 ? host.data() + ss[i] * bs : host.data() + i * bs;
      const uint8_t* at = m.kind != 0 ? got.data() + ds[i] * bs : got.data() + i * bs;
      for (size_t k = 0; k < bs; ++k) {
        if (want[k] != at[k]) {
          ++bad;
          zero += at[k] == 0;
          first = std::min(first, i * bs + k);
        }
      }
    }
    if (bad != 0) {
      m.ok = false;
      std::fprintf(stderr, "%s: %zu bytes wrong (%zu zero), first at %zu\n", m.name.c_str(), bad, zero, first);
    }
    clear_target(pools, pool);
  };
  for (M& m : ms) {
    if (m.kind >= 2) start(m);
    for (int i = 0; i < 20; ++i) once(m);
    const bool moves = !(m.kind >= 2 && m.cut == 0);  // an empty request moves nothing to check
    if (moves) verify(m);
    if (m.kind >= 2) {
      if (moves) {
        fill();  // new bytes at the same addresses, written past the kernel
        once(m);
        verify(m);
      }
      m.kind == 3 ? leave_bell() : leave();
    }
    m.post.clear();
    m.total.clear();
    m.gpu.clear();
  }
  const int rounds = 10;
  for (int r = 0; r < rounds; ++r) {
    for (M& m : ms) {
      if (m.kind >= 2) start(m);
      for (int i = 0; i < iters / rounds; ++i) once(m);
      if (m.kind == 2) leave();
      if (m.kind == 3) leave_bell();
    }
  }
  int rc = 0;
  for (M& m : ms) {
    std::printf("%-28s %u x %zu  post %6.2f  total %7.2f  p10 %7.2f  gpu %6.2f  verify=%s\n", m.name.c_str(), blocks,
                bs, percentile(m.post, 0.5), percentile(m.total, 0.5), percentile(m.total, 0.1), m.gpu.empty() ? 0.0 : percentile(m.gpu, 0.5),
                m.ok ? "ok" : "FAILED");
    if (!m.ok) rc = 1;
  }
  return rc;
}
