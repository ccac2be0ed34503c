// The host-memory copier and the process's staging hooks.
#include "transport/tcp/staging_copier.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "platform/mutex.h"
#include "platform/page_lender.h"
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
      platform::MutexLock lock(mu_);
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
  Result<void*> alloc_lendable(int, size_t bytes) override { return platform::map_lendable(bytes); }
  void free_lendable(void* p, size_t bytes) override { platform::unmap_lendable(p, bytes); }

  Status copy(int, void* dst, const void* src, size_t n) override {
    {
      platform::MutexLock lock(mu_);
      queue_.push_back(Job{dst, src, n, 0});
    }
    cv_.notify_all();
    return Status();
  }

  Result<uint64_t> fence() override {
    uint64_t t;
    {
      platform::MutexLock lock(mu_);
      t = ++issued_;
      queue_.push_back(Job{nullptr, nullptr, 0, t});
    }
    cv_.notify_all();
    return t;
  }

  Result<bool> done(uint64_t ticket) override {
    platform::MutexLock lock(mu_);
    return completed_ >= ticket;
  }

  Status wait(uint64_t ticket) override {
    platform::UniqueLock lock(mu_);
    cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return completed_ >= ticket; });
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

  void run() EXCLUDES(mu_) {
    platform::UniqueLock lock(mu_);
    for (;;) {
      cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return stop_ || !queue_.empty(); });
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
  platform::Mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_ GUARDED_BY(mu_);
  uint64_t issued_ GUARDED_BY(mu_) = 0;
  uint64_t completed_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread worker_;
};

platform::Mutex hooks_mu;
StagingHooks hooks GUARDED_BY(hooks_mu);

}  // namespace

std::unique_ptr<Copier> make_host_copier(std::chrono::microseconds delay, CopyWatch watch) {
  return std::make_unique<HostCopier>(delay, std::move(watch));
}

StagingHooks staging_hooks() {
  platform::MutexLock lock(hooks_mu);
  return hooks;
}

void set_staging_hooks_for_tests(StagingHooks h) {
  platform::MutexLock lock(hooks_mu);
  hooks = std::move(h);
}

}  // namespace ferry::tcp
