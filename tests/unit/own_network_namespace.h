// Runs a test's body in a network namespace of its own, on a thread made for
// it (a namespace is a thread's: nothing else in the process sees it), with
// its loopback up and the per-namespace sysctls it asks for. Makes rare
// network behaviour certain (one ephemeral port, a send buffer that cannot
// grow). Needs root; the caller skips on the reason it returns.
#pragma once

#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry::netns {

// `sysctls`: file under /proc/sys/net and the value written to it. Returns
// why the namespace could not be made, or "" once `body` ran (threads it
// starts are in the namespace too).
inline std::string in_own_network_namespace(const std::vector<std::pair<std::string, std::string>>& sysctls,
                                            const std::function<void()>& body) {
  std::string why;
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      why = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
      return;
    }
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr {};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    bool up = fd >= 0 && ::ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
    if (fd >= 0) ::close(fd);
    if (!up) {
      why = "cannot bring the namespace's loopback up";
      return;
    }
    for (const auto& [file, value] : sysctls) {
      std::ofstream f("/proc/sys/net/" + file);
      f << value << '\n';
      f.close();
      if (!f) {
        why = "cannot write " + value + " to /proc/sys/net/" + file;
        return;
      }
    }
    body();
  });
  t.join();
  return why;
}

}  // namespace ferry::netns
