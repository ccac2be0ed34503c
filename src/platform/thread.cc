// Named worker threads.
#include "platform/thread.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

namespace ferry::platform {

std::thread start_thread(std::string name, std::function<void()> fn) {
  return std::thread([name = std::move(name), fn = std::move(fn)]() {
    ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
    fn();
  });
}

CpuList pin_current_thread(const CpuList& cpus) {
  if (!cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus) {
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
    }
    ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set);
  }
  CpuList actual;
  cpu_set_t now;
  CPU_ZERO(&now);
  if (::sched_getaffinity(0, sizeof(now), &now) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &now)) actual.push_back(c);
    }
  }
  return actual;
}

int usable_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace ferry::platform
