// copy_round_trip: what one copy between GPU memory and pinned host memory
// costs from posting to the host seeing it done, per size: the two copies a
// small GPU message staged over TCP cannot avoid (device -> host on the
// sender's GPU, host -> device on the receiver's). bench/gpu/two_gpu.sh
// states the small-message target as host message + these two + 3 us.
//
//   nvcc -O2 -std=c++17 -o copy_round_trip bench/gpu/copy_round_trip.cu
//   ./copy_round_trip SEND_GPU RECV_GPU SIZE...
// prints "SIZE d2h_us h2d_us" a size: medians of 500 after 50 untimed, each
// copy on a non-blocking stream of its GPU, completion seen by polling an
// event (as ferry's staging copier does).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"

namespace {

using Clock = std::chrono::steady_clock;

struct End {
  int gpu = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  void* device = nullptr;
  void* host = nullptr;
};

End open_end(int gpu, size_t bytes) {
  End e;
  e.gpu = gpu;
  CK(cudaSetDevice(gpu));
  CK(cudaStreamCreateWithFlags(&e.stream, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&e.done, cudaEventDisableTiming));
  CK(cudaMalloc(&e.device, bytes));
  CK(cudaHostAlloc(&e.host, bytes, cudaHostAllocPortable));
  CK(cudaMemset(e.device, 7, bytes));
  CK(cudaDeviceSynchronize());
  return e;
}

// Median microseconds from posting one copy of `bytes` to its event reading done.
double median_us(End& e, size_t bytes, bool to_host) {
  CK(cudaSetDevice(e.gpu));
  std::vector<double> t;
  for (int i = 0; i < 550; ++i) {
    auto t0 = Clock::now();
    if (to_host) {
      CK(cudaMemcpyAsync(e.host, e.device, bytes, cudaMemcpyDeviceToHost, e.stream));
    } else {
      CK(cudaMemcpyAsync(e.device, e.host, bytes, cudaMemcpyHostToDevice, e.stream));
    }
    CK(cudaEventRecord(e.done, e.stream));
    cudaError_t s;
    // Polled, not synchronised: a blocking wait would add the driver's wake-up.
    while ((s = cudaEventQuery(e.done)) == cudaErrorNotReady) {
    }
    CK(s);
    if (i >= 50) t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: copy_round_trip SEND_GPU RECV_GPU SIZE...\n");
    return 2;
  }
  std::vector<size_t> sizes;
  for (int i = 3; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  const size_t most = *std::max_element(sizes.begin(), sizes.end());
  End send = open_end(std::atoi(argv[1]), most), recv = open_end(std::atoi(argv[2]), most);
  for (size_t n : sizes) {
    double d2h = median_us(send, n, true), h2d = median_us(recv, n, false);
    std::printf("%zu %.2f %.2f\n", n, d2h, h2d);
  }
  return 0;
}
