// The garbage fault: a third process that is no ferry engine opens streams to
// the survivor's listening port and sends what a hostile stranger would:
// random bytes, frames with the right magic and wrong fields, a HELLO and
// then silence (half a handshake), a header cut short, a data-stream HELLO
// naming no connection, a handshake dribbled a byte at a time, and a
// connect-then-reset. Every stream but the reset must be closed by the
// survivor within its handshake timeout (plus a margin); one still open is
// a failure of the run.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ferry/transfer.h"
#include "soak/report_line.h"
#include "soak/roles.h"
#include "wire/frame.h"
#include "wire/handshake.h"

namespace ferry::soak {

using namespace std::chrono_literals;

namespace {

int dial(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (::inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr) != 1) return -1;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) return;  // the survivor may close first: that is what we want
    c += k;
    n -= static_cast<size_t>(k);
  }
}

std::string hello_bytes(std::mt19937_64& rng, bool data_stream) {
  wire::Hello h;
  h.role = data_stream ? wire::StreamRole::kData : wire::StreamRole::kControl;
  h.engine_id = rng();
  h.streams = data_stream ? 0 : 1;
  h.cookie = data_stream ? rng() : 0;
  for (auto& b : h.nonce) b = static_cast<uint8_t>(rng());
  h.host_id = "garbage-" + std::to_string(rng());
  auto f = wire::encode(h);
  wire::HeaderBytes hb;
  wire::encode_header(f.header, hb);
  return std::string(reinterpret_cast<char*>(hb.data()), hb.size()) + f.aux;
}

// True when the survivor closes `fd` (EOF or reset) by `deadline`; whatever it
// sends before (a WELCOME) is read and dropped.
bool closed_by(int fd, Clock::time_point deadline) {
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 200)));
    if (r <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

}  // namespace

int garbage_main(const GarbageArgs& a) {
  name_this_thread("soak-garbage");
  std::mt19937_64 rng(a.seed);
  struct Stream {
    std::string kind;
    int fd;
  };
  std::vector<Stream> streams;
  auto open = [&](const std::string& kind) -> int {
    int fd = dial(a.connect);
    if (fd >= 0) streams.push_back({kind, fd});
    return fd;
  };
  const auto start = Clock::now();
  if (int fd = open("random bytes"); fd >= 0) {
    std::string junk(1 + rng() % 65536, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    send_all(fd, junk.data(), junk.size());
  }
  if (int fd = open("a header with the magic and random fields"); fd >= 0) {
    uint8_t h[64];
    for (auto& b : h) b = static_cast<uint8_t>(rng());
    wire::put_u32(h, wire::kFrameMagic);
    send_all(fd, h, sizeof(h));
  }
  if (int fd = open("HELLO then silence"); fd >= 0) {
    std::string hb = hello_bytes(rng, false);
    send_all(fd, hb.data(), hb.size());
  }
  if (int fd = open("half a header"); fd >= 0) {
    std::string hb = hello_bytes(rng, false);
    send_all(fd, hb.data(), 30);
  }
  if (int fd = open("a data-stream HELLO naming no connection"); fd >= 0) {
    std::string hb = hello_bytes(rng, true);
    send_all(fd, hb.data(), hb.size());
  }
  if (int fd = dial(a.connect); fd >= 0) {
    linger l{1, 0};  // close with a reset
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    ::close(fd);
  }
  // A HELLO dribbled a byte every 100 ms: never complete within the timeout.
  int slow = open("a HELLO dribbled a byte at a time");
  const Clock::time_point deadline = start + a.handshake_timeout + 3s;
  std::string hb = hello_bytes(rng, false);
  int sent = 0, dropped = 0, kept = 0;
  for (size_t i = 0; slow >= 0 && i < hb.size() && Clock::now() < start + a.handshake_timeout + 1s; ++i) {
    if (::send(slow, &hb[i], 1, MSG_NOSIGNAL) != 1) break;
    std::this_thread::sleep_for(100ms);
  }
  for (auto& s : streams) {
    ++sent;
    if (closed_by(s.fd, deadline)) {
      ++dropped;
    } else {
      ++kept;
      emit("VIOLATION garbage stream \"" + s.kind + "\" still open " +
           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()) +
           " ms after it began (handshake timeout " + std::to_string(a.handshake_timeout.count()) + " ms)");
    }
    ::close(s.fd);
  }
  emit("GARBAGE streams=" + std::to_string(sent) + " dropped=" + std::to_string(dropped) +
       " kept=" + std::to_string(kept));
  return kept == 0 && sent > 0 ? 0 : 1;
}

}  // namespace ferry::soak
