// FiberWorker: one named thread that serves many streams, each in a fiber
// of its own (fiber.h), with one epoll set; and the waits that a stream's
// code calls, which park its fiber when it runs on a worker and block the
// thread as before when it does not.
//
// Why it exists: an engine's threads must not grow with its peers (a fleet
// of a thousand peers is served by the threads that serve one). A worker
// runs its fibers round-robin: a fiber runs until it must wait (its socket
// has nothing to read or no room to write: the socket goes into the epoll
// set, edge-triggered, once; a condition it waits on: the notifier posts it back), or
// until it moved a quantum of bytes in its turn (yield_turn), when it goes
// to the back of the queue. So one stream's gigabyte waits its turn behind
// another's four kilobytes instead of the other way round.
//
// Threading: a fiber runs only on its worker's thread. spawn() and
// WaitList::wake_all() are thread-safe; everything else is called by the
// worker's fibers.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ferry/status.h"
#include "platform/fiber.h"
#include "platform/mutex.h"

namespace ferry::platform {

class FiberWorker;

// A fiber with its place on a worker. Shared by the worker and whoever may
// wake it (a wake-up that comes after it ended finds it done and does
// nothing).
struct FiberTask {
  std::unique_ptr<Fiber> fiber;
  FiberWorker* worker = nullptr;
  enum class State : uint8_t { kReady, kRunning, kParked, kDone };
  State state = State::kReady;  // only the worker's thread
  int epoll_fd_registered = -1;  // the fd it waits on in the epoll set (-1: none)
  uint32_t epoll_events = 0;     // and for what
  size_t turn_bytes = 0;         // moved since its turn began
  std::chrono::steady_clock::time_point deadline{};  // of its park, if timed
  bool timed = false;
  bool timed_out = false;
};

class FiberWorker {
 public:
  // Starts a worker thread named `name` (`on_start` runs first on the
  // thread: pinning it, logging the binding). A thread the kernel refuses is
  // kResourceExhausted naming it. The thread holds the worker until it ends.
  static Result<std::shared_ptr<FiberWorker>> start(std::string name, std::function<void()> on_start);
  // Ends the thread after its current round and joins it (on its own thread:
  // lets it end alone). Fibers still parked are dropped unrun: their owners
  // ended them first.
  void stop();
  ~FiberWorker();
  FiberWorker(const FiberWorker&) = delete;
  FiberWorker& operator=(const FiberWorker&) = delete;

  // Runs `fn` in a new fiber on this worker. Thread-safe.
  // kResourceExhausted when its stack cannot be had.
  Result<std::shared_ptr<FiberTask>> spawn(std::function<void()> fn);
  // Makes `task` ready again (if parked). Thread-safe.
  void wake(const std::shared_ptr<FiberTask>& task);
  const std::string& name() const { return name_; }
  // Fibers alive on it (for placing new ones on the least loaded worker).
  size_t load() const { return load_.load(std::memory_order_relaxed); }
  // The worker whose thread calls this, or null.
  static FiberWorker* current();
  // Runs this worker's other fibers from inside one of its fibers until
  // `done` returns true: a fiber that must wait for other fibers (closing a
  // connection whose streams live here) keeps them going meanwhile.
  void run_until(const std::function<bool()>& done);

  // ---- what a running fiber calls ------------------------------------------
  // The task the calling thread runs now (null: not in a fiber of a worker).
  static FiberTask* current_task();
  // Parks the current fiber until `fd` is ready for `events` (EPOLLIN or
  // EPOLLOUT), or it is woken.
  void wait_fd(int fd, uint32_t events);
  // Parks the current fiber until woken, or until `deadline` (then true).
  bool park(std::chrono::steady_clock::time_point deadline, bool timed);
  // The current fiber goes to the back of the ready queue.
  void yield();
  // Takes the current fiber's socket out of the epoll set (before its end:
  // the descriptor's number may be reused once it is closed).
  void forget_fd();

 private:
  FiberWorker() = default;
  void loop();
  // One round: what was posted, what epoll says (waiting up to
  // `timeout_ms`), the timers, then every ready fiber once.
  void round(int timeout_ms);
  void run(const std::shared_ptr<FiberTask>& task);
  int next_timeout_ms() const;

  friend std::shared_ptr<FiberTask> current_task_shared();

  std::string name_;
  int epoll_ = -1;
  int event_ = -1;  // eventfd: something was posted
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> load_{0};

  // Only the worker's thread:
  std::deque<std::shared_ptr<FiberTask>> ready_;
  std::map<FiberTask*, std::shared_ptr<FiberTask>> live_;
  std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<FiberTask>> timers_;
  FiberTask* running_ = nullptr;

  Mutex posted_mu_;
  std::vector<std::shared_ptr<FiberTask>> posted_ GUARDED_BY(posted_mu_);
};

// Fibers (and threads) waiting for a condition, for code that may run either
// in a worker's fiber or on a thread of its own: the fiber half of a
// condition variable. A waiter registers under the mutex that guards the
// condition, then releases it and parks; a notifier changes the condition
// under that mutex and calls wake_all(). Thread-safe.
// The current fiber's task, shared (null: not in a worker's fiber).
std::shared_ptr<FiberTask> current_task_shared();

class WaitList {
 public:
  // Registers the current fiber (call with the condition's mutex held).
  void add(const std::shared_ptr<FiberTask>& task);
  void remove(FiberTask* task);
  void wake_all();

 private:
  Mutex mu_;
  std::vector<std::shared_ptr<FiberTask>> waiting_ GUARDED_BY(mu_);
};


// Waits as a condition variable does, with `lock` held on entry and on
// return (wake-ups may be spurious): on `cv` on a thread of its own, parked
// on `parked` in a worker's fiber. The notifier changes the condition under
// the lock's mutex, then calls cv's notify and parked.wake_all().
void wait_on(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, WaitList& parked);

// Waits until `fd` is ready for `poll_events` (POLLIN / POLLOUT): in a
// worker's fiber the fiber parks; on any other thread, poll() blocks.
void wait_ready(int fd, short poll_events);
// How many bytes a fiber moves in one turn before the others on its worker
// get theirs.
inline constexpr size_t kTurnQuantum = 256 * 1024;
// Counts `n` bytes moved by the current fiber; past the quantum, it yields.
// Nothing on a thread that is not a worker's.
void count_turn(size_t n);

}  // namespace ferry::platform
