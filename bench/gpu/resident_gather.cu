// resident_gather: a batch of scattered blocks GPU 0 -> GPU 1, posting to the
// host seeing it done, four ways: one copy-engine copy of all the bytes (the
// anchor), one launch of ferry's table gather kernel (its table in pinned
// host memory as ferry keeps it; "table_lines": a descriptor to each 128-byte
// line of it, so that no two blocks of threads read one line; "table_device":
// the table copied to GPU memory beforehand, the fetch's floor;
// "table_uploaded": copied there by the copy engine ahead of the launch, on
// the same stream; "table_3lanes": a descriptor fetched by three threads, a
// word each; "table_warps": a warp a piece, a block's eight descriptors
// fetched in one coalesced read), ferry's resident
// gather kernel fed through its mailbox in pinned host memory (G blocks of T
// threads, pieces cut at CUT bytes), and a variant of it rung through a word
// in device memory that a stream memory operation writes ("bell": no
// polling across PCIe). One process, peer access, events polled by the
// posting thread, the resident kernels' answer word likewise. "empty" rows
// post a batch of no pieces: the signalling round trip alone.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/gpu/resident_gather.cu -o resident_gather -lcuda
//   [TABLES_ONLY=1] resident_gather BLOCKS BLOCK_SIZE ITERS
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

#include "../../src/gpu/gather_kernel.cu"
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
  __shared__ u64 descriptors[3 * kSharePieces];
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
    copy_block_share(table, count, descriptors);
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

// ferry_gather_table over a table whose descriptors each fill a 128-byte line.
struct LineItem {
  GatherItem it;
  u64 pad[13];
};
static_assert(sizeof(LineItem) == 128, "a descriptor a line");
__global__ void gather_table_lines(const LineItem* table, unsigned count) {
  __shared__ GatherItem it;
  for (unsigned k = blockIdx.x; k < count; k += gridDim.x) {
    if (threadIdx.x == 0) it = table[k].it;
    __syncthreads();
    copy_item(reinterpret_cast<char*>(it.dst), reinterpret_cast<const char*>(it.src), it.n);
    __syncthreads();
  }
}

// ferry_gather_table with a block's descriptor fetched by three threads, a
// word each (one request, where thread 0 alone issues three).
__global__ void gather_table_3lanes(const GatherItem* table, unsigned count) {
  __shared__ u64 w[3];
  for (unsigned k = blockIdx.x; k < count; k += gridDim.x) {
    if (threadIdx.x < 3) w[threadIdx.x] = reinterpret_cast<const u64*>(table + k)[threadIdx.x];
    __syncthreads();
    copy_item(reinterpret_cast<char*>(w[0]), reinterpret_cast<const char*>(w[1]), w[2]);
    __syncthreads();
  }
}

// A warp a piece, eight pieces a block of 256 threads: warp 0 fetches the
// block's eight descriptors in one coalesced read.
__global__ void gather_table_warps(const GatherItem* table, unsigned count) {
  __shared__ u64 w[8 * 3];
  const unsigned first = blockIdx.x * 8, here = min(8u, count - first);
  if (threadIdx.x < 3 * here) w[threadIdx.x] = reinterpret_cast<const u64*>(table + first)[threadIdx.x];
  __syncthreads();
  const unsigned warp = threadIdx.x / 32;
  if (warp < here) {
    copy_span(reinterpret_cast<char*>(w[3 * warp]), reinterpret_cast<const char*>(w[3 * warp + 1]), w[3 * warp + 2],
              threadIdx.x & 31, 32, PlainLoads{});
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
  // The whole-block table again, a descriptor a line, and in GPU memory.
  LineItem* lines;
  CK(cudaHostAlloc(&lines, blocks * sizeof(LineItem), cudaHostAllocPortable));
  GatherItem* dev_table;
  CK(cudaMalloc(&dev_table, blocks * sizeof(GatherItem)));
  auto list_whole = [&] {
    const unsigned n = list(bs);
    for (unsigned i = 0; i < n; ++i) lines[i].it = table[i];
    CK(cudaMemcpyAsync(dev_table, table, n * sizeof(GatherItem), cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
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
    int kind;  // 0 copy engine, 1 launched table kernel, 2 resident, 3 bell, 4 table_lines, 5 table_device,
               // 6 table_3lanes, 7 table_warps, 8 table_uploaded (copied to GPU memory, then launched)
    unsigned grid = 0, threads = 0;
    size_t cut = 0;
    std::vector<double> post, total, gpu;
    bool ok = true;
  };
  std::vector<M> ms;
  auto resident = [](const M& m) { return m.kind == 2 || m.kind == 3; };
  ms.push_back({"ce", 0});
  ms.push_back({"table", 1});
  ms.push_back({"table_lines", 4});
  ms.push_back({"table_device", 5});
  ms.push_back({"table_3lanes", 6});
  ms.push_back({"table_warps", 7});
  ms.push_back({"table_uploaded", 8});
  // TABLES_ONLY=1: no resident rows (the copy engine and the table kernels).
  const bool tables_only = std::getenv("TABLES_ONLY") != nullptr && std::string(std::getenv("TABLES_ONLY")) == "1";
  if (!tables_only) ms.push_back({"resident_empty", 2, 32, 256, 0});
  for (auto [g, t] : {std::pair{32u, 256u}, {64u, 256u}, {32u, 512u}}) {
    if (tables_only) break;
    for (size_t cut : bs > 4096 ? std::vector<size_t>{bs, 4096} : std::vector<size_t>{bs}) {
      ms.push_back({"resident_g" + std::to_string(g) + "_t" + std::to_string(t) + "_c" + std::to_string(cut), 2, g,
                    t, cut});
    }
  }
  if (!tables_only) ms.push_back({"bell_empty", 3, 32, 256, 0});
  for (auto [g, t] : {std::pair{32u, 256u}, {64u, 256u}}) {
    if (tables_only) break;
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
      CK(cudaMemcpyPeerAsync(dst, pools.far, src, 0, blocks * bs, s));
    } else if (m.kind == 1 || m.kind >= 4) {
      if (listed_cut != bs) {
        listed = list_whole();
        listed_cut = bs;
      }
      const unsigned grid = std::min(blocks, 1024u);
      if (m.kind == 1) ferry_gather_table<<<grid, threads, 0, s>>>(table, blocks);
      if (m.kind == 4) gather_table_lines<<<grid, threads, 0, s>>>(lines, blocks);
      if (m.kind == 5) ferry_gather_table<<<grid, threads, 0, s>>>(dev_table, blocks);
      if (m.kind == 6) gather_table_3lanes<<<grid, threads, 0, s>>>(table, blocks);
      if (m.kind == 7) gather_table_warps<<<(blocks + 7) / 8, 256, 0, s>>>(table, blocks);
      if (m.kind == 8) {
        CK(cudaMemcpyAsync(dev_table, table, blocks * sizeof(GatherItem), cudaMemcpyHostToDevice, s));
        ferry_gather_table<<<grid, threads, 0, s>>>(dev_table, blocks);
      }
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
    if (!resident(m)) {
      t1 = Clock::now();
      CK(cudaEventRecord(ev, s));
      while (cudaEventQuery(ev) == cudaErrorNotReady) {
      }
    }
    auto t2 = Clock::now();
    if (resident(m)) m.gpu.push_back((static_cast<double>(stamps[1]) - static_cast<double>(stamps[0])) / 1000.0);
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
    if (resident(m)) start(m);
    for (int i = 0; i < 20; ++i) once(m);
    const bool moves = !(resident(m) && m.cut == 0);  // an empty request moves nothing to check
    if (moves) verify(m);
    if (resident(m)) {
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
      if (resident(m)) start(m);
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
