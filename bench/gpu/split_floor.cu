// split_floor: whether one large GPU-to-GPU copy finishes sooner cut into
// parts on several streams (several copy engines) than as one copy: pushed
// from GPU 0, pulled by GPU 1, or half each. Timed from posting to the host
// seeing every part's event done, by polling, as the local transport does;
// medians of 100 (after 20 untimed). The same-host 64 MiB target is weighed
// against it in docs/benchmarks/2026-11-23.md.
//
//   nvcc -O2 -arch=sm_90 -o split_floor bench/gpu/split_floor.cu && ./split_floor
//
// Needs two GPUs with peer access.
#include <cstdint>

#include "floor_common.cuh"

int main() {
  const size_t kMax = size_t{256} << 20;
  void *src = nullptr, *dst = nullptr;
  const int S = 8;
  cudaStream_t s0[S], s1[S];
  cudaEvent_t e0[S], e1[S];
  CHECK(cudaSetDevice(1));
  CHECK(cudaMalloc(&dst, kMax));
  CHECK(cudaDeviceEnablePeerAccess(0, 0));
  for (int i = 0; i < S; ++i) {
    CHECK(cudaStreamCreateWithFlags(&s1[i], cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&e1[i], cudaEventDisableTiming));
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&src, kMax));
  CHECK(cudaDeviceEnablePeerAccess(1, 0));
  for (int i = 0; i < S; ++i) {
    CHECK(cudaStreamCreateWithFlags(&s0[i], cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&e0[i], cudaEventDisableTiming));
  }
  // mode 0: k pushes (streams on GPU 0); 1: k pulls (GPU 1); 2: alternating (streams on GPU0), pull k ways (GPU1),
  // mixed (half push, half pull)
  auto run = [&](size_t bytes, int k, int mode) {
    std::vector<double> t;
    for (int it = 0; it < 120; ++it) {
      auto t0 = Clock::now();
      size_t per = (bytes / k + 4095) & ~size_t{4095};
      std::vector<std::pair<cudaEvent_t, int>> evs;
      for (int i = 0; i < k; ++i) {
        size_t off = per * i;
        if (off >= bytes) break;
        size_t n = std::min(per, bytes - off);
        bool pull = mode == 1 || (mode == 2 && (i & 1));
        int dev = pull ? 1 : 0;
        cudaSetDevice(dev);
        cudaStream_t s = pull ? s1[i] : s0[i];
        cudaMemcpyAsync(static_cast<char*>(dst) + off, static_cast<char*>(src) + off, n, cudaMemcpyDeviceToDevice, s);
        cudaEvent_t e = pull ? e1[i] : e0[i];
        cudaEventRecord(e, s);
        evs.push_back({e, dev});
      }
      for (auto& [e, dev] : evs)
        while (cudaEventQuery(e) == cudaErrorNotReady) {
        }
      if (it >= 20) t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    return median(t);
  };
  std::printf("%-6s %8s %8s %8s %8s %8s %8s %8s %8s\n", "MiB", "push1", "pull1", "push2", "push4", "pull2", "pull4",
              "mix2", "mix4");
  for (size_t mb : {4, 16, 64, 256}) {
    size_t b = mb << 20;
    double r[8] = {run(b, 1, 0), run(b, 1, 1), run(b, 2, 0), run(b, 4, 0),
                   run(b, 2, 1), run(b, 4, 1), run(b, 2, 2), run(b, 4, 2)};
    std::printf("%-6zu", mb);
    for (double x : r) std::printf(" %8.1f", x);
    std::printf("   GB/s:");
    for (double x : r) std::printf(" %5.0f", b / x / 1e3);
    std::printf("\n");
  }
  return 0;
}
