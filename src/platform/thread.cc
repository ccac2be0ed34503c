// Named worker threads.
#include "platform/thread.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <memory>
#include <system_error>

#include "platform/mutex.h"

namespace ferry::platform {
namespace {

Mutex fault_mu;
std::function<bool(std::string_view)> start_fault GUARDED_BY(fault_mu);

}  // namespace

std::thread start_thread(std::string name, std::function<void()> fn) {
  return std::thread([name = std::move(name), fn = std::move(fn)]() {
    ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
    fn();
  });
}

Result<std::thread> try_start_thread(std::string name, std::function<void()> fn) {
  auto refused = [&](const std::string& why) {
    return Status(Code::kResourceExhausted, "could not start thread " + name + ": " + why +
                                                " (the process or its user is out of threads or memory)");
  };
  {
    MutexLock lock(fault_mu);
    if (start_fault && start_fault(name)) return refused("Resource temporarily unavailable (injected)");
  }
  try {
    return start_thread(name, std::move(fn));
  } catch (const std::system_error& e) {
    return refused(e.code().message());
  } catch (const std::bad_alloc&) {
    return refused("out of memory");
  }
}

void set_thread_start_fault(std::function<bool(std::string_view name)> fault) {
  MutexLock lock(fault_mu);
  start_fault = std::move(fault);
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
