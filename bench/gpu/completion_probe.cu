// completion_probe: where a local GPU->GPU write spends its time between
// posting and the host learning it ended, in one process on GPUs 0 and 1.
// Two ways to post (one copy-engine peer copy of all the bytes; one launch of
// ferry's own table gather kernel over BLOCKS scattered blocks) crossed with
// three ways to learn of the end:
//
//   event   cudaEventRecord after the work, cudaEventQuery polled;
//   memop   cuStreamWriteValue32 of a sequence number into mapped pinned host
//           memory after the work (a system-scope fence comes with it), the
//           word polled with plain loads: no driver call while waiting;
//   kernel  (gather only) the kernel's last block of threads writes the word
//           itself after a system-scope fence: no extra stream operation.
//
// and two pollers: the posting thread itself ("self"), or a second thread
// that polls and yields and hands the end over through an atomic ("thread"),
// as ferry's progress thread does. Then the table gather kernel with T
// threads a block each holding W 16-byte words in flight, all its loads
// issued before its first store ("hoisted_tT_wW", event, self), where the
// block's size allows.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/gpu/completion_probe.cu -o completion_probe -lcuda
//   completion_probe BLOCKS BLOCK_SIZE ITERS
//
// Rounds alternate the methods, ITERS batches each in all. One line a method:
//   METHOD post_p50_us total_p50_us total_p10_us verify=ok|FAILED
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
#include <thread>
#include <vector>

#include "../../src/gpu/gather_kernel.cu"
#include "cuda_check.cuh"
#include "peer_pools.cuh"

// ferry_gather_table, and then the last block to finish writes `seq` to
// `flag` (mapped pinned host memory) once every block's bytes are visible.
extern "C" __global__ void gather_table_flag(const GatherItem* table, unsigned count, unsigned* counter,
                                             volatile unsigned* flag, unsigned seq) {
  __shared__ GatherItem it;
  gather_table(table, count, it, [](char* dst, const char* src, u64 n) { copy_item(dst, src, n); });
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned prev = atomicAdd(counter, 1);
    if (prev == gridDim.x - 1) {
      *counter = 0;
      __threadfence_system();
      *flag = seq;
    }
  }
}

// The table kernel with each thread holding W 16-byte words in flight:
// all its loads issue before its first store.
template <int W>
__device__ __forceinline__ void copy_hoisted(char* dst, const char* src, u64 n) {
  const u64 t = threadIdx.x, T = blockDim.x;
  if (((reinterpret_cast<u64>(dst) ^ reinterpret_cast<u64>(src)) & 15) != 0 || (reinterpret_cast<u64>(dst) & 15)) {
    for (u64 i = t; i < n; i += T) dst[i] = src[i];
    return;
  }
  const u64 body = n / 16;
  uint4* d = reinterpret_cast<uint4*>(dst);
  const uint4* s = reinterpret_cast<const uint4*>(src);
  for (u64 base = 0; base < body; base += W * T) {
    uint4 r[W];
#pragma unroll
    for (int k = 0; k < W; ++k) {
      u64 i = base + t + k * T;
      if (i < body) r[k] = s[i];
    }
#pragma unroll
    for (int k = 0; k < W; ++k) {
      u64 i = base + t + k * T;
      if (i < body) d[i] = r[k];
    }
  }
  const u64 done = body * 16;
  if (t < n - done) dst[done + t] = src[done + t];
}
template <int W>
__global__ void gather_table_hoisted(const GatherItem* table, unsigned count) {
  __shared__ GatherItem it;
  gather_table(table, count, it, [](char* dst, const char* src, u64 n) { copy_hoisted<W>(dst, src, n); });
}

using Clock = std::chrono::steady_clock;
static double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Poller {
  std::atomic<int> mode{0};  // 0 idle, 1 event, 2 word
  std::atomic<cudaEvent_t> event{nullptr};
  std::atomic<unsigned> want{0};
  volatile unsigned* word = nullptr;
  std::atomic<unsigned> seen{0};
  std::atomic<bool> stop{false};
  void run() {
    CK(cudaSetDevice(0));
    while (!stop.load()) {
      int m = mode.load(std::memory_order_acquire);
      if (m == 1) {
        cudaEvent_t e = event.load();
        if (cudaEventQuery(e) == cudaSuccess) {
          mode.store(0);
          seen.store(want.load(), std::memory_order_release);
        }
      } else if (m == 2) {
        if (*word == want.load()) {
          mode.store(0);
          seen.store(want.load(), std::memory_order_release);
        }
      }
      std::this_thread::yield();
    }
  }
};

int main(int argc, char** argv) {
  const BlockShape shape = block_shape(argc, argv, "completion_probe");
  const unsigned blocks = shape.blocks;
  const size_t bs = shape.block_bytes, pool = shape.pool();
  const int iters = shape.iters;
  const PeerPools pools = peer_pools(pool);
  uint8_t *const src = pools.src, *const dst = pools.dst;
  std::vector<uint8_t> host(pool);
  std::mt19937_64 rng(7);
  for (auto& b : host) b = static_cast<uint8_t>(rng());
  CK(cudaMemcpy(src, host.data(), pool, cudaMemcpyHostToDevice));
  std::vector<unsigned> ss(2 * blocks), ds(2 * blocks);
  for (unsigned i = 0; i < 2 * blocks; ++i) ss[i] = ds[i] = i;
  std::shuffle(ss.begin(), ss.end(), rng);
  std::shuffle(ds.begin(), ds.end(), rng);
  GatherItem* table;
  CK(cudaHostAlloc(&table, blocks * sizeof(GatherItem), cudaHostAllocPortable));
  for (unsigned i = 0; i < blocks; ++i) {
    table[i] = {reinterpret_cast<u64>(dst + ds[i] * bs), reinterpret_cast<u64>(src + ss[i] * bs), bs};
  }
  unsigned* word;
  CK(cudaHostAlloc(&word, 64, cudaHostAllocMapped | cudaHostAllocPortable));
  *word = 0;
  unsigned* dword;
  CK(cudaHostGetDevicePointer(&dword, word, 0));
  unsigned* counter;
  CK(cudaMalloc(&counter, 4));
  CK(cudaMemset(counter, 0, 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const unsigned threads = std::clamp<size_t>(bs / 16, 128, 512);
  const unsigned grid = std::min(blocks, 1024u);
  unsigned seq = 0;

  Poller poller;
  poller.word = word;
  std::thread pt([&] { poller.run(); });

  struct M {
    std::string name;
    bool gather;
    int end;     // 0 event, 1 memop, 2 kernel
    bool other;  // a second thread polls
    std::vector<double> post, total;
    bool ok = true;
    int threads = 0, words = 0;
  };
  std::vector<M> ms;
  for (bool gather : {false, true}) {
    for (int end : {0, 1, 2}) {
      if (end == 2 && !gather) continue;
      for (bool other : {false, true}) {
        std::string n = std::string(gather ? "gather" : "ce") + "_" +
                        (end == 0   ? "event"
                         : end == 1 ? "memop"
                                    : "kernel") +
                        "_" + (other ? "thread" : "self");
        ms.push_back({n, gather, end, other});
      }
    }
  }
  struct V {
    int threads, words;
  };
  const V variants[] = {{512, 1}, {256, 1}, {256, 2}, {256, 4}, {128, 2}, {128, 4}, {64, 4}};
  for (const V& v : variants) {
    if (static_cast<u64>(v.threads) * v.words * 16 > bs) continue;
    ms.push_back({"hoisted_t" + std::to_string(v.threads) + "_w" + std::to_string(v.words), true, 0, false});
    ms.back().threads = v.threads;
    ms.back().words = v.words;
  }
  auto once = [&](M& m) {
    ++seq;
    auto t0 = Clock::now();
    if (m.gather) {
      if (m.words == 1) {
        gather_table_hoisted<1><<<grid, m.threads, 0, s>>>(table, blocks);
      } else if (m.words == 2) {
        gather_table_hoisted<2><<<grid, m.threads, 0, s>>>(table, blocks);
      } else if (m.words == 4) {
        gather_table_hoisted<4><<<grid, m.threads, 0, s>>>(table, blocks);
      } else if (m.end == 2) {
        gather_table_flag<<<grid, threads, 0, s>>>(table, blocks, counter, word ? dword : nullptr, seq);
      } else {
        ferry_gather_table<<<grid, threads, 0, s>>>(table, blocks);
      }
    } else {
      CK(cudaMemcpyPeerAsync(dst, pools.far, src, 0, blocks * bs, s));
    }
    auto t1 = Clock::now();
    if (m.end == 0) CK(cudaEventRecord(ev, s));
    if (m.end == 1) {
      CUresult r = cuStreamWriteValue32(s, reinterpret_cast<CUdeviceptr>(dword), seq, CU_STREAM_WRITE_VALUE_DEFAULT);
      if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuStreamWriteValue32: %d\n", r);
        std::_Exit(1);
      }
    }
    if (m.other) {
      poller.want.store(seq);
      if (m.end == 0) poller.event.store(ev);
      poller.mode.store(m.end == 0 ? 1 : 2, std::memory_order_release);
      while (poller.seen.load(std::memory_order_acquire) != seq) {
      }
    } else if (m.end == 0) {
      while (cudaEventQuery(ev) == cudaErrorNotReady) {
      }
    } else {
      while (*reinterpret_cast<volatile unsigned*>(word) != seq) {
      }
    }
    auto t2 = Clock::now();
    m.post.push_back(us(t1 - t0));
    m.total.push_back(us(t2 - t0));
  };
  auto verify = [&](M& m) {
    const std::vector<uint8_t> got = read_target(pools, pool, s);
    for (unsigned i = 0; i < blocks && m.ok; ++i) {
      const uint8_t* want = m.gather ? host.data() + ss[i] * bs : host.data() + i * bs;
      const uint8_t* at = m.gather ? got.data() + ds[i] * bs : got.data() + i * bs;
      if (std::memcmp(want, at, bs) != 0) m.ok = false;
    }
    clear_target(pools, pool);
  };
  for (M& m : ms) {
    for (int i = 0; i < 20; ++i) once(m);
    verify(m);
    m.post.clear();
    m.total.clear();
  }
  const int rounds = 10;
  for (int r = 0; r < rounds; ++r) {
    for (M& m : ms) {
      for (int i = 0; i < iters / rounds; ++i) once(m);
    }
  }
  poller.stop = true;
  pt.join();
  int rc = 0;
  for (M& m : ms) {
    std::printf("%-22s %u x %zu  post %6.2f  total %7.2f  p10 %7.2f  verify=%s\n", m.name.c_str(), blocks, bs,
                percentile(m.post, 0.5), percentile(m.total, 0.5), percentile(m.total, 0.1), m.ok ? "ok" : "FAILED");
    if (!m.ok) rc = 1;
  }
  return rc;
}
