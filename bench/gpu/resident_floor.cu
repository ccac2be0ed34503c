// resident_floor: what one GPU-to-GPU copy costs from posting to the host
// seeing it done when no launch is posted at all: a kernel stays resident on
// the source GPU, polls a doorbell in pinned host memory, copies into the
// peer GPU and writes a completion word back to host memory. Timed beside a
// copy-engine push polled by event (copy_floor's first column), in one
// process with peer access, GPU 0 -> GPU 1.
//
// Why: copy_floor shows that any transfer posting a copy pays a launch and
// an event poll (a copy-engine push of 1 MiB: 9.5-10.4 us on the two-H200
// host), more than the same-host issue's 3x NCCL at 1 MiB allows. This
// measures the floor of the one design that avoids both, before building it.
// Result (docs/benchmarks/2026-11-23.md, morning): no lower. The doorbell's
// round trip alone, GPU polling host memory and host polling the GPU's
// answer, costs what a launch and an event poll do (16 B: 7.4-7.9 us against
// 6.7-7.8), and 1 MiB takes 10.0-10.7 us either way.
//
//   nvcc -O2 -arch=sm_90 -std=c++17 -o resident_floor bench/gpu/resident_floor.cu && ./resident_floor
//
// Checks every copy's bytes once per size (random data), then prints medians
// of 300 repetitions (after 20 untimed), in microseconds.
#include <cstdint>
#include <cstring>
#include <cuda/atomic>
#include <random>

#include "floor_common.cuh"

// The doorbell and the completion word, in mapped pinned host memory.
struct Mailbox {
  uint64_t seq;    // host: the request number; ~0 asks the kernel to exit
  uint64_t bytes;  // host: how much to copy, a multiple of 16
  uint64_t pad[6];
  uint64_t done;  // kernel: the last request number finished
};

constexpr uint64_t kExit = ~0ull;

// Block 0 alone polls the doorbell across PCIe and relays each request to
// the other blocks through device memory (with every block polling host
// memory, each added block cost ~3 us a request); every block copies its
// stripe and counts itself finished; the last one publishes the request.
struct Relay {
  uint64_t seq;
  uint64_t bytes;
  unsigned long long finished;
};

__global__ void resident_copy(Mailbox* box, uint4* __restrict__ dst, const uint4* __restrict__ src, Relay* relay) {
  __shared__ uint64_t seq, n16;
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system> bell(box->seq);
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system> done(box->done);
  cuda::atomic_ref<uint64_t, cuda::thread_scope_device> go(relay->seq);
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> count(relay->finished);
  uint64_t last = 0;
  for (;;) {
    if (threadIdx.x == 0) {
      uint64_t s;
      // Polling is the point of the design: a resident kernel trades a few
      // SMs for the launch it saves.
      if (blockIdx.x == 0) {
        while ((s = bell.load(cuda::memory_order_acquire)) == last) {
        }
        relay->bytes = box->bytes;
        go.store(s, cuda::memory_order_release);
      } else {
        while ((s = go.load(cuda::memory_order_acquire)) == last) {
        }
      }
      seq = s;
      n16 = relay->bytes / 16;
    }
    __syncthreads();
    if (seq == kExit) return;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n16;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
      dst[i] = src[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long before = count.fetch_add(1, cuda::memory_order_acq_rel);
      if (before + 1 == seq * gridDim.x) {
        __threadfence_system();
        done.store(seq, cuda::memory_order_release);
      }
    }
    last = seq;
    __syncthreads();
  }
}

int main() {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::fprintf(stderr, "resident_floor: needs two GPUs, found %d\n", n);
    return 2;
  }
  const size_t kMax = 16u << 20;
  const std::vector<size_t> sizes = {16, 4096, 65536, 1u << 20, 4u << 20, 16u << 20};
  const std::vector<int> grids = {16, 32, 66, 132};
  void *src = nullptr, *dst = nullptr;
  CHECK(cudaSetDevice(1));
  CHECK(cudaMalloc(&dst, kMax));
  CHECK(cudaSetDevice(0));
  CHECK(cudaDeviceEnablePeerAccess(1, 0));
  CHECK(cudaMalloc(&src, kMax));
  std::vector<uint8_t> pattern(kMax), back(kMax);
  std::mt19937_64 rng(7);
  for (auto& b : pattern) b = static_cast<uint8_t>(rng());
  CHECK(cudaMemcpy(src, pattern.data(), kMax, cudaMemcpyHostToDevice));

  // Anchor: a copy-engine push polled by event.
  cudaStream_t stream;
  cudaEvent_t ev;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  std::vector<double> ce;
  for (size_t bytes : sizes) {
    ce.push_back(median_us([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream); }, ev, stream));
  }

  Mailbox* box = nullptr;
  Mailbox* box_dev = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&box), sizeof(Mailbox), cudaHostAllocMapped | cudaHostAllocPortable));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&box_dev), box, 0));
  Relay* relay = nullptr;
  CHECK(cudaMalloc(&relay, sizeof(Relay)));
  std::printf("%-10s %12s", "bytes", "CE push");
  for (int g : grids) std::printf("   resident %3d", g);
  std::printf("\n");
  std::vector<std::vector<double>> res(sizes.size());
  for (int g : grids) {
    std::memset(box, 0, sizeof(Mailbox));
    CHECK(cudaMemset(relay, 0, sizeof(Relay)));
    CHECK(cudaDeviceSynchronize());
    resident_copy<<<g, 512, 0, stream>>>(box_dev, static_cast<uint4*>(dst), static_cast<const uint4*>(src), relay);
    CHECK(cudaGetLastError());
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system> bell(box->seq);
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system> done(box->done);
    uint64_t seq = 0;
    for (size_t si = 0; si < sizes.size(); ++si) {
      size_t bytes = sizes[si];
      // Verify once: poison the destination, copy, compare.
      CHECK(cudaSetDevice(1));
      CHECK(cudaMemset(dst, 0xa5, bytes));
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaSetDevice(0));
      box->bytes = bytes;
      bell.store(++seq, cuda::memory_order_release);
      auto deadline = Clock::now() + std::chrono::seconds(5);
      while (done.load(cuda::memory_order_acquire) != seq) {
        if (Clock::now() > deadline) {
          std::fprintf(stderr, "resident_floor: request %llu of %zu bytes not done in 5 s\n",
                       static_cast<unsigned long long>(seq), bytes);
          return 1;
        }
      }
      CHECK(cudaSetDevice(1));
      CHECK(cudaMemcpy(back.data(), dst, bytes, cudaMemcpyDeviceToHost));
      CHECK(cudaSetDevice(0));
      if (std::memcmp(back.data(), pattern.data(), bytes) != 0) {
        std::fprintf(stderr, "resident_floor: %zu bytes with %d blocks arrived wrong\n", bytes, g);
        return 1;
      }
      std::vector<double> t;
      for (int i = 0; i < 320; ++i) {
        auto t0 = Clock::now();
        box->bytes = bytes;
        bell.store(++seq, cuda::memory_order_release);
        while (done.load(cuda::memory_order_acquire) != seq) {
          if (Clock::now() > deadline + std::chrono::seconds(5)) {
            std::fprintf(stderr, "resident_floor: timed request not done\n");
            return 1;
          }
        }
        if (i >= 20) t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      res[si].push_back(median(t));
    }
    bell.store(kExit, cuda::memory_order_release);
    CHECK(cudaStreamSynchronize(stream));
  }
  for (size_t si = 0; si < sizes.size(); ++si) {
    std::printf("%-10zu %12.2f", sizes[si], ce[si]);
    for (double v : res[si]) std::printf(" %14.2f", v);
    std::printf("\n");
  }
  return 0;
}
