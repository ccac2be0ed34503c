// The engine's copy helpers: starting them, handing out pieces in turn,
// ending offloaded jobs.
#include "transport/local/copy_pool.h"

#include <algorithm>

#include "platform/log.h"
#include "platform/thread.h"

namespace ferry::local {

struct CopyPool::State {
  CopyHelpers config;
  std::chrono::milliseconds idle{};
  platform::Mutex mu;
  std::condition_variable work_cv;  // a job was queued, or the helpers must end
  std::condition_variable left_cv;  // a helper left a job
  std::deque<Job*> queue GUARDED_BY(mu);
  // Helper i runs in slot i; an empty (not joinable) slot is a helper that
  // ended idle, or never started.
  std::vector<std::thread> slots GUARDED_BY(mu);
  bool end GUARDED_BY(mu) = false;
  std::chrono::steady_clock::time_point retry_at GUARDED_BY(mu){};

  // Of the queued jobs that may take one more helper, the one fewest
  // helpers copy (the first of those), moved to the back: a job nobody
  // serves gets the next helper that comes free, and pieces of different
  // jobs take turns. Null if none.
  Job* take() REQUIRES(mu) {
    auto it = queue.end();
    for (auto j = queue.begin(); j != queue.end(); ++j) {
      if ((*j)->working < (*j)->wanted && (it == queue.end() || (*j)->working < (*it)->working)) it = j;
    }
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

CopyPool::CopyPool(size_t helpers, CopyHelpers config, std::chrono::milliseconds idle)
    : size_(helpers), s_(std::make_shared<State>()) {
  s_->idle = idle;
  // Without CPUs named, the constructing thread's: fixed now, or the helpers
  // would inherit the CPUs of whichever thread happens to copy first.
  if (config.cpus.empty()) config.cpus = platform::pin_current_thread({});
  s_->config = std::move(config);
  platform::MutexLock lock(s_->mu);
  s_->slots.resize(size_);
}

CopyPool::~CopyPool() {
  std::vector<std::thread> threads;
  {
    platform::MutexLock lock(s_->mu);
    s_->end = true;
    threads.swap(s_->slots);
  }
  s_->work_cv.notify_all();
  for (std::thread& t : threads) {
    if (!t.joinable()) continue;
    // The last owner of the pool let go on a helper (a job's end): that
    // helper ends by itself, holding the state.
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();
    } else {
      t.join();
    }
  }
}

size_t CopyPool::start_locked() {
  State& s = *s_;
  s.mu.assert_held();
  auto running = [&]() REQUIRES(s.mu) {
    return static_cast<size_t>(std::count_if(s.slots.begin(), s.slots.end(), [](const std::thread& t) {
      return t.joinable();
    }));
  };
  if (s.end) return 0;
  auto now = std::chrono::steady_clock::now();
  if (now < s.retry_at) return running();
  for (size_t index = 0; index < s.slots.size(); ++index) {
    if (s.slots[index].joinable()) continue;
    auto t = platform::try_start_thread(s.config.name + "-" + std::to_string(index),
                                        [state = s_, index] { helper_loop(state, index); });
    if (!t.ok()) {
      // The copies go on without it; asking the kernel again on every copy
      // would put a failing thread start on each.
      s.retry_at = now + kRetry;
      FERRY_ENGINE_LOG(kWarn, "local", s.config.engine_id, "%s; large host copies use %zu helper threads for now",
                       t.status().to_string().c_str(), running());
      break;
    }
    s.slots[index] = std::move(t).value();
  }
  return running();
}

size_t CopyPool::ensure_started() {
  platform::MutexLock lock(s_->mu);
  return start_locked();
}

size_t CopyPool::add(Job* job) {
  size_t running;
  {
    platform::MutexLock lock(s_->mu);
    // Started here, under the lock a helper ends under: a queued job always
    // finds one.
    running = start_locked();
    if (running == 0) return 0;
    job->queued = true;
    s_->queue.push_back(job);
  }
  s_->work_cv.notify_all();
  return running;
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
    bool woken = s.work_cv.wait_for(lock.native(), s.idle,
                                    [&]() REQUIRES(s.mu) { return s.end || (job = s.take()) != nullptr; });
    if (s.end) return;
    if (!woken) {
      // Idle: this helper ends, and its slot is free for the next copy that
      // wants one (add() starts it again under this lock). Detached here,
      // so the pool neither joins nor counts it.
      if (index < s.slots.size() && s.slots[index].get_id() == std::this_thread::get_id()) s.slots[index].detach();
      return;
    }
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
