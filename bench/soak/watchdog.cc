// The in-process watchdog (see watchdog.h). It wakes ten times a second: a
// hang is reported within 100 ms of passing its margin, at a negligible cost.
#include "soak/watchdog.h"

namespace ferry::soak {

Watchdog::Watchdog(Counters& counters, std::chrono::milliseconds margin) : counters_(counters), margin_(margin) {
  thread_ = std::thread([this] {
    name_this_thread("soak-watchdog");
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) {
      auto now = Clock::now();
      for (auto& [token, e] : entries_) {
        if (e.reported || now <= e.deadline + margin_) continue;
        e.reported = true;
        auto late = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.deadline).count();
        counters_.add("hang");
        emit("HANG " + e.what + ": still running " + std::to_string(late) + " ms after its deadline (margin " +
             std::to_string(margin_.count()) + " ms)");
      }
    }
  });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t Watchdog::arm(std::string what, Deadline deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t t = next_++;
  entries_.emplace(t, Entry{std::move(what), deadline, false});
  return t;
}

void Watchdog::disarm(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(token);
}

}  // namespace ferry::soak
