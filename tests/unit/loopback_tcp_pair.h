// A connected loopback TCP pair for tests that need a real TCP socket (the
// kernel treats pages spliced into one differently from a Unix socket's).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ferry::testing {

// Both ends close with the struct; a or b is -1 if the pair could not be made.
struct LoopbackTcpPair {
  int a = -1, b = -1;
  LoopbackTcpPair() {
    int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(at);
    if (::bind(l, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0 || ::listen(l, 1) != 0 ||
        ::getsockname(l, reinterpret_cast<sockaddr*>(&at), &len) != 0) {
      ::close(l);
      return;
    }
    a = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(a, reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0) b = ::accept(l, nullptr, nullptr);
    ::close(l);
  }
  ~LoopbackTcpPair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
  LoopbackTcpPair(const LoopbackTcpPair&) = delete;
  LoopbackTcpPair& operator=(const LoopbackTcpPair&) = delete;
};

}  // namespace ferry::testing
