// staged_blast: the floor of a staged GPU -> GPU stream over loopback TCP,
// without ferry. Each stream is one TCP connection with a sender thread and
// a receiver thread in this process, both on GPU 0, moving 1 MiB chunks
// through two pinned host slots on each end, as ferry's staging does:
//
//   plain   send from and receive into the pinned slots; no GPU copies (the
//           sockets' own rate from pinned slots)
//   engine  the sender copies device -> slot on the copy engines ahead of the
//           socket (depth 2), the receiver copies slot -> device behind it
//   kernel  the same copies by a copy kernel (16 blocks of 512 threads)
//   apart   sockets as in plain, while the same copies run between the GPU
//           and other pinned buffers, paced one for one with the chunks: the
//           copies' share of memory and PCIe without their place in the
//           pipeline
//
//   resident the same copies by a kernel of one block per end that stays
//           resident and polls a doorbell in pinned host memory: no launch,
//           no event and no other driver call per chunk
//
// If engine/kernel fall short of plain but apart does not, the pipeline's
// ordering is what costs (fixable in the engine); if apart falls as far, the
// host's memory or PCIe is (no staging order helps); if resident keeps what
// kernel loses, the per-chunk driver calls are what cost.
//
//   nvcc -O2 -arch=sm_90 -std=c++17 -o staged_blast bench/gpu/staged_blast.cu
//   [CHUNK=bytes] [SEND_GPU=n] [RECV_GPU=n] [SLOTS=n] [SPLICE=1] [REGISTER=1]
//     ./staged_blast STREAMS SECONDS MODE...
// prints "MODE STREAMS CHUNK GB/s" a mode. CHUNK (default 1 MiB) is a slot's
// size: small slots stay in the CPU's caches, as iperf3's buffer does.
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda/atomic>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check.cuh"

using Clock = std::chrono::steady_clock;
size_t kChunk = 1 << 20;
int g_send_gpu = 0, g_recv_gpu = 0;
// SLOTS=n: slots an end (default 2). SPLICE=1: the sender hands its slots'
// pages to the socket (vmsplice, splice) instead of copying them in, and
// reuses a slot only once the receiver has read the chunk it held.
// REGISTER=1: slots are mapped anonymous memory, page-locked with
// cudaHostRegister, instead of cudaHostAlloc's.
int g_slots = 2;
bool g_splice = false, g_register = false;


__global__ void copy16(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n16) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

enum class Mode { kPlain, kEngine, kKernel, kApart, kResident };

// The resident mode's doorbell in mapped pinned host memory: the host writes
// a request's addresses, then its number; the kernel copies and writes the
// number back to `done`. kExit in `seq` ends the kernel.
struct Doorbell {
  uint64_t seq;
  uint64_t dst, src;
  uint64_t pad[5];
  uint64_t done;
};
constexpr uint64_t kExit = ~0ull;

__global__ void resident(Doorbell* bell, size_t n16) {
  __shared__ uint64_t seq, dst, src;
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system> req(bell->seq);
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system> done(bell->done);
  uint64_t last = 0;
  for (;;) {
    if (threadIdx.x == 0) {
      uint64_t s;
      // Polling is the point: the kernel trades one SM for the launches it saves.
      while ((s = req.load(cuda::memory_order_acquire)) == last) {
      }
      seq = s;
      dst = bell->dst;
      src = bell->src;
    }
    __syncthreads();
    if (seq == kExit) return;
    uint4* __restrict__ d = reinterpret_cast<uint4*>(dst);
    const uint4* __restrict__ from = reinterpret_cast<const uint4*>(src);
    // Four loads in flight a thread: reads of pinned host memory cross PCIe.
    size_t i = threadIdx.x;
    for (; i + 3 * blockDim.x < n16; i += 4 * blockDim.x) {
      uint4 a = __ldcv(from + i), b = __ldcv(from + i + blockDim.x), c = __ldcv(from + i + 2 * blockDim.x),
            e = __ldcv(from + i + 3 * blockDim.x);
      d[i] = a, d[i + blockDim.x] = b, d[i + 2 * blockDim.x] = c, d[i + 3 * blockDim.x] = e;
    }
    for (; i < n16; i += blockDim.x) d[i] = __ldcv(from + i);
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) done.store(seq, cuda::memory_order_release);
    last = seq;
  }
}

void gpu_copy(Mode m, void* dst, const void* src, cudaStream_t s) {
  if (m == Mode::kKernel) {
    copy16<<<16, 512, 0, s>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), kChunk / 16);
    CK(cudaGetLastError());
  } else {
    CK(cudaMemcpyAsync(dst, src, kChunk, cudaMemcpyDefault, s));
  }
}

bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k, n -= static_cast<size_t>(k);
  }
  return true;
}
bool splice_all(int fd, int pipe_in, int pipe_out, char* p, size_t n) {
  while (n > 0) {
    struct iovec v = {p, n};
    ssize_t k = ::vmsplice(pipe_in, &v, 1, 0);
    if (k <= 0) {
      std::perror("vmsplice");
      return false;
    }
    for (ssize_t m = 0; m < k;) {
      ssize_t q = ::splice(pipe_out, nullptr, fd, nullptr, static_cast<size_t>(k - m), SPLICE_F_MOVE | SPLICE_F_MORE);
      if (q <= 0) return false;
      m += q;
    }
    p += k, n -= static_cast<size_t>(k);
  }
  return true;
}
char* pinned(size_t n) {
  void* p = nullptr;
  if (g_register) {
    p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) std::_Exit(1);
    CK(cudaHostRegister(p, n, cudaHostRegisterPortable));
  } else {
    CK(cudaHostAlloc(&p, n, cudaHostAllocPortable));
  }
  return static_cast<char*>(p);
}
bool recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k, n -= static_cast<size_t>(k);
  }
  return true;
}

// One end's memory: SLOTS slots, the device buffer the copies use, and
// (apart) as many more pinned buffers the copies go to instead of the slots.
struct End {
  char* slot[16];
  char* side[16];
  char* dev;
  cudaStream_t stream;
  cudaEvent_t ev[16];
  Doorbell* bell = nullptr;
  uint64_t posted = 0;
  explicit End(int device, bool resident_kernel) {
    CK(cudaSetDevice(device));
    for (int i = 0; i < g_slots; ++i) {
      slot[i] = pinned(kChunk);
      side[i] = pinned(kChunk);
      std::memset(slot[i], i + 1, kChunk);
      CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    }
    CK(cudaMalloc(&dev, 2 * kChunk));
    CK(cudaMemset(dev, 7, 2 * kChunk));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (resident_kernel) {
      CK(cudaHostAlloc(reinterpret_cast<void**>(&bell), sizeof(Doorbell), cudaHostAllocPortable | cudaHostAllocMapped));
      std::memset(bell, 0, sizeof(Doorbell));
      resident<<<1, 1024, 0, stream>>>(bell, kChunk / 16);
      CK(cudaGetLastError());
    }
  }
  void ring(uint64_t seq) {
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(bell->seq).store(seq, cuda::memory_order_release);
  }
  // Resident mode: copy request number posted+1.
  void post(void* dst, const void* src) {
    bell->dst = reinterpret_cast<uint64_t>(dst);
    bell->src = reinterpret_cast<uint64_t>(src);
    ring(++posted);
  }
  void await(uint64_t seq) {
    // Spinning is what the mode measures: no driver call per chunk.
    while (cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(bell->done).load(cuda::memory_order_acquire) < seq) {
      __builtin_ia32_pause();  // leaves the core's sibling thread its share
    }
  }
  void finish() {
    if (bell != nullptr) ring(kExit);
    CK(cudaStreamSynchronize(stream));
  }
  // Where chunk k's copy goes: its slot, or apart from the sockets.
  char* target(Mode m, uint64_t k) { return m == Mode::kApart ? side[k % g_slots] : slot[k % g_slots]; }
};

double run(Mode mode, int streams, double seconds) {
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(ls, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0 || ::listen(ls, 256) != 0) std::_Exit(1);
  socklen_t len = sizeof(at);
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&at), &len);
  std::atomic<bool> stop{false}, measuring{false};
  std::atomic<long long> counted{0};
  bool copies = mode != Mode::kPlain;
  bool res = mode == Mode::kResident;
  std::vector<std::thread> ts;
  // Chunks each stream's receiver has read (SPLICE: when the sender may reuse a slot).
  std::vector<std::atomic<uint64_t>> landed(static_cast<size_t>(streams));
  for (auto& l : landed) l = 0;
  for (int i = 0; i < streams; ++i) {
    ts.emplace_back([&, i] {  // sender
      End e(g_send_gpu, res);
      int s = ::socket(AF_INET, SOCK_STREAM, 0);
      if (::connect(s, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0) std::_Exit(1);
      if (!send_all(s, reinterpret_cast<const char*>(&i), sizeof(i))) std::_Exit(1);
      int pipe_fds[2] = {-1, -1};
      if (g_splice) {
        if (::pipe(pipe_fds) != 0) std::_Exit(1);
        ::fcntl(pipe_fds[1], F_SETPIPE_SZ, static_cast<int>(kChunk));
      }
      // SPLICE: the slot chunk k+1 goes through held chunk k+1-SLOTS until the receiver read it.
      auto slot_free = [&](uint64_t next) {
        if (!g_splice || next < static_cast<uint64_t>(g_slots)) return;
        while (landed[i].load(std::memory_order_acquire) < next + 1 - g_slots && !stop.load(std::memory_order_relaxed)) {
          __builtin_ia32_pause();  // a probe: spinning keeps the wait short
        }
      };
      if (res) {
        e.post(e.slot[0], e.dev);
      } else if (copies) {
        slot_free(0);
        gpu_copy(mode, e.target(mode, 0), e.dev, e.stream);
        CK(cudaEventRecord(e.ev[0], e.stream));
      }
      for (uint64_t k = 0; !stop.load(std::memory_order_relaxed); ++k) {
        if (res) {  // request k+1 copied chunk k; one doorbell, so post after it ends
          e.await(k + 1);
          e.post(e.slot[(k + 1) % g_slots], e.dev + ((k + 1) % 2) * kChunk);
        } else if (copies) {  // the next chunk's copy runs while this one is on the wire
          slot_free(k + 1);
          gpu_copy(mode, e.target(mode, k + 1), e.dev + ((k + 1) % 2) * kChunk, e.stream);
          CK(cudaEventRecord(e.ev[(k + 1) % g_slots], e.stream));
          CK(cudaEventSynchronize(e.ev[k % g_slots]));
        } else {
          slot_free(k);
        }
        char* chunk = e.slot[k % g_slots];
        if (!(g_splice ? splice_all(s, pipe_fds[1], pipe_fds[0], chunk, kChunk) : send_all(s, chunk, kChunk))) break;
      }
      if (g_splice) ::close(pipe_fds[0]), ::close(pipe_fds[1]);
      ::shutdown(s, SHUT_WR);
      if (res) e.await(e.posted);
      e.finish();
      ::close(s);
    });
  }
  for (int i = 0; i < streams; ++i) {
    int s = ::accept(ls, nullptr, nullptr);
    ts.emplace_back([&, s] {  // receiver
      End e(g_recv_gpu, res);
      int i = 0;
      if (!recv_all(s, reinterpret_cast<char*>(&i), sizeof(i)) || i < 0 || i >= streams) std::_Exit(1);
      for (uint64_t k = 0;; ++k) {
        if (!res && copies && k >= static_cast<uint64_t>(g_slots)) CK(cudaEventSynchronize(e.ev[k % g_slots]));  // the slot's last copy out ended
        if (!recv_all(s, e.slot[k % g_slots], kChunk)) break;
        landed[i].store(k + 1, std::memory_order_release);
        if (res) {
          // One doorbell: chunk k-1's copy ends before chunk k's is posted
          // (and before its slot takes chunk k+1).
          if (k >= 1) e.await(k);
          e.post(e.dev + (k % 2) * kChunk, e.slot[k % g_slots]);
        } else if (copies) {
          gpu_copy(mode, e.dev + (k % 2) * kChunk, e.target(mode, k), e.stream);
          CK(cudaEventRecord(e.ev[k % g_slots], e.stream));
        }
        if (measuring.load(std::memory_order_relaxed)) counted.fetch_add(kChunk, std::memory_order_relaxed);
      }
      if (res) e.await(e.posted);
      e.finish();
      ::close(s);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  measuring = true;
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  long long bytes = counted.load();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  for (auto& t : ts) t.join();
  ::close(ls);
  return static_cast<double>(bytes) / secs / 1e9;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: staged_blast STREAMS SECONDS MODE...   (modes: plain engine kernel apart resident)\n");
    return 2;
  }
  if (const char* c = std::getenv("CHUNK")) kChunk = std::strtoull(c, nullptr, 0);
  if (const char* g = std::getenv("SEND_GPU")) g_send_gpu = std::atoi(g);
  if (const char* g = std::getenv("RECV_GPU")) g_recv_gpu = std::atoi(g);
  if (const char* n = std::getenv("SLOTS")) g_slots = std::max(2, std::min(16, std::atoi(n)));
  g_splice = std::getenv("SPLICE") != nullptr && std::string(std::getenv("SPLICE")) == "1";
  g_register = std::getenv("REGISTER") != nullptr && std::string(std::getenv("REGISTER")) == "1";
  int streams = std::atoi(argv[1]);
  double seconds = std::atof(argv[2]);
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  for (int i = 3; i < argc; ++i) {
    std::string m = argv[i];
    Mode mode = m == "plain"      ? Mode::kPlain
                : m == "engine"   ? Mode::kEngine
                : m == "kernel"   ? Mode::kKernel
                : m == "apart"    ? Mode::kApart
                : m == "resident" ? Mode::kResident
                                  : (std::fprintf(stderr, "unknown mode %s\n", argv[i]), std::exit(2), Mode::kPlain);
    std::printf("%s %d %zu %.2f\n", argv[i], streams, kChunk, run(mode, streams, seconds));
    std::fflush(stdout);
  }
  return 0;
}
