// SquattedRendezvous: a local user who binds the rendezvous name a peer
// names first (abstract names belong to whoever binds them) and keeps its
// backlog full, so that a connect to it never completes. Shared by the
// tests that check a local handshake dialing it ends by its bounds.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "platform/socket.h"

namespace ferry::testing {

class SquattedRendezvous {
 public:
  explicit SquattedRendezvous(const std::string& name) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    squatter_ = platform::Socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::bind(squatter_.fd(), reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(squatter_.fd(), 0) != 0) {
      return;
    }
    for (int i = 0; i < 64; ++i) {
      platform::Socket f(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (::connect(f.fd(), reinterpret_cast<sockaddr*>(&addr), len) != 0) break;  // EAGAIN: the backlog is full
      fillers_.push_back(std::move(f));
    }
  }
  // Bound, listening, and the backlog filled.
  bool ok() const { return !fillers_.empty(); }
  // Gives the name up: a connect still waiting on it ends.
  void release() {
    squatter_ = platform::Socket();
    fillers_.clear();
  }

 private:
  platform::Socket squatter_;
  std::vector<platform::Socket> fillers_;
};

}  // namespace ferry::testing
