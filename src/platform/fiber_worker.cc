// FiberWorker: the round (posted wake-ups, epoll, timers, every ready fiber
// once) and the waits of code that may run in a worker's fiber or not.
#include "platform/fiber_worker.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "platform/sanitizers.h"
#include "platform/system_error.h"
#include "platform/thread.h"

namespace ferry::platform {
namespace {

thread_local FiberWorker* g_worker = nullptr;

// A fiber's stack: the protocol code it runs is straight-line C++ with a few
// kilobytes of frames (a frame header, an iovec scratch, log formatting);
// CUDA's driver calls on the staging path want more. Mapped, not committed:
// an idle stream costs the pages it touched.
#if defined(FERRY_ASAN) || defined(FERRY_TSAN)
constexpr size_t kStackBytes = 1024 * 1024;
#else
constexpr size_t kStackBytes = 256 * 1024;
#endif

}  // namespace

Result<std::shared_ptr<FiberWorker>> FiberWorker::start(std::string name, std::function<void()> on_start) {
  std::shared_ptr<FiberWorker> w(new FiberWorker());
  w->name_ = name;
  w->epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (w->epoll_ < 0) return errno_status(Code::kResourceExhausted, "epoll_create1 for " + name);
  w->event_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->event_ < 0) return errno_status(Code::kResourceExhausted, "eventfd for " + name);
  struct epoll_event ev {};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the eventfd
  if (::epoll_ctl(w->epoll_, EPOLL_CTL_ADD, w->event_, &ev) != 0) {
    return errno_status(Code::kInternal, "epoll_ctl for " + name);
  }
  auto t = try_start_thread(std::move(name), [w, on_start = std::move(on_start)] {
    g_worker = w.get();
    if (on_start) on_start();
    w->loop();
    g_worker = nullptr;
  });
  if (!t.ok()) return t.status();
  w->thread_ = std::move(t).value();
  return w;
}

void FiberWorker::stop() {
  stop_.store(true, std::memory_order_release);
  uint64_t one = 1;
  ssize_t ignored = ::write(event_, &one, sizeof one);
  (void)ignored;
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // its loop ends after this round; it holds the worker until then
  } else {
    thread_.join();
  }
}

FiberWorker::~FiberWorker() {
  // The last holder may be the thread itself, once its loop ended.
  if (thread_.joinable()) thread_.detach();
  ready_.clear();
  timers_.clear();
  live_.clear();
  if (epoll_ >= 0) ::close(epoll_);
  if (event_ >= 0) ::close(event_);
}

FiberWorker* FiberWorker::current() { return g_worker; }

FiberTask* FiberWorker::current_task() {
  FiberWorker* w = g_worker;
  return w == nullptr ? nullptr : w->running_;
}

std::shared_ptr<FiberTask> current_task_shared() {
  FiberWorker* w = FiberWorker::current();
  FiberTask* t = FiberWorker::current_task();
  if (w == nullptr || t == nullptr) return nullptr;
  auto it = w->live_.find(t);
  return it == w->live_.end() ? nullptr : it->second;
}

Result<std::shared_ptr<FiberTask>> FiberWorker::spawn(std::function<void()> fn) {
  auto task = std::make_shared<FiberTask>();
  FERRY_ASSIGN_OR_RETURN(task->fiber, Fiber::create(std::move(fn), kStackBytes));
  task->worker = this;
  task->state = FiberTask::State::kReady;
  load_.fetch_add(1, std::memory_order_relaxed);
  {
    MutexLock lock(posted_mu_);
    posted_.push_back(task);
  }
  uint64_t one = 1;
  ssize_t ignored = ::write(event_, &one, sizeof one);
  (void)ignored;
  return task;
}

void FiberWorker::wake(const std::shared_ptr<FiberTask>& task) {
  {
    MutexLock lock(posted_mu_);
    posted_.push_back(task);
  }
  uint64_t one = 1;
  ssize_t ignored = ::write(event_, &one, sizeof one);
  (void)ignored;
}

void FiberWorker::loop() {
  while (!stop_.load(std::memory_order_acquire)) round(next_timeout_ms());
}

int FiberWorker::next_timeout_ms() const {
  if (!ready_.empty()) return 0;
  if (timers_.empty()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(timers_.begin()->first -
                                                                    std::chrono::steady_clock::now())
                  .count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left + 1, 1000000));
}

void FiberWorker::round(int timeout_ms) {
  struct epoll_event events[128];
  int n = ::epoll_wait(epoll_, events, 128, timeout_ms);
  auto make_ready = [&](const std::shared_ptr<FiberTask>& t) {
    if (t->state != FiberTask::State::kParked) return;  // running, ready or done: nothing to wake
    if (t->timed) {
      auto range = timers_.equal_range(t->deadline);
      for (auto it = range.first; it != range.second; ++it) {
        if (it->second == t) {
          timers_.erase(it);
          break;
        }
      }
      t->timed = false;
    }
    t->state = FiberTask::State::kReady;
    ready_.push_back(t);
  };
  for (int i = 0; i < n; ++i) {
    if (events[i].data.ptr == nullptr) {
      uint64_t count;
      ssize_t ignored = ::read(event_, &count, sizeof count);
      (void)ignored;
      continue;
    }
    auto it = live_.find(static_cast<FiberTask*>(events[i].data.ptr));
    if (it != live_.end()) make_ready(it->second);
  }
  {
    // Gone before any fiber runs: while a fiber runs, LeakSanitizer does not
    // see its worker's own stack, and a buffer only this list points to
    // would look leaked.
    std::vector<std::shared_ptr<FiberTask>> posted;
    {
      MutexLock lock(posted_mu_);
      posted.swap(posted_);
    }
    for (auto& t : posted) {
      if (t->state == FiberTask::State::kReady && live_.count(t.get()) == 0) {  // spawned
        live_.emplace(t.get(), t);
        ready_.push_back(t);
        continue;
      }
      make_ready(t);
    }
  }
  if (!timers_.empty()) {
    auto now = std::chrono::steady_clock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      std::shared_ptr<FiberTask> t = timers_.begin()->second;
      timers_.erase(timers_.begin());
      t->timed = false;
      t->timed_out = true;
      make_ready(t);
    }
  }
  // Every fiber ready now gets one turn; those that yield wait for the next
  // round, behind what became ready meanwhile.
  for (size_t k = ready_.size(); k > 0 && !ready_.empty(); --k) {
    std::shared_ptr<FiberTask> t = std::move(ready_.front());
    ready_.pop_front();
    if (t->state != FiberTask::State::kReady) continue;
    run(t);
  }
}

void FiberWorker::run(const std::shared_ptr<FiberTask>& task) {
  FiberTask* outer = running_;
  running_ = task.get();
  task->state = FiberTask::State::kRunning;
  task->turn_bytes = 0;
  task->fiber->resume();
  running_ = outer;
  if (task->fiber->done()) {
    task->state = FiberTask::State::kDone;
    if (task->epoll_fd_registered >= 0) {
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, task->epoll_fd_registered, nullptr);
      task->epoll_fd_registered = -1;
    }
    live_.erase(task.get());
    load_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void FiberWorker::run_until(const std::function<bool()>& done) {
  while (!done()) {
    // Waits for something to happen at most a millisecond at a time: `done`
    // may turn true by another worker's doing, which posts nothing here.
    round(ready_.empty() ? 1 : 0);
  }
}

void FiberWorker::wait_fd(int fd, uint32_t events) {
  FiberTask* t = running_;
  // Edge-triggered, and registered once while the fiber waits on the same
  // socket for the same readiness: a fiber parks only after its read or
  // write found nothing (EAGAIN), so the next arrival (or room) is an edge,
  // and a wait costs no epoll_ctl. An edge that comes while the fiber runs
  // wakes it once more for nothing: it tries again and parks.
  const uint32_t want = events | EPOLLET;
  if (t->epoll_fd_registered != fd || t->epoll_events != want) {
    struct epoll_event ev {};
    ev.events = want;
    ev.data.ptr = t;
    if (t->epoll_fd_registered >= 0 && t->epoll_fd_registered != fd) {
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, t->epoll_fd_registered, nullptr);
      t->epoll_fd_registered = -1;
    }
    int r;
    if (t->epoll_fd_registered == fd) {
      r = ::epoll_ctl(epoll_, EPOLL_CTL_MOD, fd, &ev);
      if (r != 0 && errno == ENOENT) r = ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
    } else {
      r = ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
      if (r != 0 && errno == EEXIST) r = ::epoll_ctl(epoll_, EPOLL_CTL_MOD, fd, &ev);
    }
    if (r != 0) {
      // Not a socket epoll takes (closed meanwhile): the caller's next call
      // says what is wrong with it.
      t->epoll_fd_registered = -1;
      return;
    }
    t->epoll_fd_registered = fd;
    t->epoll_events = want;
  }
  t->state = FiberTask::State::kParked;
  Fiber::suspend();
}

void FiberWorker::forget_fd() {
  FiberTask* t = running_;
  if (t != nullptr && t->epoll_fd_registered >= 0) {
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, t->epoll_fd_registered, nullptr);
    t->epoll_fd_registered = -1;
    t->epoll_events = 0;
  }
}

bool FiberWorker::park(std::chrono::steady_clock::time_point deadline, bool timed) {
  FiberTask* t = running_;
  auto it = live_.find(t);
  t->timed_out = false;
  if (timed && it != live_.end()) {
    t->timed = true;
    t->deadline = deadline;
    timers_.emplace(deadline, it->second);
  }
  t->state = FiberTask::State::kParked;
  Fiber::suspend();
  return t->timed_out;
}

void FiberWorker::yield() {
  FiberTask* t = running_;
  auto it = live_.find(t);
  if (it == live_.end()) return;
  t->state = FiberTask::State::kReady;
  ready_.push_back(it->second);
  Fiber::suspend();
}

void WaitList::add(const std::shared_ptr<FiberTask>& task) {
  MutexLock lock(mu_);
  waiting_.push_back(task);
}

void WaitList::remove(FiberTask* task) {
  MutexLock lock(mu_);
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(),
                                [task](const std::shared_ptr<FiberTask>& t) { return t.get() == task; }),
                 waiting_.end());
}

void WaitList::wake_all() {
  std::vector<std::shared_ptr<FiberTask>> woken;
  {
    MutexLock lock(mu_);
    woken.swap(waiting_);
  }
  for (auto& t : woken) t->worker->wake(t);
}

void wait_on(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, WaitList& parked) {
  std::shared_ptr<FiberTask> task = current_task_shared();
  if (!task) {
    cv.wait(lock);
    return;
  }
  parked.add(task);
  lock.unlock();
  task->worker->park({}, false);
  parked.remove(task.get());
  lock.lock();
}

void wait_ready(int fd, short poll_events) {
  FiberWorker* w = FiberWorker::current();
  if (w != nullptr && FiberWorker::current_task() != nullptr) {
    w->wait_fd(fd, (poll_events & POLLIN ? EPOLLIN | EPOLLRDHUP : 0u) | (poll_events & POLLOUT ? EPOLLOUT : 0u));
    return;
  }
  struct pollfd p = {fd, poll_events, 0};
  while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
}

void count_turn(size_t n) {
  FiberWorker* w = FiberWorker::current();
  FiberTask* t = FiberWorker::current_task();
  if (w == nullptr || t == nullptr) return;
  t->turn_bytes += n;
  if (t->turn_bytes >= kTurnQuantum) w->yield();
}

}  // namespace ferry::platform
