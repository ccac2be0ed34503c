// pcie_ceiling: what the host's PCIe links carry between GPU and pinned host
// memory, the ceiling of any GPU -> GPU transfer staged through host memory:
// its bytes cross the source GPU's link (device -> host) and the
// destination's (host -> device). Times 30 copies of 64 MiB on the copy
// engines, device -> host on GPU A and host -> device on GPU B, each alone
// and both at once (as a staged transfer runs them).
//
//   nvcc -O2 -std=c++17 -o pcie_ceiling bench/gpu/pcie_ceiling.cu && ./pcie_ceiling [A B]
// prints "alone d2h GB/s h2d GB/s" and "together d2h GB/s h2d GB/s".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cuda_check.cuh"

constexpr size_t kBytes = 64 << 20;
constexpr int kReps = 30;

// GB/s of kReps copies between a device buffer and a pinned one on `device`.
double timed(int device, bool to_host) {
  CK(cudaSetDevice(device));
  void *host = nullptr, *dev = nullptr;
  CK(cudaHostAlloc(&host, kBytes, cudaHostAllocPortable));
  CK(cudaMalloc(&dev, kBytes));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* dst = to_host ? host : dev;
  void* src = to_host ? dev : host;
  CK(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDefault, s));  // untimed: first touch
  CK(cudaStreamSynchronize(s));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kReps; ++i) CK(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDefault, s));
  CK(cudaStreamSynchronize(s));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  CK(cudaFreeHost(host));
  return static_cast<double>(kBytes) * kReps / secs / 1e9;
}

int main(int argc, char** argv) {
  int a = argc > 2 ? std::atoi(argv[1]) : 0, b = argc > 2 ? std::atoi(argv[2]) : 1;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (b >= n) b = a;
  double d2h = timed(a, true), h2d = timed(b, false);
  std::printf("alone d2h %.1f h2d %.1f\n", d2h, h2d);
  std::thread t1([&] { d2h = timed(a, true); }), t2([&] { h2d = timed(b, false); });
  t1.join();
  t2.join();
  std::printf("together d2h %.1f h2d %.1f\n", d2h, h2d);
  return 0;
}
