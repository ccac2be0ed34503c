// TCP sockets: the one seam between ferry and the kernel's network stack.
//
// Blocking I/O with explicit deadlines where a peer could stall us (connect,
// handshake); steady-state streams block in their own worker threads and are
// unblocked by shutdown() when a connection fails. Errors come back as Status
// with errno text; callers add the peer and stream to the message.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"
#include "ferry/transfer.h"

namespace ferry::platform {

// Owns one file descriptor. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();
  // Wakes every thread blocked on this socket (they see an error or EOF);
  // the descriptor stays open until reset().
  void shutdown();

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// Parses "host:port" or "[v6]:port". kInvalidArgument says what is wrong.
Result<HostPort> parse_host_port(std::string_view s);

// Listens on host:port (port 0 picks one). kUnavailable on failure.
Result<Socket> listen_tcp(const HostPort& at, int backlog = 128);
// The port a socket is bound to.
Result<uint16_t> local_port(const Socket& s);
// "ip:port" of the remote end, or "?".
std::string peer_name(int fd);

// Connects by `deadline`, from `source_ip` when given (the NIC to leave by):
// kUnavailable if refused/unreachable (a socket that connected to itself,
// which a local port nobody listens on can do, is refused), kDeadlineExceeded
// if the deadline passes first.
Result<Socket> connect_tcp(const HostPort& to, Deadline deadline, std::string_view source_ip = {});

// TCP_NODELAY; SO_SNDBUF/SO_RCVBUF when `buffer_bytes` > 0; TCP_USER_TIMEOUT
// when `user_timeout_ms` > 0 (sent bytes unacknowledged that long make the
// stream fail instead of retrying for minutes).
Status tune_stream(const Socket& s, size_t buffer_bytes, unsigned user_timeout_ms = 0);

// TCP keepalive: after `idle` without traffic the kernel probes the peer
// every `interval`, and `probes` unanswered ones make the stream fail. Costs
// no thread of ours: a quiet connection learns that its peer's host went
// away without heartbeats.
Status keep_alive(const Socket& s, std::chrono::seconds idle, std::chrono::seconds interval, int probes);

// The local "ip" a connected socket uses.
std::string local_ip(int fd);

// The message of recv_all's kPeerLost when the peer closed the stream in
// order (FIN), as opposed to a reset or a timeout.
inline constexpr std::string_view kClosedByPeer = "stream closed by the peer";
// ... and when a read found the stream already aborted (TCP_USER_TIMEOUT, a
// reset) after another thread had taken its error: a read then ends with no
// bytes, as at a FIN, but the socket is closed rather than waiting to close.
inline constexpr std::string_view kAbortedStream =
    "stream aborted (unacknowledged data timed out, or reset) with no close from the peer";

// How a failed read ended, for a caller that decides on it.
enum class StreamEnd : uint8_t {
  kError,          // reset, timeout or another error
  kClosedInOrder,  // the peer closed the stream (FIN): kClosedByPeer
  kAborted,        // no bytes, the stream already aborted: kAbortedStream
};

// Sends every byte of `iov` (modified in place). Blocks. Errors: kPeerLost.
// `flags`: sendmsg flags besides MSG_NOSIGNAL (MSG_MORE: more follows).
Status send_all(int fd, struct iovec* iov, int iovcnt, int flags = 0);
// Receives exactly the bytes described by `iov` (modified in place). Blocks.
// EOF or reset: kPeerLost (kClosedByPeer or kAbortedStream for an EOF), and
// how it ended in `*end` when given.
Status recv_all(int fd, struct iovec* iov, int iovcnt, StreamEnd* end = nullptr);
Status recv_exact(int fd, void* buf, size_t len, StreamEnd* end = nullptr);

// The same with a deadline, for handshakes (kDeadlineExceeded).
Status send_all_by(int fd, const void* buf, size_t len, Deadline deadline);
Status recv_exact_by(int fd, void* buf, size_t len, Deadline deadline);

}  // namespace ferry::platform
