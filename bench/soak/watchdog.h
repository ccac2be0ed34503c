// The in-process watchdog: every call of a soak process that may block is
// armed with its deadline; a call still running `margin` past its deadline
// is reported as a HANG (once) and counted. The supervisor fails the run on
// any HANG line. Time the host withheld the CPU is not counted as lateness
// (watchdog.cc says how it is measured).
//
// Thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "ferry/transfer.h"
#include "platform/mutex.h"
#include "soak/report_line.h"

namespace ferry::soak {

class Watchdog {
 public:
  Watchdog(Counters& counters, std::chrono::milliseconds margin);
  ~Watchdog();

  uint64_t arm(std::string what, Deadline deadline);
  void disarm(uint64_t token);
  std::chrono::milliseconds margin() const { return margin_; }

 private:
  struct Entry {
    std::string what;
    Deadline deadline;
    bool reported = false;
    pid_t tid = 0;                      // the thread that armed it
    uint64_t runnable_at_arm = 0;       // its runnable-but-waiting ns then
    Clock::duration withheld_at_arm{};  // withheld_ then
  };
  Counters& counters_;
  const std::chrono::milliseconds margin_;
  platform::Mutex mu_;
  std::condition_variable cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t next_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Entry> entries_ GUARDED_BY(mu_);
  // How late this watchdog's own wakeups came, summed: CPU the host
  // withheld from this process.
  Clock::duration withheld_ GUARDED_BY(mu_){};
  std::thread thread_;
};

// Arms on construction, disarms on destruction.
class Armed {
 public:
  Armed(Watchdog& w, std::string what, Deadline deadline) : w_(w), token_(w.arm(std::move(what), deadline)) {}
  ~Armed() { w_.disarm(token_); }
  Armed(const Armed&) = delete;
  Armed& operator=(const Armed&) = delete;

 private:
  Watchdog& w_;
  uint64_t token_;
};

}  // namespace ferry::soak
