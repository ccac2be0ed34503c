// A hand-made peer for the tests of what a hostile peer can make a TCP engine
// do: it speaks the handshake (testing/hand_made_handshake.h) and the
// steady-state frames directly, so it can send what no engine would, and stop
// reading when an engine would not.
#pragma once

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../hand_made_identity.h"
#include "ferry/ferry.h"
#include "platform/socket.h"
#include "testing/hand_made_handshake.h"
#include "wire/frame.h"

namespace ferry::hostile {

using namespace std::chrono_literals;

// A frame's header and the bytes after it (aux, then payload), as one string to send.
inline std::string encoded(const wire::FrameHeader& h, const std::string& after = {}) {
  wire::HeaderBytes hb;
  wire::encode_header(h, hb);
  return std::string(reinterpret_cast<const char*>(hb.data()), hb.size()) + after;
}

// Connects as an engine would (no secret), then frames, on the control stream
// or on a data stream.
struct Peer {
  static inline const uint64_t kEngineId = testing::hand_made_engine_id();
  platform::Socket ctl;
  std::vector<platform::Socket> data;
  // SO_RCVBUF of the control stream, set before it connects; 0: the kernel's.
  int control_receive_buffer = 0;
  // The protocol versions its HELLO offers.
  wire::VersionRange versions = wire::kSpokenVersions;

  // The handshake with `streams` data streams, every stream leaving from
  // `source_ip` when given; a REJECTED answer comes back as its code and message.
  Status dial(const std::string& address, int streams, Deadline d = after(5s), std::string_view source_ip = {}) {
    FERRY_ASSIGN_OR_RETURN(platform::HostPort hp, platform::parse_host_port(address));
    if (control_receive_buffer > 0) {
      FERRY_ASSIGN_OR_RETURN(ctl, connect_with_receive_buffer(hp, control_receive_buffer));
    } else {
      FERRY_ASSIGN_OR_RETURN(ctl, platform::connect_tcp(hp, d, source_ip));
    }
    return testing::hand_made_tcp_handshake(ctl.fd(), hp, "hostile-peer", streams, d, data, source_ip, versions);
  }

  // A blocking IPv4 connect whose receive buffer is `bytes` from the start
  // (set later, the window already offered stays open).
  static Result<platform::Socket> connect_with_receive_buffer(const platform::HostPort& hp, int bytes) {
    platform::Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s.valid()) return Status(Code::kResourceExhausted, "socket");
    if (::setsockopt(s.fd(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0) {
      return Status(Code::kInternal, "SO_RCVBUF");
    }
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(hp.port);
    if (::inet_pton(AF_INET, hp.host.c_str(), &to.sin_addr) != 1) return Status(Code::kInvalidArgument, hp.host);
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      return Status(Code::kUnavailable, std::string("connect: ") + std::strerror(errno));
    }
    return s;
  }

  void hang_up() {
    ctl.reset();
    data.clear();
  }

  // A frame header and the bytes after it (aux, then payload) on the control
  // stream (stream -1) or on data stream `stream`. Blocks.
  bool frame(const wire::FrameHeader& h, const void* after_header = nullptr, size_t n = 0, int stream = -1) {
    int fd = stream < 0 ? ctl.fd() : data[static_cast<size_t>(stream)].fd();
    wire::HeaderBytes hb;
    wire::encode_header(h, hb);
    if (::send(fd, hb.data(), hb.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hb.size())) return false;
    return n == 0 || ::send(fd, after_header, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }

  // Sends `bytes` on the control stream (stream -1) or on data stream
  // `stream` unless the engine stops reading it: false once nothing more
  // went out for `stall` (or on an error).
  bool send_unless_stalled(const std::string& bytes, std::chrono::milliseconds stall = 500ms, int stream = -1) {
    int fd = stream < 0 ? ctl.fd() : data[static_cast<size_t>(stream)].fd();
    size_t off = 0;
    while (off < bytes.size()) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(stall.count())) <= 0 || (p.revents & POLLOUT) == 0) return false;
      ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // The next frame on the control stream other than a heartbeat (its aux
  // into `aux` when given), within `deadline`.
  Result<wire::FrameHeader> next_control_frame(Deadline deadline, std::string* aux = nullptr) {
    for (;;) {
      pollfd p{ctl.fd(), POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
        return Status(Code::kDeadlineExceeded, "no control frame");
      }
      wire::HeaderBytes hb;
      FERRY_RETURN_IF_ERROR(platform::recv_exact(ctl.fd(), hb.data(), hb.size()));
      FERRY_ASSIGN_OR_RETURN(wire::FrameHeader h, wire::decode_header(hb.data(), hb.size()));
      std::string text(h.aux_len, '\0');
      if (h.aux_len > 0) FERRY_RETURN_IF_ERROR(platform::recv_exact(ctl.fd(), text.data(), text.size()));
      std::vector<char> payload(h.payload_len);
      if (h.payload_len > 0) FERRY_RETURN_IF_ERROR(platform::recv_exact(ctl.fd(), payload.data(), payload.size()));
      if (h.type == wire::FrameType::kHeartbeat) continue;
      if (aux != nullptr) *aux = std::move(text);
      return h;
    }
  }
};

// Whether the other end closed `fd` (EOF or reset) within `deadline`; what
// arrives before is read and dropped.
inline bool closed_by_engine(int fd, Deadline deadline) {
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
  }
  return false;
}

// Whether `pred` held within `deadline`.
inline bool eventually(const std::function<bool()>& pred, Deadline deadline) {
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

// The process's resident memory in bytes (0 if unknown).
inline size_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

// An engine over TCP on loopback with `options` as given (transport, listen
// and the short liveness times set here) and the hostile peer connected to it.
struct Target {
  std::unique_ptr<Engine> engine;
  std::shared_ptr<Connection> conn;
  Peer peer;

  static Options options() {
    Options o;
    o.transport = TransportChoice::kTcp;
    o.listen = "127.0.0.1:0";
    return o;
  }

  void open(Options o = options(), int streams = 1) {
    auto e = Engine::create(o);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine = std::move(e).value();
    Status s = peer.dial(engine->address(), streams);
    ASSERT_TRUE(s.ok()) << s.to_string();
    auto c = engine->accept(after(5s));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    conn = std::move(c).value();
  }

  // Waits (within `deadline`) for the connection to fail; its reason.
  Status failure(Deadline deadline = after(10s)) {
    eventually([&] { return !conn->health().ok(); }, deadline);
    return conn->health();
  }
};

// An honest engine connects to `target` and a message goes each way: the
// target still serves other peers.
inline void still_serves_others(Engine& target) {
  Options o = Target::options();
  auto other = Engine::create(o);
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  auto out = (*other)->connect(target.address(), after(5s));
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto in = target.accept(after(5s));
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  std::vector<char> a(4096, 'a'), b(4096, 0);
  ASSERT_TRUE((*other)->reg(a.data(), a.size()).ok());
  ASSERT_TRUE(target.reg(b.data(), b.size()).ok());
  Transfer r = (*in)->recv_async(b.data(), b.size());
  ASSERT_TRUE((*out)->send(a.data(), a.size(), after(5s)).ok());
  ASSERT_TRUE(r.wait(after(5s)).ok());
  EXPECT_EQ(a, b);
  (*in)->close();
  (*out)->close();
}

}  // namespace ferry::hostile
