// PageLender: sends bytes to a TCP socket by lending it their pages instead
// of copying them into the socket's buffers.
//
// Why this file exists: a staged GPU chunk over TCP is copied by the GPU
// into a pinned slot, then, with send(), copied again by the CPU into the
// socket. vmsplice() puts the slot's pages into a pipe and splice() moves
// them into the socket, so the sending CPU copies nothing; over loopback the
// receiving socket reads the very pages. The price is a rule: the lent bytes
// must not change until the peer has read them (its confirmation), since
// until then the socket, or the peer's socket on the same host, still
// refers to the pages.
//
// Memory lent this way comes from map_lendable(): an anonymous mapping, whose
// pages the kernel keeps alive while a socket holds them, even after
// unmap_lendable().
//
// A splice into a socket the peer reset raises SIGPIPE in the calling thread
// (splice has no MSG_NOSIGNAL); a thread that lends pages first calls
// block_sigpipe_in_this_thread().
//
// Threading: a lender is used by one thread at a time.
#pragma once

#include <cstddef>

#include "ferry/status.h"

namespace ferry::platform {

// Page-aligned, zeroed host memory whose pages may be lent to a socket.
// kResourceExhausted when the mapping fails.
Result<void*> map_lendable(size_t bytes);
void unmap_lendable(void* p, size_t bytes);

// SIGPIPE stays pending, never delivered, in the calling thread.
void block_sigpipe_in_this_thread();

class PageLender {
 public:
  // A lender whose pipe holds up to `bytes` where the system lets it (a
  // smaller pipe takes more calls). An error leaves the caller to copy
  // instead: kResourceExhausted (no file descriptor left), kUnimplemented
  // (vmsplice refused here, as sandboxes may).
  static Result<PageLender> open(size_t bytes);
  PageLender(PageLender&& o) noexcept;
  PageLender& operator=(PageLender&& o) noexcept;
  PageLender(const PageLender&) = delete;
  PageLender& operator=(const PageLender&) = delete;
  ~PageLender();

  // Lends [p, p + n) to the stream socket `fd`, blocking until all of it is
  // in the socket. `more`: more bytes follow at once (the socket may wait
  // for them before sending a short segment). kPeerLost on a socket error;
  // the lender is then unusable (its pipe may still hold pages).
  Status lend(int fd, const void* p, size_t n, bool more);

 private:
  PageLender(int read_end, int write_end) : read_end_(read_end), write_end_(write_end) {}
  void close_pipe();

  int read_end_ = -1;
  int write_end_ = -1;
};

}  // namespace ferry::platform
