// LogQueue: the bounded queue log lines go to while an application takes
// them (ferry::queue_log_lines; the Python module's `ferry-log` thread).
//
// Writers never wait for the reader: a line that finds the queue full is
// dropped and counted, so a flood of lines holds at most `capacity` of them.
// The process's queue survives fork(): its lock is held across the fork, and
// the child starts with an empty, closed queue (lines to stderr) that no
// thread waits on.
//
// Thread-safe. Lock: mu_, held only to push, take or change the state; no
// call out of this class happens under it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>

#include "ferry/log.h"
#include "platform/mutex.h"

namespace ferry::log {

class LogQueue {
 public:
  LogQueue() = default;
  LogQueue(const LogQueue&) = delete;
  LogQueue& operator=(const LogQueue&) = delete;

  // Lines go to the queue, which holds at most `capacity` (at least 1). A
  // queue that was closed starts with no line and no drop counted.
  void open(size_t capacity) EXCLUDES(mu_);
  // Lines go elsewhere; a reader waiting in take() wakes up.
  void close() EXCLUDES(mu_);
  // A cheap hint for writers: lines are (probably) queued.
  bool is_open() const { return open_.load(std::memory_order_acquire); }
  // Queues `line`, or drops and counts it when the queue is full. False
  // (the line untouched) when the queue is closed: it goes elsewhere.
  bool push(LogLine& line) EXCLUDES(mu_);
  // Waits until a line is queued, the queue is closed, or `timeout` passed;
  // takes every queued line.
  LogLines take(std::chrono::milliseconds timeout) EXCLUDES(mu_);

  // fork() handlers (pthread_atfork) for the process's queue.
  void before_fork() ACQUIRE(mu_);
  void after_fork_in_parent() RELEASE(mu_);
  void after_fork_in_child() RELEASE(mu_);

 private:
  platform::Mutex mu_;
  std::condition_variable changed_;  // with mu_: a line was queued, or the queue closed
  std::deque<LogLine> lines_ GUARDED_BY(mu_);
  size_t capacity_ GUARDED_BY(mu_) = 0;
  uint64_t dropped_ GUARDED_BY(mu_) = 0;
  std::atomic<bool> open_{false};  // written under mu_
};

}  // namespace ferry::log
