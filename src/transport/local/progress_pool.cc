// The engine's progress workers: their loop (sleep, doorbells, kicks, turns
// taken in order), adding and removing connections.
#include "transport/local/progress_pool.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>
#include <unordered_map>
#include <utility>

#include "platform/log.h"
#include "platform/system_error.h"
#include "platform/thread.h"

namespace ferry::local {
namespace {

using Clock = std::chrono::steady_clock;

// While connections are hot the worker does not sleep, but it still looks
// at the descriptors of the cold ones (a peer's ring) this often: how long a
// message on a cold connection waits behind the hot ones, at most one turn
// more. Not on every round: a round of a hot connection is a microsecond
// or two, and a system call each would double it.
constexpr auto kEventsEvery = std::chrono::microseconds(20);
constexpr int kMaxEvents = 64;

thread_local bool tl_on_worker = false;
thread_local const void* tl_worker = nullptr;  // the Worker this thread is
thread_local const void* tl_turn = nullptr;  // the entry whose turn runs on this thread

std::atomic<uint64_t> g_next_entry{1};  // 0 is a worker's own eventfd in its epoll set

}  // namespace

class ProgressPool::Entry {
 public:
  Entry(uint64_t id, std::shared_ptr<Worker> worker, Client* client, int fd)
      : id(id), worker(std::move(worker)), client(client), fd(fd) {}

  const uint64_t id;
  const std::shared_ptr<Worker> worker;
  Client* const client;
  const int fd;
  std::atomic<bool> kicked{false};  // in the worker's kicked list, or about to be
  // Under the worker's mu (the analysis cannot name another object's lock).
  bool removed = false;
  bool busy = false;  // its turn runs
  // The worker thread's alone.
  bool armed = false;    // its channel asks the peer to ring
  bool woken = false;    // the control stream was readable
  bool hung_up = false;  // the control stream ended: told in the next turn
  bool listed = false;   // in this round's list
  bool waiting = false;  // in the retry list
};

struct ProgressPool::Worker {
  Worker(std::string name, platform::CpuList cpus, uint64_t engine_id)
      : name(std::move(name)), cpus(std::move(cpus)), engine_id(engine_id) {}
  ~Worker() {
    if (epfd >= 0) ::close(epfd);
    if (wakefd >= 0) ::close(wakefd);
  }

  Status open() {
    epfd = ::epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) return platform::errno_status(Code::kResourceExhausted, "epoll_create1 for " + name);
    wakefd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wakefd < 0) return platform::errno_status(Code::kResourceExhausted, "eventfd for " + name);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    if (::epoll_ctl(epfd, EPOLL_CTL_ADD, wakefd, &ev) != 0) {
      return platform::errno_status(Code::kResourceExhausted, "epoll_ctl for " + name);
    }
    return Status();
  }

  const std::string name;
  const platform::CpuList cpus;
  const uint64_t engine_id;
  int epfd = -1;
  int wakefd = -1;
  std::thread thread;
  platform::Mutex mu;
  std::condition_variable turn_cv;  // a turn ended
  std::unordered_map<uint64_t, std::shared_ptr<Entry>> entries GUARDED_BY(mu);
  std::vector<std::shared_ptr<Entry>> kicked GUARDED_BY(mu);
  std::atomic<bool> any_kicked{false};  // kicked is not empty: the worker takes mu only then
  bool sleeping GUARDED_BY(mu) = false;  // in epoll_wait without a timeout of 0: a kick writes wakefd
  bool end GUARDED_BY(mu) = false;
};

bool ProgressPool::on_worker() { return tl_on_worker; }

bool ProgressPool::serves_here(const Entry& entry) {
  return tl_worker == entry.worker.get() && tl_turn != &entry;
}

ProgressPool::ProgressPool(size_t workers, std::string name, platform::CpuList cpus, uint64_t engine_id)
    : size_(std::max<size_t>(workers, 1)),
      name_(std::move(name)),
      cpus_(cpus.empty() ? platform::pin_current_thread({}) : std::move(cpus)),
      engine_id_(engine_id) {}

ProgressPool::~ProgressPool() {
  std::vector<std::shared_ptr<Worker>> workers;
  {
    platform::MutexLock lock(mu_);
    workers.swap(workers_);
  }
  for (auto& w : workers) {
    {
      platform::MutexLock lock(w->mu);
      w->end = true;
    }
    uint64_t one = 1;
    (void)!::write(w->wakefd, &one, sizeof(one));
    // The last owner of the pool let go on its worker (an application's
    // callback inside a turn dropped its engine's last connection): that
    // worker ends by itself, holding its state.
    if (w->thread.get_id() == std::this_thread::get_id()) {
      w->thread.detach();
    } else {
      w->thread.join();
    }
  }
}

Status ProgressPool::add(Client* client, int fd, std::shared_ptr<Entry>& entry) {
  std::shared_ptr<Worker> w;
  {
    platform::MutexLock lock(mu_);
    while (workers_.size() < size_) {
      size_t index = workers_.size();
      auto worker = std::make_shared<Worker>(name_ + "-" + std::to_string(index), cpus_, engine_id_);
      Status opened = worker->open();
      Result<std::thread> t = opened.ok() ? platform::try_start_thread(worker->name, [worker, index] {
        worker_loop(worker, index);
      })
                                          : Result<std::thread>(opened);
      if (!t.ok()) {
        // Fewer workers serve all connections; none fails this one (and
        // the next connection asks again).
        if (workers_.empty()) {
          entry.reset();
          return t.status().with_context("no local progress worker runs");
        }
        FERRY_ENGINE_LOG(kWarn, "local", engine_id_, "%s; %zu local progress workers serve every connection for now",
                         t.status().to_string().c_str(), workers_.size());
        break;
      }
      worker->thread = std::move(t).value();
      workers_.push_back(std::move(worker));
    }
    w = workers_[next_++ % workers_.size()];
  }
  entry = std::make_shared<Entry>(g_next_entry.fetch_add(1), w, client, fd);
  Entry& e = *entry;
  {
    platform::MutexLock lock(w->mu);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = e.id;
    if (::epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      entry.reset();
      return platform::errno_status(Code::kResourceExhausted, "epoll_ctl for a local connection's control stream");
    }
    w->entries.emplace(e.id, entry);
  }
  kick(e);  // its first turn arms its channel
  return Status();
}

void ProgressPool::kick(Entry& e) {
  if (e.kicked.exchange(true, std::memory_order_acq_rel)) return;
  Worker& w = *e.worker;
  bool wake = false;
  {
    platform::MutexLock lock(w.mu);
    auto it = w.entries.find(e.id);
    if (it == w.entries.end()) return;  // removed
    w.kicked.push_back(it->second);
    w.any_kicked.store(true, std::memory_order_release);
    wake = std::exchange(w.sleeping, false);
  }
  if (wake) {
    uint64_t one = 1;
    (void)!::write(w.wakefd, &one, sizeof(one));
  }
}

bool ProgressPool::remove(Entry& e) {
  Worker& w = *e.worker;
  platform::UniqueLock lock(w.mu);
  if (!e.removed) {
    e.removed = true;
    ::epoll_ctl(w.epfd, EPOLL_CTL_DEL, e.fd, nullptr);
    w.entries.erase(e.id);
  }
  if (tl_turn == &e) return false;
  w.turn_cv.wait(lock.native(), [&] { return !e.busy; });
  return true;
}

void ProgressPool::worker_loop(const std::shared_ptr<Worker>& wp, size_t index) {
  tl_on_worker = true;
  tl_worker = wp.get();
  Worker& w = *wp;
  platform::CpuList actual = platform::pin_current_thread(w.cpus);
  bool pinned = w.cpus.empty() || actual == w.cpus;
  FERRY_ENGINE_LOG(kInfo, "local", w.engine_id, "progress worker %s: expected %s actual %s %s", w.name.c_str(),
                   w.cpus.empty() ? "any" : platform::format_cpu_list(w.cpus).c_str(),
                   platform::format_cpu_list(actual).c_str(), pinned ? "ok" : "MISMATCH");
  if (!pinned) {
    FERRY_ENGINE_LOG(kWarn, "local", w.engine_id, "progress worker %s could not be pinned to %s (runs on %s)",
                     w.name.c_str(), platform::format_cpu_list(w.cpus).c_str(),
                     platform::format_cpu_list(actual).c_str());
  }
  (void)index;
  std::vector<std::shared_ptr<Entry>> hot, retry, round;
  epoll_event events[kMaxEvents];
  auto last_events = Clock::now();
  bool did_work = false;
  for (;;) {
    round.clear();
    bool sleep = hot.empty();
    if (sleep || w.any_kicked.load(std::memory_order_acquire)) {
      std::vector<std::shared_ptr<Entry>> left;  // let go after the lock
      platform::MutexLock lock(w.mu);
      if (w.end) {
        // An entry kicked, then removed before its turn, is still listed and
        // holds this worker (Entry::worker): dropped here, or the two would
        // keep each other alive once the pool ended.
        left.swap(w.kicked);
        return;
      }
      for (auto& e : w.kicked) round.push_back(std::move(e));
      w.kicked.clear();
      w.any_kicked.store(false, std::memory_order_relaxed);
      if (!round.empty()) sleep = false;
      w.sleeping = sleep;
    }
    int n = 0;
    auto now = Clock::now();
    if (sleep || now - last_events >= kEventsEvery) {
      // Asleep, the worker waits for a ring, a kick, or (connections waiting
      // for room in their peer's ring) the retry; nothing else wakes it.
      int timeout = sleep ? (retry.empty() ? -1 : kOutboxRetryMs) : 0;
      n = ::epoll_wait(w.epfd, events, kMaxEvents, timeout);
      last_events = Clock::now();
      if (sleep) {
        platform::MutexLock lock(w.mu);
        w.sleeping = false;
        if (w.end) return;
      }
      if (sleep || n == 0) {
        for (auto& e : retry) {
          e->waiting = false;
          round.push_back(std::move(e));
        }
        retry.clear();
      }
    }
    for (int i = 0; i < n; ++i) {
      // A copy: epoll_event is packed on x86-64, so its member is not
      // aligned for the reference find() takes.
      const uint64_t id = events[i].data.u64;
      if (id == 0) {
        uint64_t v;
        (void)!::read(w.wakefd, &v, sizeof(v));
        continue;
      }
      platform::MutexLock lock(w.mu);
      auto it = w.entries.find(id);
      if (it == w.entries.end()) continue;  // removed since
      const std::shared_ptr<Entry>& e = it->second;
      e->woken = true;
      if (events[i].events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
        // Ended for good: told once, and no longer watched (it would be
        // readable on every round).
        e->hung_up = true;
        ::epoll_ctl(w.epfd, EPOLL_CTL_DEL, e->fd, nullptr);
      }
      round.push_back(e);
    }
    for (auto& e : hot) round.push_back(std::move(e));
    hot.clear();

    did_work = false;
    for (auto& e : round) {
      if (e->listed) continue;
      e->listed = true;
    }
    for (auto& e : round) {
      if (!e->listed) continue;  // a duplicate, already taken
      e->listed = false;
      {
        platform::MutexLock lock(w.mu);
        if (e->removed) continue;
        e->busy = true;
      }
      // No owner is held: the connection's destructor closes it first, and
      // its close() waits in remove() for this turn to end (as it joined the
      // connection's own progress thread before). Holding one for the turn
      // made this thread let go of the last one at times, and destroy the
      // connection and even its engine here.
      Client::Turn t;
      e->kicked.store(false, std::memory_order_release);  // a kick from now on asks again
      tl_turn = e.get();
      if (e->armed) {
        e->client->disarm();
        e->armed = false;
      }
      t = e->client->turn(std::exchange(e->woken, false), std::exchange(e->hung_up, false));
      if (!t.hot) {
        if (e->client->arm()) {
          e->armed = true;
        } else {
          t.hot = true;  // a message came as it armed
        }
      }
      tl_turn = nullptr;
      {
        platform::MutexLock lock(w.mu);
        e->busy = false;
      }
      w.turn_cv.notify_all();
      did_work |= t.did;
      if (t.hot) {
        hot.push_back(e);
      } else if (t.waiting_for_room && !e->waiting) {
        e->waiting = true;
        retry.push_back(e);
      }
    }
    // Spinning on hot connections: yield when this round found nothing, so
    // that the threads the worker waits for (the peer's, copy helpers) run
    // when CPUs are scarce. Measured on the two-GPU host with the progress
    // thread per connection: polling without it slowed large copies of both
    // processes by 10%.
    if (!hot.empty() && !did_work) std::this_thread::yield();
  }
}

}  // namespace ferry::local
