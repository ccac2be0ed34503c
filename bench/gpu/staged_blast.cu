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
// If engine/kernel fall short of plain but apart does not, the pipeline's
// ordering is what costs (fixable in the engine); if apart falls as far, the
// host's memory or PCIe is (no staging order helps).
//
//   nvcc -O2 -arch=sm_90 -std=c++17 -o staged_blast bench/gpu/staged_blast.cu
//   ./staged_blast STREAMS SECONDS MODE...      prints "MODE STREAMS GB/s" a mode
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;
constexpr size_t kChunk = 1 << 20;

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::_Exit(1);                                                                          \
    }                                                                                         \
  } while (0)

__global__ void copy16(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n16) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

enum class Mode { kPlain, kEngine, kKernel, kApart };

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
bool recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k, n -= static_cast<size_t>(k);
  }
  return true;
}

// One end's memory: two slots, the device buffer the copies use, and (apart)
// two more pinned buffers the copies go to instead of the slots.
struct End {
  char* slot[2];
  char* side[2];
  char* dev;
  cudaStream_t stream;
  cudaEvent_t ev[2];
  End() {
    CK(cudaSetDevice(0));
    for (int i = 0; i < 2; ++i) {
      CK(cudaHostAlloc(reinterpret_cast<void**>(&slot[i]), kChunk, cudaHostAllocPortable));
      CK(cudaHostAlloc(reinterpret_cast<void**>(&side[i]), kChunk, cudaHostAllocPortable));
      std::memset(slot[i], i + 1, kChunk);
      CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    }
    CK(cudaMalloc(&dev, 2 * kChunk));
    CK(cudaMemset(dev, 7, 2 * kChunk));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  // Where chunk k's copy goes: its slot, or apart from the sockets.
  char* target(Mode m, uint64_t k) { return m == Mode::kApart ? side[k % 2] : slot[k % 2]; }
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
  std::vector<std::thread> ts;
  for (int i = 0; i < streams; ++i) {
    ts.emplace_back([&] {  // sender
      End e;
      int s = ::socket(AF_INET, SOCK_STREAM, 0);
      if (::connect(s, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0) std::_Exit(1);
      if (copies) {
        gpu_copy(mode, e.target(mode, 0), e.dev, e.stream);
        CK(cudaEventRecord(e.ev[0], e.stream));
      }
      for (uint64_t k = 0; !stop.load(std::memory_order_relaxed); ++k) {
        if (copies) {  // the next chunk's copy runs while this one is on the wire
          gpu_copy(mode, e.target(mode, k + 1), e.dev + ((k + 1) % 2) * kChunk, e.stream);
          CK(cudaEventRecord(e.ev[(k + 1) % 2], e.stream));
          CK(cudaEventSynchronize(e.ev[k % 2]));
        }
        if (!send_all(s, e.slot[k % 2], kChunk)) break;
      }
      ::shutdown(s, SHUT_WR);
      CK(cudaStreamSynchronize(e.stream));
      ::close(s);
    });
  }
  for (int i = 0; i < streams; ++i) {
    int s = ::accept(ls, nullptr, nullptr);
    ts.emplace_back([&, s] {  // receiver
      End e;
      for (uint64_t k = 0;; ++k) {
        if (copies && k >= 2) CK(cudaEventSynchronize(e.ev[k % 2]));  // the slot's last copy out ended
        if (!recv_all(s, e.slot[k % 2], kChunk)) break;
        if (copies) {
          gpu_copy(mode, e.dev + (k % 2) * kChunk, e.target(mode, k), e.stream);
          CK(cudaEventRecord(e.ev[k % 2], e.stream));
        }
        if (measuring.load(std::memory_order_relaxed)) counted.fetch_add(kChunk, std::memory_order_relaxed);
      }
      CK(cudaStreamSynchronize(e.stream));
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
    std::fprintf(stderr, "usage: staged_blast STREAMS SECONDS MODE...   (modes: plain engine kernel apart)\n");
    return 2;
  }
  int streams = std::atoi(argv[1]);
  double seconds = std::atof(argv[2]);
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  for (int i = 3; i < argc; ++i) {
    std::string m = argv[i];
    Mode mode = m == "plain"    ? Mode::kPlain
                : m == "engine" ? Mode::kEngine
                : m == "kernel" ? Mode::kKernel
                : m == "apart"  ? Mode::kApart
                                : (std::fprintf(stderr, "unknown mode %s\n", argv[i]), std::exit(2), Mode::kPlain);
    std::printf("%s %d %.2f\n", argv[i], streams, run(mode, streams, seconds));
    std::fflush(stdout);
  }
  return 0;
}
