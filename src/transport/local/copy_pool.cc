// The engine's copy helpers: starting them, handing out pieces in turn,
// ending offloaded jobs.
#include "transport/local/copy_pool.h"

#include <algorithm>

#include "core/log.h"
#include "platform/thread.h"

namespace ferry::local {

struct CopyPool::State {
  CopyHelpers config;
  platform::Mutex mu;
  std::condition_variable work_cv;  // a job was queued, or the helpers must end
  std::condition_variable left_cv;  // a helper left a job
  std::deque<Job*> queue GUARDED_BY(mu);
  std::vector<std::thread> threads GUARDED_BY(mu);
  bool end GUARDED_BY(mu) = false;
  std::chrono::steady_clock::time_point retry_at GUARDED_BY(mu){};

  // The first queued job that may take one more helper, moved to the back
  // (pieces of different jobs take turns); null if none.
  Job* take() REQUIRES(mu) {
    auto it = std::find_if(queue.begin(), queue.end(), [](const Job* j) { return j->working < j->wanted; });
    if (it == queue.end()) return nullptr;
    Job* job = *it;
    queue.erase(it);
    queue.push_back(job);
    return job;
  }
  void unqueue(Job* job) REQUIRES(mu) {
    if (!job->queued) return;
    job->queued = false;
    queue.erase(std::find(queue.begin(), queue.end(), job));
  }
};

size_t CopyPool::default_size() {
  return std::clamp<size_t>(static_cast<size_t>(platform::usable_cpu_count()), 2, kMaxHelpers);
}

CopyPool::CopyPool(size_t helpers, CopyHelpers config) : size_(helpers), s_(std::make_shared<State>()) {
  // Without CPUs named, the constructing thread's: fixed now, or the helpers
  // would inherit the CPUs of whichever thread happens to copy first.
  if (config.cpus.empty()) config.cpus = platform::pin_current_thread({});
  s_->config = std::move(config);
}

CopyPool::~CopyPool() {
  std::vector<std::thread> threads;
  {
    platform::MutexLock lock(s_->mu);
    s_->end = true;
    threads.swap(s_->threads);
  }
  s_->work_cv.notify_all();
  for (std::thread& t : threads) {
    // The last owner of the pool let go on a helper (a job's end): that
    // helper ends by itself, holding the state.
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();
    } else {
      t.join();
    }
  }
}

size_t CopyPool::ensure_started() {
  State& s = *s_;
  platform::MutexLock lock(s.mu);
  if (s.threads.size() >= size_ || s.end) return s.threads.size();
  auto now = std::chrono::steady_clock::now();
  if (now < s.retry_at) return s.threads.size();
  while (s.threads.size() < size_) {
    size_t index = s.threads.size();
    auto t = platform::try_start_thread(s.config.name + "-" + std::to_string(index),
                                        [state = s_, index] { helper_loop(state, index); });
    if (!t.ok()) {
      // The copies go on without it; asking the kernel again on every copy
      // would put a failing thread start on each.
      s.retry_at = now + kRetry;
      FERRY_ENGINE_LOG(kWarn, "local", s.config.engine_id, "%s; large host copies use %zu helper threads for now",
                       t.status().to_string().c_str(), s.threads.size());
      break;
    }
    s.threads.push_back(std::move(t).value());
  }
  return s.threads.size();
}

void CopyPool::add(Job* job) {
  {
    platform::MutexLock lock(s_->mu);
    job->queued = true;
    s_->queue.push_back(job);
  }
  s_->work_cv.notify_all();
}

void CopyPool::withdraw(Job* job) {
  platform::UniqueLock lock(s_->mu);
  s_->unqueue(job);
  s_->left_cv.wait(lock.native(), [&] { return job->working == 0; });
}

void CopyPool::helper_loop(const std::shared_ptr<State>& state, size_t index) {
  State& s = *state;
  const platform::CpuList& want = s.config.cpus;
  platform::CpuList actual = platform::pin_current_thread(want);
  bool pinned = want.empty() || actual == want;
  FERRY_ENGINE_LOG(kInfo, "local", s.config.engine_id, "copy helper %s-%zu: expected %s actual %s %s",
                   s.config.name.c_str(), index, want.empty() ? "any" : platform::format_cpu_list(want).c_str(),
                   platform::format_cpu_list(actual).c_str(), pinned ? "ok" : "MISMATCH");
  if (!pinned) {
    FERRY_ENGINE_LOG(kWarn, "local", s.config.engine_id, "copy helper %s-%zu could not be pinned to %s (runs on %s)",
                     s.config.name.c_str(), index, platform::format_cpu_list(want).c_str(),
                     platform::format_cpu_list(actual).c_str());
  }
  platform::UniqueLock lock(s.mu);
  for (;;) {
    Job* job = nullptr;
    s.work_cv.wait(lock.native(), [&]() REQUIRES(s.mu) { return s.end || (job = s.take()) != nullptr; });
    if (s.end) return;
    ++job->working;
    lock.unlock();
    // One piece, then the job goes to the back of the queue: the next piece
    // may be another connection's.
    bool more = job->run_piece();
    lock.lock();
    if (!more) s.unqueue(job);
    if (--job->working == 0) s.left_cv.notify_all();
    if (job->offloaded && !job->queued && job->working == 0 && !job->ended_run) {
      // No piece left and nobody copies: nobody touches it but its end.
      job->ended_run = true;
      lock.unlock();
      job->ended();
      lock.lock();
    } else if (more) {
      // Another helper may take this job's next piece while this one was busy.
      s.work_cv.notify_one();
    }
  }
}

}  // namespace ferry::local
