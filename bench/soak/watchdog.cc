// The in-process watchdog (see watchdog.h). It wakes ten times a second: a
// hang is reported within 100 ms of passing its margin, at a negligible cost.
//
// On a host whose CPUs are oversubscribed, a thread can be ready to run and
// not be given a CPU for seconds (seen: 6 s at a load average of 28 on two
// cores, the soak at nice 10). That is not the engine hanging, so a call's
// lateness is reduced by the time the CPU was withheld: the larger of the
// time its own thread spent runnable but not running
// (/proc/self/task/TID/schedstat) and the time this watchdog's own wakeups
// came late. A call blocked for real (a deadlock, a wait that ignores its
// deadline) is not runnable, so none of its lateness is forgiven.
#include "soak/watchdog.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>

namespace ferry::soak {

namespace {

// Nanoseconds thread `tid` of this process has spent runnable but waiting
// for a CPU (0 where the kernel does not say).
uint64_t runnable_wait_ns(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  uint64_t on_cpu = 0, waiting = 0;
  if (!(f >> on_cpu >> waiting)) return 0;
  return waiting;
}

pid_t this_tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

}  // namespace

Watchdog::Watchdog(Counters& counters, std::chrono::milliseconds margin) : counters_(counters), margin_(margin) {
  thread_ = std::thread([this] {
    name_this_thread("soak-watchdog");
    platform::UniqueLock lock(mu_);
    auto last = Clock::now();
    const auto tick = std::chrono::milliseconds(100);
    while (!cv_.wait_for(lock.native(), tick, [this]() REQUIRES(mu_) { return stop_; })) {
      auto now = Clock::now();
      if (now - last > tick + std::chrono::milliseconds(50)) withheld_ += now - last - tick;
      last = now;
      for (auto& [token, e] : entries_) {
        if (e.reported || now <= e.deadline + margin_) continue;
        auto own = std::chrono::nanoseconds(runnable_wait_ns(e.tid) - e.runnable_at_arm);
        auto mine = withheld_ - e.withheld_at_arm;
        auto credit = std::max<Clock::duration>(own, mine);
        if (now <= e.deadline + margin_ + credit) continue;
        e.reported = true;
        auto ms = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
        counters_.add("hang");
        emit("HANG " + e.what + ": still running " + std::to_string(ms(now - e.deadline)) +
             " ms after its deadline (margin " + std::to_string(margin_.count()) + " ms; CPU withheld meanwhile: " +
             std::to_string(ms(own)) + " ms from its thread, " + std::to_string(ms(mine)) + " ms from the watchdog)");
      }
    }
  });
}

Watchdog::~Watchdog() {
  {
    platform::MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t Watchdog::arm(std::string what, Deadline deadline) {
  pid_t tid = this_tid();
  uint64_t waited = runnable_wait_ns(tid);
  platform::MutexLock lock(mu_);
  uint64_t t = next_++;
  entries_.emplace(t, Entry{std::move(what), deadline, false, tid, waited, withheld_});
  return t;
}

void Watchdog::disarm(uint64_t token) {
  platform::MutexLock lock(mu_);
  entries_.erase(token);
}

}  // namespace ferry::soak
