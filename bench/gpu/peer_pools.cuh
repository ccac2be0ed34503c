// What the block probes (completion_probe.cu, resident_gather.cu) share:
// their arguments, a source pool on GPU 0 and a target pool on GPU 1 that
// GPU 0 writes through peer access (GPU 0 left current), and percentiles.
// On a host with one GPU the target pool is on GPU 0 too: a stand-in whose
// numbers judge nothing that crosses NVLink.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"

struct PeerPools {
  uint8_t* src = nullptr;  // on GPU 0
  uint8_t* dst = nullptr;  // on GPU `far`
  int far = 1;
};

// Ends the process, saying why, where GPU 0 cannot reach GPU 1.
inline PeerPools peer_pools(size_t bytes) {
  int gpus = 0;
  CK(cudaGetDeviceCount(&gpus));
  PeerPools p;
  p.far = gpus > 1 ? 1 : 0;
  if (p.far == 0) {
    std::fprintf(stderr, "one GPU: both pools on GPU 0\n");
  } else {
    int can = 0;
    CK(cudaDeviceCanAccessPeer(&can, 0, 1));
    if (!can) {
      std::fprintf(stderr, "GPU 0 has no peer access to GPU 1\n");
      std::exit(1);
    }
  }
  CK(cudaSetDevice(p.far));
  CK(cudaMalloc(&p.dst, bytes));
  CK(cudaSetDevice(0));
  if (p.far != 0) CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaMalloc(&p.src, bytes));
  return p;
}

// The target pool's bytes once `stream` (GPU 0's, which wrote them) ended.
inline std::vector<uint8_t> read_target(const PeerPools& p, size_t bytes, cudaStream_t stream) {
  CK(cudaStreamSynchronize(stream));
  std::vector<uint8_t> got(bytes);
  CK(cudaMemcpy(got.data(), p.dst, bytes, cudaMemcpyDeviceToHost));
  return got;
}

// Zeroes the target pool, so that the next check sees only what was written
// after. On a stream of its own: a device-wide synchronize would wait for a
// resident kernel lingering on the same GPU (one GPU: both pools on it).
inline void clear_target(const PeerPools& p, size_t bytes) {
  CK(cudaSetDevice(p.far));
  cudaStream_t t;
  CK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  CK(cudaMemsetAsync(p.dst, 0, bytes, t));
  CK(cudaStreamSynchronize(t));
  CK(cudaStreamDestroy(t));
  CK(cudaSetDevice(0));
}

// The probes' arguments: BLOCKS BLOCK_SIZE ITERS (`tool` names the probe in
// the usage line it prints, ending the process, when they are not three).
struct BlockShape {
  unsigned blocks = 0;
  size_t block_bytes = 0;
  int iters = 0;
  size_t pool() const { return 2 * blocks * block_bytes; }  // twice the footprint: room to scatter
};
inline BlockShape block_shape(int argc, char** argv, const char* tool) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s BLOCKS BLOCK_SIZE ITERS\n", tool);
    std::exit(2);
  }
  return BlockShape{static_cast<unsigned>(std::atoi(argv[1])), std::strtoull(argv[2], nullptr, 10),
                    std::atoi(argv[3])};
}

// The q-th quantile (0..1) of `v`, which must not be empty.
inline double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}
