// Kernel-attested identity of a same-host peer, and the channel descriptor's
// hand-over, over a Unix socket beside the TCP control stream.
#include "transport/local/peer_proof.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "platform/crypto.h"
#include "platform/system_error.h"

namespace ferry::local {
namespace {

constexpr std::string_view kNamePrefix = "ferry-local-";
constexpr size_t kNameHexDigits = 32;

// An abstract address: a NUL, then the name (no terminator counts).
socklen_t abstract_address(std::string_view name, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

Result<PeerCredentials> credentials_of(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred) || cred.pid <= 0) {
    return platform::errno_status(Code::kUnavailable, "SO_PEERCRED of the local peer");
  }
  return PeerCredentials{cred.pid, cred.uid};
}

// Milliseconds left before `deadline`, for poll(): -1 without one, 0 past it.
int poll_ms(Deadline deadline) {
  if (deadline == kNoDeadline) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left + 1, 1000));
}

// Whether `control_fd` ended or became readable within `wait` (sleeps that
// long without one, -1). The connector says nothing on the control stream
// while the acceptor fetches its channel.
bool control_ended(int control_fd, std::chrono::milliseconds wait) {
  if (control_fd < 0) {
    std::this_thread::sleep_for(wait);
    return false;
  }
  pollfd p{control_fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, static_cast<int>(wait.count())) > 0;
}

Status control_ended_status() {
  return Status(Code::kCancelled,
                "the control stream ended while the local peer's rendezvous was dialed (the peer hung up, or the "
                "engine is stopping)");
}

// Reads the ticket from a freshly accepted connection: true only for exactly
// the expected 16 bytes, by the deadline.
bool presents(int fd, const Ticket& expected, Deadline deadline) {
  Ticket got{};
  if (!platform::recv_exact_by(fd, got.data(), got.size(), deadline).ok()) return false;
  // Not secret-dependent timing worth hiding: a wrong ticket costs the
  // prober a connection, and the ticket lives for one handshake.
  return got == expected;
}

Status send_fd(int sock, int fd) {
  char byte = 'F';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  while (::sendmsg(sock, &msg, MSG_NOSIGNAL) != 1) {
    if (errno != EINTR) return platform::errno_status(Code::kUnavailable, "passing the local channel to the peer");
  }
  return Status();
}

// Closes every descriptor a message carried; returns how many there were and
// the first in `first`.
size_t take_fds(msghdr& msg, int& first) {
  size_t n = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (n++ == 0) {
        first = fd;
      } else {
        ::close(fd);
      }
    }
  }
  return n;
}

}  // namespace

Status check_peer(const PeerCredentials& peer, const PeerPolicy& policy) {
  if (!policy.same_process && peer.pid == ::getpid()) {
    return Status(Code::kPermissionDenied, "the local peer is this very process (pid " + std::to_string(peer.pid) +
                                               "): refused (FERRY_LOCAL_SAME_PROCESS=1 allows two engines of one "
                                               "process)");
  }
  if (!policy.other_uids && peer.uid != ::geteuid()) {
    return Status(Code::kPermissionDenied, "the local peer (pid " + std::to_string(peer.pid) + ") runs as uid " +
                                               std::to_string(peer.uid) + ", this engine as uid " +
                                               std::to_string(::geteuid()) +
                                               ": refused (FERRY_LOCAL_OTHER_UIDS=1 allows it)");
  }
  return Status();
}

bool valid_rendezvous_name(std::string_view name) {
  if (name.size() != kNamePrefix.size() + kNameHexDigits || name.substr(0, kNamePrefix.size()) != kNamePrefix) {
    return false;
  }
  for (char c : name.substr(kNamePrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<RendezvousListener> RendezvousListener::open() {
  RendezvousListener r;
  uint8_t raw[kNameHexDigits / 2];
  platform::fill_random(raw, sizeof(raw));
  platform::fill_random(r.ticket_.data(), r.ticket_.size());
  static const char* hex = "0123456789abcdef";
  r.name_ = std::string(kNamePrefix);
  for (uint8_t b : raw) {
    r.name_ += hex[b >> 4];
    r.name_ += hex[b & 15];
  }
  r.listener_ = platform::Socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!r.listener_.valid()) return platform::errno_status(Code::kResourceExhausted, "socket(AF_UNIX)");
  sockaddr_un addr;
  socklen_t len = abstract_address(r.name_, addr);
  if (::bind(r.listener_.fd(), reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(r.listener_.fd(), 4) != 0) {
    return platform::errno_status(Code::kUnavailable, "listening for the local peer");
  }
  return r;
}

Result<PeerCredentials> RendezvousListener::hand_over(int fd, int control_fd, const PeerPolicy& policy,
                                                      Deadline deadline) {
  for (;;) {
    pollfd p[2] = {{listener_.fd(), POLLIN, 0}, {control_fd, POLLIN, 0}};
    int n = ::poll(p, 2, poll_ms(deadline));
    if (n < 0 && errno != EINTR) return platform::errno_status(Code::kUnavailable, "poll");
    if (p[1].revents != 0) return Status(Code::kCancelled, "the peer answered on the control stream");
    if (n <= 0 || p[0].revents == 0) {
      if (deadline != kNoDeadline && Clock::now() >= deadline) {
        return Status(Code::kDeadlineExceeded, "the local peer did not come for the channel by the deadline");
      }
      continue;
    }
    platform::Socket conn(::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      return platform::errno_status(Code::kUnavailable, "accepting the local peer");
    }
    // A prober that read the name from /proc/net/unix lacks the ticket:
    // dropped, and the wait goes on for the real peer.
    Deadline probe = std::min(deadline, Clock::now() + std::chrono::seconds(1));
    if (!presents(conn.fd(), ticket_, probe)) continue;
    FERRY_ASSIGN_OR_RETURN(PeerCredentials peer, credentials_of(conn.fd()));
    FERRY_RETURN_IF_ERROR(check_peer(peer, policy));
    FERRY_RETURN_IF_ERROR(send_fd(conn.fd(), fd));
    return peer;
  }
}

Result<ReceivedChannel> fetch_channel(std::string_view name, const Ticket& ticket, int control_fd,
                                      const PeerPolicy& policy, Deadline deadline) {
  if (!valid_rendezvous_name(name)) {
    return Status(Code::kDataLoss, "LOCAL_SETUP names no valid rendezvous (expected ferry-local- and 32 hex digits)");
  }
  // Non-blocking: a blocking Unix connect to a listener whose backlog is
  // full waits without limit, and whoever listens on the name (any local
  // user can take an abstract name first) can keep it full.
  platform::Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) return platform::errno_status(Code::kResourceExhausted, "socket(AF_UNIX)");
  sockaddr_un addr;
  socklen_t len = abstract_address(name, addr);
  // A non-blocking Unix connect completes at once or fails; a full backlog
  // says EAGAIN, tried again until the deadline, or until the control
  // stream ends: an engine that stops shuts it, and waits for this thread.
  constexpr auto kFullBacklogRetry = std::chrono::milliseconds(5);
  while (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    if ((errno != EAGAIN && errno != EINTR) || (deadline != kNoDeadline && Clock::now() >= deadline)) {
      return platform::errno_status(errno == EAGAIN ? Code::kDeadlineExceeded : Code::kUnavailable,
                                    "connecting to the local peer's rendezvous (another network namespace, or a "
                                    "backlog kept full?)");
    }
    if (control_ended(control_fd, kFullBacklogRetry)) return control_ended_status();
  }
  FERRY_ASSIGN_OR_RETURN(PeerCredentials peer, credentials_of(s.fd()));
  FERRY_RETURN_IF_ERROR(check_peer(peer, policy));
  FERRY_RETURN_IF_ERROR(platform::send_all_by(s.fd(), ticket.data(), ticket.size(), deadline));

  // The channel comes by the deadline, or the wait ends with the control
  // stream (a squatter may accept and never answer).
  pollfd p[2] = {{s.fd(), POLLIN, 0}, {control_fd, POLLIN | POLLRDHUP, 0}};  // a negative fd is not polled
  for (;;) {
    int n = ::poll(p, 2, poll_ms(deadline));
    if (n > 0 && p[0].revents != 0) break;
    if (n > 0) return control_ended_status();
    if (n < 0 && errno != EINTR) return platform::errno_status(Code::kUnavailable, "poll");
    if (deadline != kNoDeadline && Clock::now() >= deadline) {
      return Status(Code::kDeadlineExceeded, "the local peer did not pass its channel by the deadline");
    }
  }
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = ::recvmsg(s.fd(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return platform::errno_status(Code::kUnavailable, "receiving the local channel");
  if (got == 0) return Status(Code::kUnavailable, "the local peer closed the rendezvous without passing its channel");
  int fd = -1;
  size_t fds = take_fds(msg, fd);
  if (got != 1 || fds != 1 || (msg.msg_flags & MSG_CTRUNC) != 0) {
    if (fds > 0) ::close(fd);
    return Status(Code::kDataLoss, "the local peer passed " + std::to_string(fds) +
                                       " descriptors (or a truncated message) where one channel was due");
  }
  return ReceivedChannel{peer, fd};
}

}  // namespace ferry::local
