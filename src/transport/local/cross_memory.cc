// process_vm_readv/writev and pidfd_getfd.
#include "transport/local/cross_memory.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "platform/system_error.h"

namespace ferry::local {
namespace {

// Moves `at` and the entry it names past `moved` bytes of `list`.
void advance(std::vector<iovec>& list, size_t& at, size_t moved) {
  while (moved > 0 && at < list.size()) {
    size_t k = std::min(moved, list[at].iov_len);
    list[at].iov_base = static_cast<char*>(list[at].iov_base) + k;
    list[at].iov_len -= k;
    moved -= k;
    if (list[at].iov_len == 0) ++at;
  }
  while (at < list.size() && list[at].iov_len == 0) ++at;
}

// The kernel takes at most IOV_MAX entries per side; walk both lists.
Status cross(pid_t pid, const std::vector<iovec>& local, const std::vector<iovec>& remote, bool write) {
  std::vector<iovec> l = local, r = remote;
  size_t li = 0, ri = 0;
  while (li < l.size() && ri < r.size()) {
    size_t ln = std::min<size_t>(l.size() - li, 1024), rn = std::min<size_t>(r.size() - ri, 1024);
    ssize_t n = write ? ::process_vm_writev(pid, &l[li], ln, &r[ri], rn, 0)
                      : ::process_vm_readv(pid, &l[li], ln, &r[ri], rn, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      std::string what = platform::errno_message(
          std::string(write ? "process_vm_writev" : "process_vm_readv") + " into process " + std::to_string(pid), e);
      if (e == ESRCH) return Status(Code::kPeerLost, what);
      if (e == EPERM) return Status(Code::kPermissionDenied, what);
      return Status(Code::kOutOfRange, what);
    }
    if (n == 0) return Status(Code::kOutOfRange, "cross-memory copy made no progress (peer range unmapped?)");
    // Advance both lists by n bytes (a partial copy stops at a page the peer lacks).
    advance(l, li, static_cast<size_t>(n));
    advance(r, ri, static_cast<size_t>(n));
  }
  return Status();
}

}  // namespace

Status cross_write(pid_t pid, const std::vector<iovec>& local, const std::vector<iovec>& remote) {
  return cross(pid, local, remote, true);
}
Status cross_read(pid_t pid, const std::vector<iovec>& local, const std::vector<iovec>& remote) {
  return cross(pid, local, remote, false);
}

Result<int> fetch_peer_fd(pid_t pid, int fd) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    int e = errno;
    return platform::errno_status(e == ESRCH ? Code::kPeerLost : Code::kUnavailable,
                                  "pidfd_open(" + std::to_string(pid) + ")", e);
  }
  int got = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
  int e = errno;
  ::close(pidfd);
  if (got < 0) {
    return platform::errno_status(e == EPERM ? Code::kPermissionDenied : Code::kUnavailable,
                                  "pidfd_getfd(process " + std::to_string(pid) + ", fd " + std::to_string(fd) + ")", e);
  }
  return got;
}

}  // namespace ferry::local
