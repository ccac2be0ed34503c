// What the copy-floor tools (copy_floor.cu, resident_floor.cu) share: error
// checks and the way one posted copy is timed, from posting to the host
// seeing its event done.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                   \
  do {                                                             \
    cudaError_t e = (x);                                           \
    if (e != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                                    \
    }                                                              \
  } while (0)

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median of 300 timed posts (after 20 untimed) of `post`, each followed by
// an event on `stream` that is polled, as the local transport polls: a
// blocking wait would add a wake-up.
template <class Post>
double median_us(Post post, cudaEvent_t done, cudaStream_t stream) {
  std::vector<double> t;
  for (int i = 0; i < 320; ++i) {
    auto t0 = Clock::now();
    post();
    cudaEventRecord(done, stream);
    while (cudaEventQuery(done) == cudaErrorNotReady) {
    }
    if (i >= 20) t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median(t);
}
