// TCP socket helpers.
#include "platform/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <charconv>
#include <cstring>

#include "platform/fiber_worker.h"
#include "platform/sanitizers.h"
#include "platform/system_error.h"

namespace ferry::platform {
namespace {

int poll_ms(Deadline deadline) {
  if (deadline == kNoDeadline) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left < 0) return 0;
  return left > 1000000 ? 1000000 : static_cast<int>(left) + 1;
}

// True when a connected socket's two ends are the same address and port: a
// connect to a local port nobody listens on whose source port the kernel
// picked equal to it meets itself (a simultaneous open) and succeeds.
bool connected_to_itself(int fd) {
  struct sockaddr_storage local {}, remote {};
  socklen_t local_len = sizeof(local), remote_len = sizeof(remote);
  if (::getsockname(fd, reinterpret_cast<struct sockaddr*>(&local), &local_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<struct sockaddr*>(&remote), &remote_len) != 0) {
    return false;
  }
  return local_len == remote_len && std::memcmp(&local, &remote, local_len) == 0;
}

// Waits until `fd` is ready for `events` or the deadline passes.
Status wait_fd(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    struct pollfd p = {fd, events, 0};
    int r = ::poll(&p, 1, poll_ms(deadline));
    if (r > 0) return Status();
    if (r == 0 || Clock::now() >= deadline) {
      return Status(Code::kDeadlineExceeded, std::string(what) + " did not finish by its deadline");
    }
    if (errno != EINTR) return errno_status(Code::kInternal, "poll");
  }
}

Result<struct addrinfo*> resolve(const HostPort& hp, bool passive) {
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  struct addrinfo* res = nullptr;
  std::string port = std::to_string(hp.port);
  int rc = ::getaddrinfo(hp.host.empty() ? nullptr : hp.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return Status(Code::kUnavailable, "cannot resolve \"" + hp.host + "\": " + gai_strerror(rc));
  }
  return res;
}

// Moves past `n` bytes of an I/O vector that a partial send/recv consumed.
void advance(struct iovec*& iov, int& iovcnt, size_t n) {
  while (iovcnt > 0 && n >= iov->iov_len) {
    n -= iov->iov_len;
    ++iov;
    --iovcnt;
  }
  if (iovcnt > 0) {
    iov->iov_base = static_cast<char*>(iov->iov_base) + n;
    iov->iov_len -= n;
  }
}

// Why a read ended with no bytes. A FIN leaves a TCP socket waiting to close
// (CLOSE_WAIT). An abort closes it, and its error goes to whichever call
// comes first: the sender's thread may take the ETIMEDOUT of
// TCP_USER_TIMEOUT, and the reader then sees only the end of the stream.
Status end_of_stream(int fd, StreamEnd* end) {
  struct tcp_info info {};
  socklen_t len = sizeof(info);
  bool aborted = ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE;
  if (end != nullptr) *end = aborted ? StreamEnd::kAborted : StreamEnd::kClosedInOrder;
  return Status(Code::kPeerLost, std::string(aborted ? kAbortedStream : kClosedByPeer));
}

}  // namespace

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Result<HostPort> parse_host_port(std::string_view s) {
  HostPort hp;
  std::string_view port;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return Status(Code::kInvalidArgument, "address \"" + std::string(s) + "\": expected [v6addr]:port");
    }
    hp.host = std::string(s.substr(1, close - 1));
    port = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string_view::npos) {
      return Status(Code::kInvalidArgument, "address \"" + std::string(s) + "\": expected host:port");
    }
    hp.host = std::string(s.substr(0, colon));
    port = s.substr(colon + 1);
  }
  unsigned v = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
  if (ec != std::errc() || p != port.data() + port.size() || v > 65535 || port.empty()) {
    return Status(Code::kInvalidArgument, "address \"" + std::string(s) + "\": bad port \"" + std::string(port) + "\"");
  }
  hp.port = static_cast<uint16_t>(v);
  return hp;
}

Result<Socket> listen_tcp(const HostPort& at, int backlog) {
  FERRY_ASSIGN_OR_RETURN(struct addrinfo * res, resolve(at, true));
  Status last(Code::kUnavailable, "no address to listen on for \"" + at.host + "\"");
  for (struct addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) {
      last = errno_status(Code::kResourceExhausted, "socket");
      continue;
    }
    int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(s.fd(), backlog) != 0) {
      int err = errno;
      last = errno_status(Code::kUnavailable, "cannot listen on " + at.host + ":" + std::to_string(at.port), err);
      continue;
    }
    ::freeaddrinfo(res);
    return s;
  }
  ::freeaddrinfo(res);
  return last;
}

Result<uint16_t> local_port(const Socket& s) {
  struct sockaddr_storage ss {};
  socklen_t len = sizeof(ss);
  if (::getsockname(s.fd(), reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) {
    return errno_status(Code::kInternal, "getsockname");
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<struct sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_port);
}

std::string peer_name(int fd) {
  struct sockaddr_storage ss {};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<struct sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<struct sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    port = ntohs(in->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

Result<Socket> connect_tcp(const HostPort& to, Deadline deadline, std::string_view source_ip) {
  FERRY_ASSIGN_OR_RETURN(struct addrinfo * res, resolve(to, false));
  std::string where = to.host + ":" + std::to_string(to.port);
  Status last(Code::kUnavailable, "no address for " + where);
  for (struct addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!s.valid()) {
      last = errno_status(Code::kResourceExhausted, "socket");
      continue;
    }
    if (!source_ip.empty() && ai->ai_family == AF_INET) {
      struct sockaddr_in src {};
      src.sin_family = AF_INET;
      std::string ip(source_ip);
      if (::inet_pton(AF_INET, ip.c_str(), &src.sin_addr) != 1 ||
          ::bind(s.fd(), reinterpret_cast<struct sockaddr*>(&src), sizeof(src)) != 0) {
        int err = errno;
        last = errno_status(Code::kUnavailable, "bind to source " + ip + " for " + where, err);
        continue;
      }
    }
    int rc = ::connect(s.fd(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS) {
      int err = errno;
      last = errno_status(Code::kUnavailable, "connect to " + where, err);
      continue;
    }
    if (rc != 0) {
      Status w = wait_fd(s.fd(), POLLOUT, deadline, ("connect to " + where).c_str());
      if (!w.ok()) {
        ::freeaddrinfo(res);
        return w;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = errno_status(Code::kUnavailable, "connect to " + where, err);
        continue;
      }
    }
    if (connected_to_itself(s.fd())) {  // nobody listens there: what a caller retries on
      struct linger abort_on_close = {1, 0};  // no TIME_WAIT holding the port from the next try
      ::setsockopt(s.fd(), SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));
      last = Status(Code::kUnavailable,
                    errno_message("connect to " + where, ECONNREFUSED) + " (the socket connected to itself)");
      continue;
    }
    int flags = ::fcntl(s.fd(), F_GETFL);
    ::fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK);
    ::freeaddrinfo(res);
    return s;
  }
  ::freeaddrinfo(res);
  return last;
}

Status tune_stream(const Socket& s, size_t buffer_bytes, unsigned user_timeout_ms) {
  int one = 1;
  if (::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return errno_status(Code::kInternal, "TCP_NODELAY");
  }
  if (buffer_bytes > 0) {
    int v = static_cast<int>(buffer_bytes);
    ::setsockopt(s.fd(), SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    ::setsockopt(s.fd(), SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
  }
  if (user_timeout_ms > 0 &&
      ::setsockopt(s.fd(), IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms)) != 0) {
    return errno_status(Code::kInternal, "TCP_USER_TIMEOUT");
  }
  return Status();
}

Status keep_alive(const Socket& s, std::chrono::seconds idle, std::chrono::seconds interval, int probes) {
  int on = 1;
  int idle_s = static_cast<int>(std::max<int64_t>(idle.count(), 1));
  int interval_s = static_cast<int>(std::max<int64_t>(interval.count(), 1));
  if (::setsockopt(s.fd(), SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) != 0 ||
      ::setsockopt(s.fd(), IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s)) != 0 ||
      ::setsockopt(s.fd(), IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s)) != 0 ||
      ::setsockopt(s.fd(), IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes)) != 0) {
    return errno_status(Code::kInternal, "TCP keepalive");
  }
  return Status();
}

std::string local_ip(int fd) {
  struct sockaddr_storage ss {};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) return "";
  char host[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<struct sockaddr_in*>(&ss)->sin_addr, host, sizeof(host));
  } else if (ss.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_addr, host, sizeof(host));
  }
  return host;
}

// ThreadSanitizer sees no order between a thread that sent bytes from a
// buffer and another that later receives into it, when what orders them is
// the peer: it received the sent bytes (the kernel had copied them during
// sendmsg) and only then sent what lands (a target serving a read, then the
// write that follows it). Under ThreadSanitizer every completed send
// releases, and every receive acquires, one token: a receive is ordered
// after the sends that had completed before it started, as the kernel
// orders them. A send still in progress gets no such order, so a receive
// that overlaps it is still reported. Other builds compile none of it.
#if defined(FERRY_TSAN)
}  // namespace ferry::platform
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
namespace ferry::platform {
namespace {
char g_through_the_peer;  // the token; ThreadSanitizer builds only
void sent_through_the_peer() { __tsan_release(&g_through_the_peer); }
void receiving_through_the_peer() { __tsan_acquire(&g_through_the_peer); }
}  // namespace
#else
namespace {
void sent_through_the_peer() {}
void receiving_through_the_peer() {}
}  // namespace
#endif

Status send_all(int fd, struct iovec* iov, int iovcnt, int flags) {
  // In a worker's fiber the socket is never waited on in the kernel: the
  // fiber parks until it has room, and its worker serves other streams.
  const bool in_fiber = FiberWorker::current_task() != nullptr;
  while (iovcnt > 0) {
    struct msghdr msg {};
    msg.msg_iov = iov;
    // The kernel takes at most IOV_MAX entries a call (EMSGSIZE beyond):
    // a vector of more parts goes in several calls.
    msg.msg_iovlen = static_cast<size_t>(std::min(iovcnt, IOV_MAX));
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | flags | (in_fiber ? MSG_DONTWAIT : 0));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (in_fiber && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wait_ready(fd, POLLOUT);
        continue;
      }
      return errno_status(Code::kPeerLost, "send");
    }
    advance(iov, iovcnt, static_cast<size_t>(n));
    if (in_fiber) count_turn(static_cast<size_t>(n));
  }
  sent_through_the_peer();
  return Status();
}

Status recv_all(int fd, struct iovec* iov, int iovcnt, StreamEnd* end) {
  if (end != nullptr) *end = StreamEnd::kError;
  // In a worker's fiber: what has arrived, then the fiber parks until more
  // comes (its place in the frame is its stack), as in send_all.
  const bool in_fiber = FiberWorker::current_task() != nullptr;
  while (iovcnt > 0 && iov->iov_len == 0) {
    ++iov;
    --iovcnt;
  }
  while (iovcnt > 0) {
    struct msghdr msg {};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(std::min(iovcnt, IOV_MAX));  // as in send_all
    receiving_through_the_peer();
    ssize_t n = ::recvmsg(fd, &msg, in_fiber ? MSG_DONTWAIT : MSG_WAITALL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (in_fiber && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wait_ready(fd, POLLIN);
        continue;
      }
      return errno_status(Code::kPeerLost, "recv");
    }
    if (n == 0) return end_of_stream(fd, end);
    advance(iov, iovcnt, static_cast<size_t>(n));
    if (in_fiber) count_turn(static_cast<size_t>(n));
  }
  return Status();
}

Status recv_exact(int fd, void* buf, size_t len, StreamEnd* end) {
  struct iovec iov = {buf, len};
  return recv_all(fd, &iov, 1, end);
}

Status send_all_by(int fd, const void* buf, size_t len, Deadline deadline) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    FERRY_RETURN_IF_ERROR(wait_fd(fd, POLLOUT, deadline, "handshake send"));
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno_status(Code::kPeerLost, "send");
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status();
}

Status recv_exact_by(int fd, void* buf, size_t len, Deadline deadline) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    FERRY_RETURN_IF_ERROR(wait_fd(fd, POLLIN, deadline, "handshake receive"));
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno_status(Code::kPeerLost, "recv");
    }
    if (n == 0) return Status(Code::kPeerLost, "stream closed by the peer during the handshake");
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status();
}

}  // namespace ferry::platform
