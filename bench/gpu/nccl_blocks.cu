// nccl_blocks: the anchors of bench/gpu/blocks.sh. A KV cache's block writes
// between two GPUs of one host, in one process: BLOCKS blocks of BLOCK_SIZE
// bytes, each from a random slot of a pool on GPU 0 to a random slot of a pool
// on GPU 1 (each pool 2 x BLOCKS x BLOCK_SIZE bytes; slots BLOCK_SIZE-aligned
// and distinct on each side; the layout of `ferry bench --blocks --scatter`'s
// first batch, from the same seed), moved four ways:
//
//   contiguous         one cudaMemcpyPeerAsync of all the blocks' bytes, pool
//                      start to pool start (what the blocks would cost if
//                      they were adjacent);
//   per_block_copies   one cudaMemcpyPeerAsync a block, on one stream;
//   gather_kernel      one launch of a copy kernel on GPU 0 that reads a table
//                      of (dst, src, n) and writes through peer pointers: the
//                      one-launch floor of a scattered batch (skipped without
//                      peer access);
//   nccl_group         ncclSend/ncclRecv a block, all in one ncclGroupStart/
//                      ncclGroupEnd, communicators from ncclCommInitAll; NCCL
//                      is loaded with dlopen (its headers need not be
//                      installed) from FERRY_NCCL_LIBRARY, and the row is skipped
//                      when that is unset or does not load.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/gpu/nccl_blocks.cu -o nccl_blocks -ldl
//   FERRY_NCCL_LIBRARY=/path/to/libnccl.so.2 nccl_blocks BLOCKS BLOCK_SIZE ITERS
//   (e.g. nccl_blocks 256 16384 100)
//
// Each batch is timed on the host from posting to completion (steady_clock
// around the posts and a cudaStreamSynchronize of every stream involved):
// 10 untimed batches, then ITERS timed. Pool 1 is zeroed before each method
// and checked block by block against pool 0's random bytes after it. One line
// a method on stdout:
//
//   METHOD BLOCKS BLOCK_SIZE p50_us GB/s verify=ok|FAILED
//
// (GB/s = BLOCKS x BLOCK_SIZE bytes over the median batch time). Notes go to
// stderr. On a host with one GPU both pools are on GPU 0 and there is no
// nccl_group row (NCCL pairs no two ranks on one device): the copy engine's
// and the kernel's rows then stand in for what no two-GPU host could give. Exit status: 0, 1 when a row did not verify or a call failed
// (ncclGroupEnd included), 2 on bad arguments.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

// The NCCL ABI pieces used here, declared by hand (nccl.h, NCCL 2.x).
typedef struct ncclComm* ncclComm_t;
typedef int ncclResult_t;
constexpr int ncclUint8 = 1;

struct Nccl {
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*);
  ncclResult_t (*group_start)();
  ncclResult_t (*group_end)();
  ncclResult_t (*send)(const void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  const char* (*error_string)(ncclResult_t);
  ncclResult_t (*get_version)(int*);          // optional
  const char* (*get_last_error)(ncclComm_t);  // optional (NCCL 2.13 and later)
};

#define CHECK_CUDA(x)                                                            \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      std::fprintf(stderr, "nccl_blocks: %s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)
#define CHECK_NCCL(x)                                                                   \
  do {                                                                                  \
    ncclResult_t r_ = (x);                                                              \
    if (r_ != 0) {                                                                      \
      std::fprintf(stderr, "nccl_blocks: %s: %s%s%s\n", #x, nccl.error_string(r_),      \
                   nccl.get_last_error != nullptr ? ": " : "",                          \
                   nccl.get_last_error != nullptr ? nccl.get_last_error(nullptr) : ""); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

// Where a block starts in pool 0 (src) and in pool 1 (dst).
struct Place {
  size_t src;
  size_t dst;
};

// What the gather kernel reads: one entry a block.
struct Copy {
  unsigned char* dst;
  const unsigned char* src;
  size_t n;
};

// Blocks over blockIdx.x (grid-stride), each block's bytes over blockIdx.y
// and the threads; 16-byte loads and stores where both ends and the length
// allow, bytes otherwise.
__global__ void gather(const Copy* __restrict__ copies, size_t count) {
  for (size_t b = blockIdx.x; b < count; b += gridDim.x) {
    Copy c = copies[b];
    size_t tid = blockIdx.y * static_cast<size_t>(blockDim.x) + threadIdx.x;
    size_t stride = static_cast<size_t>(gridDim.y) * blockDim.x;
    size_t n16 = 0;
    if (((reinterpret_cast<uintptr_t>(c.dst) | reinterpret_cast<uintptr_t>(c.src)) & 15) == 0) {
      n16 = c.n / 16;
      auto* d = reinterpret_cast<uint4*>(c.dst);
      auto* s = reinterpret_cast<const uint4*>(c.src);
      for (size_t i = tid; i < n16; i += stride) d[i] = s[i];
    }
    for (size_t i = n16 * 16 + tid; i < c.n; i += stride) c.dst[i] = c.src[i];
  }
}

template <typename F>
bool load(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr) std::fprintf(stderr, "nccl_blocks: %s not found in NCCL\n", name);
  return f != nullptr;
}

// NCCL from FERRY_NCCL_LIBRARY, or false (with a note) when it is unset or does not load.
bool load_nccl(Nccl& nccl) {
  const char* path = std::getenv("FERRY_NCCL_LIBRARY");
  if (path == nullptr || *path == '\0') {
    std::fprintf(stderr, "nccl_blocks: FERRY_NCCL_LIBRARY is not set: no nccl_group row\n");
    return false;
  }
  void* lib = dlopen(path, RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stderr, "nccl_blocks: cannot load NCCL (%s): no nccl_group row\n", dlerror());
    return false;
  }
  bool ok = load(lib, "ncclCommInitAll", nccl.comm_init_all) && load(lib, "ncclGroupStart", nccl.group_start) &&
            load(lib, "ncclGroupEnd", nccl.group_end) && load(lib, "ncclSend", nccl.send) &&
            load(lib, "ncclRecv", nccl.recv) && load(lib, "ncclCommDestroy", nccl.comm_destroy) &&
            load(lib, "ncclGetErrorString", nccl.error_string);
  if (!ok) {
    std::fprintf(stderr, "nccl_blocks: %s lacks a symbol: no nccl_group row\n", path);
    return false;
  }
  nccl.get_version = reinterpret_cast<decltype(nccl.get_version)>(dlsym(lib, "ncclGetVersion"));
  nccl.get_last_error = reinterpret_cast<decltype(nccl.get_last_error)>(dlsym(lib, "ncclGetLastError"));
  int version = 0;
  if (nccl.get_version != nullptr && nccl.get_version(&version) == 0) {
    std::fprintf(stderr, "nccl_blocks: NCCL %d from %s\n", version, path);
  }
  return true;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: nccl_blocks BLOCKS BLOCK_SIZE ITERS\n");
    return 2;
  }
  const size_t blocks = std::strtoull(argv[1], nullptr, 10);
  const size_t block_size = std::strtoull(argv[2], nullptr, 10);
  const int iters = std::atoi(argv[3]);
  if (blocks == 0 || block_size == 0 || iters <= 0 || blocks > (size_t{1} << 30) / block_size) {
    std::fprintf(stderr, "nccl_blocks: BLOCKS, BLOCK_SIZE and ITERS must be positive, BLOCKS x BLOCK_SIZE <= 1 GiB\n");
    return 2;
  }
  constexpr int kWarmup = 10;
  const size_t bytes = blocks * block_size;  // one batch
  const size_t pool = 2 * bytes;

  int ngpu = 0;
  CHECK_CUDA(cudaGetDeviceCount(&ngpu));
  if (ngpu < 1) {
    std::fprintf(stderr, "nccl_blocks: no GPU\n");
    return 1;
  }
  const int far = ngpu > 1 ? 1 : 0;  // pool 1's device
  if (far == 0) std::fprintf(stderr, "nccl_blocks: one GPU: both pools on GPU 0, no nccl_group row\n");

  // The layout: a random permutation of the 2 x BLOCKS slots on each side,
  // the first BLOCKS taken (ferry's bench_blocks.cc, layout 0).
  std::vector<Place> scattered(blocks), adjacent(blocks);
  {
    std::mt19937_64 rng(0x5107);
    std::vector<size_t> src(2 * blocks), dst(2 * blocks);
    std::iota(src.begin(), src.end(), size_t{0});
    std::iota(dst.begin(), dst.end(), size_t{0});
    std::shuffle(src.begin(), src.end(), rng);
    std::shuffle(dst.begin(), dst.end(), rng);
    for (size_t k = 0; k < blocks; ++k) {
      scattered[k] = {src[k] * block_size, dst[k] * block_size};
      adjacent[k] = {k * block_size, k * block_size};
    }
  }

  // Pools, streams and peer access.
  unsigned char *pool0 = nullptr, *pool1 = nullptr;
  cudaStream_t s0, s1;
  CHECK_CUDA(cudaSetDevice(far));
  CHECK_CUDA(cudaMalloc(&pool1, pool));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaMalloc(&pool0, pool));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  int can01 = far == 0, can10 = far == 0;
  if (far != 0) {
    CHECK_CUDA(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CHECK_CUDA(cudaDeviceCanAccessPeer(&can10, 1, 0));
  }
  const bool peer = can01 != 0 && can10 != 0;
  if (peer && far != 0) {
    for (int d = 0; d < 2; ++d) {
      CHECK_CUDA(cudaSetDevice(d));
      cudaError_t e = cudaDeviceEnablePeerAccess(1 - d, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else {
        CHECK_CUDA(e);
      }
    }
    CHECK_CUDA(cudaSetDevice(0));
  } else {
    std::fprintf(stderr, "nccl_blocks: GPUs 0 and 1 have no peer access (0->1 %d, 1->0 %d): no gather_kernel row\n",
                 can01, can10);
  }

  // Pool 0's random bytes, kept on the host for the checks.
  std::vector<unsigned char> source(pool);
  {
    std::mt19937_64 rng(0xb10c);
    size_t i = 0;
    for (; i + 8 <= pool; i += 8) {
      uint64_t v = rng();
      std::memcpy(&source[i], &v, 8);
    }
    for (; i < pool; ++i) source[i] = static_cast<unsigned char>(rng());
  }
  CHECK_CUDA(cudaMemcpy(pool0, source.data(), pool, cudaMemcpyHostToDevice));

  // The gather kernel's table, uploaded once.
  Copy* table = nullptr;
  {
    std::vector<Copy> copies(blocks);
    for (size_t k = 0; k < blocks; ++k) {
      copies[k] = {pool1 + scattered[k].dst, pool0 + scattered[k].src, block_size};
    }
    CHECK_CUDA(cudaMalloc(&table, blocks * sizeof(Copy)));
    CHECK_CUDA(cudaMemcpy(table, copies.data(), blocks * sizeof(Copy), cudaMemcpyHostToDevice));
  }

  std::vector<unsigned char> landed(pool);
  bool failed = false;
  // Zeroes pool 1, runs kWarmup + iters batches of `post` (each followed by
  // a synchronize of every stream in `streams`), checks pool 1 against
  // `places` and prints the row.
  auto measure = [&](const char* method, const std::vector<Place>& places, const std::vector<cudaStream_t>& streams,
                     auto post) {
    CHECK_CUDA(cudaSetDevice(far));
    CHECK_CUDA(cudaMemset(pool1, 0, pool));
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaSetDevice(0));
    std::vector<double> us;
    us.reserve(iters);
    for (int i = 0; i < kWarmup + iters; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      post();
      for (cudaStream_t s : streams) CHECK_CUDA(cudaStreamSynchronize(s));
      auto t1 = std::chrono::steady_clock::now();
      if (i >= kWarmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemcpy(landed.data(), pool1, pool, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (const Place& p : places) {
      if (std::memcmp(&landed[p.dst], &source[p.src], block_size) != 0) {
        if (ok) {
          std::fprintf(stderr, "nccl_blocks: %s: the block from pool 0 offset %zu to pool 1 offset %zu differs\n",
                       method, p.src, p.dst);
        }
        ok = false;
      }
    }
    failed = failed || !ok;
    std::sort(us.begin(), us.end());
    double p50 = us[us.size() / 2];
    std::printf("%s %zu %zu %.1f %.3f verify=%s\n", method, blocks, block_size, p50,
                static_cast<double>(bytes) / p50 / 1e3, ok ? "ok" : "FAILED");
    std::fflush(stdout);
  };

  measure("contiguous", adjacent, {s0}, [&] { CHECK_CUDA(cudaMemcpyPeerAsync(pool1, far, pool0, 0, bytes, s0)); });

  measure("per_block_copies", scattered, {s0}, [&] {
    for (const Place& p : scattered) {
      CHECK_CUDA(cudaMemcpyPeerAsync(pool1 + p.dst, far, pool0 + p.src, 0, block_size, s0));
    }
  });

  if (peer) {
    // A CTA a block (at most 65535 at once, then grid-stride), and more CTAs
    // a block where blocks are large: about 64 KiB a CTA, at most 64.
    const unsigned grid_x = static_cast<unsigned>(std::min<size_t>(blocks, 65535));
    const unsigned grid_y = static_cast<unsigned>(std::min<size_t>((block_size + 65535) / 65536, 64));
    const dim3 grid(grid_x, grid_y);
    measure("gather_kernel", scattered, {s0}, [&] {
      gather<<<grid, 256, 0, s0>>>(table, blocks);
      CHECK_CUDA(cudaGetLastError());
    });
  }

  Nccl nccl{};
  if (far != 0 && load_nccl(nccl)) {
    ncclComm_t comms[2];
    const int devs[2] = {0, 1};
    CHECK_NCCL(nccl.comm_init_all(comms, 2, devs));
    measure("nccl_group", scattered, {s0, s1}, [&] {
      CHECK_NCCL(nccl.group_start());
      for (const Place& p : scattered) {
        CHECK_NCCL(nccl.send(pool0 + p.src, block_size, ncclUint8, 1, comms[0], s0));
        CHECK_NCCL(nccl.recv(pool1 + p.dst, block_size, ncclUint8, 0, comms[1], s1));
      }
      ncclResult_t r = nccl.group_end();
      if (r != 0) {
        std::fprintf(stderr,
                     "nccl_blocks: ncclGroupEnd failed for a group of %zu ncclSend + %zu ncclRecv: %s%s%s\n"
                     "nccl_blocks: (some NCCL versions limit the operations in one group)\n",
                     blocks, blocks, nccl.error_string(r), nccl.get_last_error != nullptr ? ": " : "",
                     nccl.get_last_error != nullptr ? nccl.get_last_error(comms[0]) : "");
        std::exit(1);
      }
    });
    nccl.comm_destroy(comms[0]);
    nccl.comm_destroy(comms[1]);
  }

  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaFree(table));
  CHECK_CUDA(cudaFree(pool0));
  CHECK_CUDA(cudaStreamDestroy(s0));
  CHECK_CUDA(cudaSetDevice(far));
  CHECK_CUDA(cudaFree(pool1));
  CHECK_CUDA(cudaStreamDestroy(s1));
  if (failed) std::fprintf(stderr, "nccl_blocks: a row did not verify\n");
  return failed ? 1 : 0;
}
