// Event lines and counters of a soak process (see report_line.h).
#include "soak/report_line.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace ferry::soak {

namespace {
std::mutex g_out;
}

void emit(std::string_view line) {
  std::lock_guard<std::mutex> lock(g_out);
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
  std::lock_guard<std::mutex> lock(mu_);
  values_[name] += v;
}

void Counters::set(const std::string& name, uint64_t v) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[name] = v;
}

uint64_t Counters::get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(name);
  return it == values_.end() ? 0 : it->second;
}

std::string Counters::line() const {
  std::lock_guard<std::mutex> lock(mu_);
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
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) {
      emit("TICK " + counters_.line());
    }
  });
}

Ticker::~Ticker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  emit("TICK " + counters_.line());
}

}  // namespace ferry::soak
