// nccl_sendrecv: the NCCL anchor of bench/gpu/tcp_gpu.sh. Two processes, rank
// 0 on GPU 0 sends to rank 1 on GPU 1 with ncclSend/ncclRecv; NCCL is loaded
// with dlopen (its headers need not be installed) from FERRY_NCCL_LIBRARY.
//
//   nccl_sendrecv RANK ID_FILE ITERS SIZE...
//
// Rank 0 writes the unique id to ID_FILE, rank 1 reads it. For each size:
// 3 warm-up transfers, then 5 samples of ITERS transfers each, timed with CUDA
// events on rank 1 after a 1-byte handshake; rank 1 prints "SIZE GB/s" (the
// median sample). The environment chooses NCCL's transport (the script sets
// the socket transport over loopback).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

// The NCCL ABI pieces used here, declared by hand (nccl.h, NCCL 2.x).
struct ncclUniqueId {
  char internal[128];
};
typedef struct ncclComm* ncclComm_t;
typedef int ncclResult_t;
constexpr int ncclUint8 = 1;

struct Nccl {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*send)(const void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  const char* (*error_string)(ncclResult_t);
};

#define CHECK_CUDA(x)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "nccl_sendrecv: %s: %s\n", #x, cudaGetErrorString(e_));     \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)
#define CHECK_NCCL(x)                                                                  \
  do {                                                                                 \
    ncclResult_t r_ = (x);                                                             \
    if (r_ != 0) {                                                                     \
      std::fprintf(stderr, "nccl_sendrecv: %s: %s\n", #x, nccl.error_string(r_));      \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

template <typename F>
void load(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr) {
    std::fprintf(stderr, "nccl_sendrecv: %s not found in NCCL\n", name);
    std::exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: nccl_sendrecv RANK ID_FILE ITERS SIZE...\n");
    return 2;
  }
  int rank = std::atoi(argv[1]);
  std::string id_file = argv[2];
  int iters = std::atoi(argv[3]);
  std::vector<size_t> sizes;
  for (int i = 4; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  const char* path = std::getenv("FERRY_NCCL_LIBRARY");
  void* lib = dlopen(path != nullptr ? path : "libnccl.so.2", RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stderr, "nccl_sendrecv: cannot load NCCL: %s\n", dlerror());
    return 1;
  }
  Nccl nccl;
  load(lib, "ncclGetUniqueId", nccl.get_unique_id);
  load(lib, "ncclCommInitRank", nccl.comm_init_rank);
  load(lib, "ncclSend", nccl.send);
  load(lib, "ncclRecv", nccl.recv);
  load(lib, "ncclCommDestroy", nccl.comm_destroy);
  load(lib, "ncclGetErrorString", nccl.error_string);

  int ngpu = 0;
  CHECK_CUDA(cudaGetDeviceCount(&ngpu));
  CHECK_CUDA(cudaSetDevice(ngpu > 1 ? rank : 0));
  ncclUniqueId id;
  if (rank == 0) {
    CHECK_NCCL(nccl.get_unique_id(&id));
    std::string tmp = id_file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof(id.internal));
    std::rename(tmp.c_str(), id_file.c_str());
  } else {
    for (int i = 0; i < 3000; ++i) {
      std::ifstream in(id_file, std::ios::binary);
      if (in && in.read(id.internal, sizeof(id.internal))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ncclComm_t comm;
  CHECK_NCCL(nccl.comm_init_rank(&comm, 2, id, rank));
  size_t max = *std::max_element(sizes.begin(), sizes.end());
  void* buf = nullptr;
  CHECK_CUDA(cudaMalloc(&buf, max));
  CHECK_CUDA(cudaMemset(buf, rank, max));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, end;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&end));
  auto one = [&](size_t n) {
    if (rank == 0) {
      CHECK_NCCL(nccl.send(buf, n, ncclUint8, 1, comm, stream));
    } else {
      CHECK_NCCL(nccl.recv(buf, n, ncclUint8, 0, comm, stream));
    }
  };
  // Rank 1 tells rank 0 it is ready (1 byte, the other way), so both time the same transfers.
  auto handshake = [&] {
    if (rank == 1) {
      CHECK_NCCL(nccl.send(buf, 1, ncclUint8, 0, comm, stream));
    } else {
      CHECK_NCCL(nccl.recv(buf, 1, ncclUint8, 1, comm, stream));
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
  };
  for (size_t n : sizes) {
    for (int i = 0; i < 3; ++i) one(n);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<double> samples;
    for (int s = 0; s < 5; ++s) {
      handshake();
      CHECK_CUDA(cudaEventRecord(start, stream));
      for (int i = 0; i < iters; ++i) one(n);
      CHECK_CUDA(cudaEventRecord(end, stream));
      CHECK_CUDA(cudaEventSynchronize(end));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, end));
      samples.push_back(static_cast<double>(n) * iters / (ms / 1e3) / 1e9);
    }
    std::sort(samples.begin(), samples.end());
    if (rank == 1) std::printf("%zu %.3f\n", n, samples[samples.size() / 2]);
    std::fflush(stdout);
  }
  nccl.comm_destroy(comm);
  return 0;
}
