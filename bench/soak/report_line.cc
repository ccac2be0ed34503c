// Event lines and counters of a soak process (see report_line.h).
#include "soak/report_line.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace ferry::soak {

namespace {
platform::Mutex g_out;  // one line at a time on stdout
}

void emit(std::string_view line) {
  platform::MutexLock lock(g_out);
  std::string s(line);
  s += '\n';
  // One write per line, so lines of different threads never interleave.
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(1, s.data() + done, s.size() - done);
    if (n <= 0) return;  // the supervisor is gone; nothing to tell
    done += static_cast<size_t>(n);
  }
}

void name_this_thread(const std::string& name) { ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str()); }

void Counters::add(const std::string& name, uint64_t v) {
  platform::MutexLock lock(mu_);
  values_[name] += v;
}

void Counters::set(const std::string& name, uint64_t v) {
  platform::MutexLock lock(mu_);
  values_[name] = v;
}

uint64_t Counters::get(const std::string& name) const {
  platform::MutexLock lock(mu_);
  auto it = values_.find(name);
  return it == values_.end() ? 0 : it->second;
}

std::string Counters::line() const {
  platform::MutexLock lock(mu_);
  std::string s;
  for (const auto& [k, v] : values_) {
    if (!s.empty()) s += ' ';
    s += k + "=" + std::to_string(v);
  }
  return s;
}

Ticker::Ticker(const Counters& counters) : counters_(counters) {
  thread_ = std::thread([this] {
    name_this_thread("soak-tick");
    platform::UniqueLock lock(mu_);
    while (!cv_.wait_for(lock.native(), std::chrono::seconds(1), [this]() REQUIRES(mu_) { return stop_; })) {
      emit("TICK " + counters_.line());
    }
  });
}

Ticker::~Ticker() {
  {
    platform::MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  emit("TICK " + counters_.line());
}

}  // namespace ferry::soak
