// tcp_blast: the parallel-TCP-streams anchor of bench/gpu/tcp_gpu.sh, standing
// in for N parallel iperf3 processes where iperf3 is not installed.
//
//   tcp_blast STREAMS SECONDS [BUFFER_BYTES]
//
// A receiver process and a sender process (forked) over loopback; each stream
// is its own TCP connection with its own thread on both ends, writing 128 KiB
// at a time (iperf3's default). Prints "STREAMS GB/s" measured by the
// receiver over the middle of the run (the first 0.5 s are warm-up).
// By default each thread sends from and receives into one 128 KiB buffer, as
// iperf3 does, which stays in the CPU's cache. BUFFER_BYTES larger makes each
// thread walk a buffer of that size in 128 KiB steps on both ends, as a
// transfer between large buffers in memory must.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: tcp_blast STREAMS SECONDS [BUFFER_BYTES]\n");
    return 2;
  }
  int streams = std::atoi(argv[1]);
  double seconds = std::atof(argv[2]);
  constexpr size_t kStep = 128 * 1024;
  size_t buffer = std::max<size_t>(kStep, argc == 4 ? std::strtoull(argv[3], nullptr, 10) / kStep * kStep : kStep);
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(ls, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0 || ::listen(ls, 256) != 0) {
    std::perror("listen");
    return 1;
  }
  socklen_t len = sizeof(at);
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&at), &len);
  pid_t child = ::fork();
  if (child == 0) {  // sender
    std::vector<std::thread> ts;
    auto end = Clock::now() + std::chrono::duration<double>(seconds + 0.5);
    for (int i = 0; i < streams; ++i) {
      ts.emplace_back([&] {
        int s = ::socket(AF_INET, SOCK_STREAM, 0);
        if (::connect(s, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0) std::_Exit(1);
        std::vector<char> buf(buffer, 'x');
        for (size_t at_byte = 0; Clock::now() < end; at_byte = (at_byte + kStep) % buffer) {
          if (::send(s, buf.data() + at_byte, kStep, MSG_NOSIGNAL) <= 0) break;
        }
        ::close(s);
      });
    }
    for (auto& t : ts) t.join();
    std::_Exit(0);
  }
  std::atomic<long long> counted{0};
  std::atomic<bool> measuring{false};
  std::vector<std::thread> ts;
  for (int i = 0; i < streams; ++i) {
    int s = ::accept(ls, nullptr, nullptr);
    ts.emplace_back([s, buffer, &counted, &measuring] {
      std::vector<char> buf(buffer, 'y');
      for (size_t at_byte = 0;; at_byte = (at_byte + kStep) % buffer) {
        ssize_t n = ::recv(s, buf.data() + at_byte, kStep, 0);
        if (n <= 0) break;
        if (measuring.load(std::memory_order_relaxed)) counted.fetch_add(n, std::memory_order_relaxed);
      }
      ::close(s);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  measuring = true;
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds - 0.5));
  long long bytes = counted.load();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  measuring = false;
  for (auto& t : ts) t.join();
  ::waitpid(child, nullptr, 0);
  std::printf("%d %.3f\n", streams, static_cast<double>(bytes) / secs / 1e9);
  return 0;
}
