// The bounded log queue.
#include "platform/log_queue.h"

#include <algorithm>
#include <iterator>
#include <new>

namespace ferry::log {

void LogQueue::open(size_t capacity) {
  platform::MutexLock lock(mu_);
  if (!open_.load(std::memory_order_relaxed)) {
    lines_.clear();
    dropped_ = 0;
  }
  capacity_ = std::max<size_t>(capacity, 1);
  open_.store(true, std::memory_order_release);
}

void LogQueue::close() {
  {
    platform::MutexLock lock(mu_);
    open_.store(false, std::memory_order_release);
  }
  changed_.notify_all();
}

bool LogQueue::push(LogLine& line) {
  {
    platform::MutexLock lock(mu_);
    if (!open_.load(std::memory_order_relaxed)) return false;
    if (lines_.size() >= capacity_) {
      ++dropped_;
      return true;
    }
    lines_.push_back(std::move(line));
  }
  changed_.notify_one();
  return true;
}

LogLines LogQueue::take(std::chrono::milliseconds timeout) {
  platform::UniqueLock lock(mu_);
  changed_.wait_for(lock.native(), timeout,
                    [&]() REQUIRES(mu_) { return !lines_.empty() || !open_.load(std::memory_order_relaxed); });
  LogLines out;
  out.lines.assign(std::make_move_iterator(lines_.begin()), std::make_move_iterator(lines_.end()));
  lines_.clear();
  out.dropped = dropped_;
  out.queued = open_.load(std::memory_order_relaxed);
  return out;
}

void LogQueue::before_fork() { mu_.lock(); }

void LogQueue::after_fork_in_parent() { mu_.unlock(); }

void LogQueue::after_fork_in_child() {
  // Only this thread exists in the child. The parent's lines are the
  // parent's to hand on, and its reader thread is not here: lines go to
  // stderr until someone in the child opens the queue again. A reader that
  // waited at the fork left the condition variable's state behind: it is
  // made anew (destroying it could wait for that reader for ever).
  lines_.clear();
  dropped_ = 0;
  open_.store(false, std::memory_order_relaxed);
  new (&changed_) std::condition_variable();
  mu_.unlock();
}

}  // namespace ferry::log
