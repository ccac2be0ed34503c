// How a soak process tells the supervisor what happened: one line per event
// on stdout ("CORRUPT ...", "HANG ...", "FAULT ..."), and every second a
// "TICK k=v ..." line with its cumulative counters, so that a process killed
// at any moment has reported all but its last second.
//
// Counters and the output are thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <thread>

#include "platform/mutex.h"

namespace ferry::soak {

// Writes `line` and a newline to stdout at once and flushes it.
void emit(std::string_view line);

// Names a thread of the soak ("soak-lane-3"), as ferry names its own.
void name_this_thread(const std::string& name);

class Counters {
 public:
  void add(const std::string& name, uint64_t v = 1);
  // For gauges ("sessions_live"): the value now, not a sum.
  void set(const std::string& name, uint64_t v);
  uint64_t get(const std::string& name) const;
  // "a=1 b=2 ..." in name order.
  std::string line() const;

 private:
  mutable platform::Mutex mu_;
  std::map<std::string, uint64_t> values_ GUARDED_BY(mu_);
};

// Prints "TICK <counters>" every second from a thread of its own until
// destroyed (and once more then).
class Ticker {
 public:
  explicit Ticker(const Counters& counters);
  ~Ticker();

 private:
  const Counters& counters_;
  platform::Mutex mu_;
  std::condition_variable cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ferry::soak
