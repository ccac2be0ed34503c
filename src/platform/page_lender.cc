// PageLender: vmsplice into a pipe, splice into the socket.
#include "platform/page_lender.h"

#include <poll.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "platform/fiber_worker.h"
#include "platform/system_error.h"

namespace ferry::platform {

Result<void*> map_lendable(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return errno_status(Code::kResourceExhausted, "mmap of " + std::to_string(bytes) + " bytes");
  return p;
}

void unmap_lendable(void* p, size_t bytes) {
  if (p != nullptr) ::munmap(p, bytes);
}

void block_sigpipe_in_this_thread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Result<PageLender> PageLender::open(size_t bytes) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return errno_status(Code::kResourceExhausted, "pipe for lending pages");
  PageLender lender(fds[0], fds[1]);
  // Best effort: past the system's limits (pipe-max-size, a user's pipe
  // pages) the pipe keeps its default size.
  (void)::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(bytes));
  // Sandboxes may refuse vmsplice (a seccomp filter, a kernel without it):
  // one byte through the pipe says so here rather than on a live socket.
  char probe = 0;
  struct iovec v = {&probe, 1};
  if (::vmsplice(fds[1], &v, 1, 0) != 1) return errno_status(Code::kUnimplemented, "vmsplice");
  if (::read(fds[0], &probe, 1) != 1) return errno_status(Code::kInternal, "reading the vmsplice probe back");
  return lender;
}

PageLender::PageLender(PageLender&& o) noexcept
    : read_end_(std::exchange(o.read_end_, -1)), write_end_(std::exchange(o.write_end_, -1)) {}

PageLender& PageLender::operator=(PageLender&& o) noexcept {
  if (this != &o) {
    close_pipe();
    read_end_ = std::exchange(o.read_end_, -1);
    write_end_ = std::exchange(o.write_end_, -1);
  }
  return *this;
}

PageLender::~PageLender() { close_pipe(); }

void PageLender::close_pipe() {
  if (read_end_ >= 0) ::close(read_end_);
  if (write_end_ >= 0) ::close(write_end_);
  read_end_ = write_end_ = -1;
}

Status PageLender::lend(int fd, const void* p, size_t n, bool more) {
  const char* at = static_cast<const char*>(p);
  while (n > 0) {
    struct iovec v = {const_cast<char*>(at), n};
    ssize_t in = ::vmsplice(write_end_, &v, 1, 0);
    if (in < 0) {
      if (errno == EINTR) continue;
      return errno_status(Code::kPeerLost, "vmsplice");
    }
    at += in;
    n -= static_cast<size_t>(in);
    for (ssize_t out = 0; out < in;) {
      unsigned flags = SPLICE_F_MOVE | (more || n > 0 ? SPLICE_F_MORE : 0);
      ssize_t k = ::splice(read_end_, nullptr, fd, nullptr, static_cast<size_t>(in - out), flags);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // A non-blocking socket (a data plane's fiber) with no room: wait for it.
        wait_ready(fd, POLLOUT);
        continue;
      }
      if (k < 0) return errno_status(Code::kPeerLost, "splice");
      if (k == 0) return Status(Code::kPeerLost, "splice into the socket moved nothing");
      out += k;
    }
  }
  return Status();
}

}  // namespace ferry::platform
