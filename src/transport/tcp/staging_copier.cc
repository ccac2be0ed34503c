// The host-memory copier and the process's staging hooks.
#include "transport/tcp/staging_copier.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "platform/thread.h"

namespace ferry::tcp {
namespace {

// Copies run on a worker thread in order; the ticket of a fence is done once
// the worker has passed every copy queued before it.
class HostCopier final : public Copier {
 public:
  HostCopier(std::chrono::microseconds delay, CopyWatch watch) : delay_(delay), watch_(std::move(watch)) {
    worker_ = platform::start_thread("ferry-hostcopy", [this] { run(); });
  }
  ~HostCopier() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  Result<void*> alloc_host(int, size_t bytes) override {
    void* p = std::aligned_alloc(4096, (bytes + 4095) & ~size_t{4095});
    if (p == nullptr) return Status(Code::kResourceExhausted, "staging slot of " + std::to_string(bytes) + " bytes");
    return p;
  }
  void free_host(void* p, size_t) override { std::free(p); }

  Status copy(int, void* dst, const void* src, size_t n) override {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(Job{dst, src, n, 0});
    }
    cv_.notify_all();
    return Status();
  }

  Result<uint64_t> fence() override {
    uint64_t t;
    {
      std::lock_guard lock(mu_);
      t = ++issued_;
      queue_.push_back(Job{nullptr, nullptr, 0, t});
    }
    cv_.notify_all();
    return t;
  }

  Result<bool> done(uint64_t ticket) override {
    std::lock_guard lock(mu_);
    return completed_ >= ticket;
  }

  Status wait(uint64_t ticket) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return completed_ >= ticket; });
    return Status();
  }

  Status sync() override { return wait(fence().value()); }

 private:
  struct Job {
    void* dst;
    const void* src;
    size_t n;
    uint64_t ticket;  // nonzero: a fence
  };

  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Job j = queue_.front();
      queue_.pop_front();
      if (j.ticket != 0) {
        completed_ = j.ticket;
        cv_.notify_all();
        continue;
      }
      lock.unlock();
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      if (watch_) watch_(j.dst, j.src, j.n);
      std::memcpy(j.dst, j.src, j.n);
      lock.lock();
    }
  }

  const std::chrono::microseconds delay_;
  const CopyWatch watch_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;   // guarded by mu_
  uint64_t issued_ = 0;     // guarded by mu_
  uint64_t completed_ = 0;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  std::thread worker_;
};

std::mutex hooks_mu;
StagingHooks hooks;  // guarded by hooks_mu

}  // namespace

std::unique_ptr<Copier> make_host_copier(std::chrono::microseconds delay, CopyWatch watch) {
  return std::make_unique<HostCopier>(delay, std::move(watch));
}

StagingHooks staging_hooks() {
  std::lock_guard lock(hooks_mu);
  return hooks;
}

void set_staging_hooks_for_tests(StagingHooks h) {
  std::lock_guard lock(hooks_mu);
  hooks = std::move(h);
}

}  // namespace ferry::tcp
