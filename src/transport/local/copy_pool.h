// CopyPool: the threads that help with large host copies, one fixed set per
// engine shared by all its local connections (docs/architecture.md, "Threads": threads grow
// with cores, never with peers). It used to be four helpers per connection.
//
// A copy is a Job cut into pieces. A helper takes one piece at a time, from
// the queued job that fewest helpers copy (of those that may use one more),
// and then puts that job at the back of the queue: pieces of different
// connections' copies take turns, so a small copy queued behind a 1 GiB one
// waits for the first helper to finish its piece (a few milliseconds,
// LocalCopier::kCrossPiece), not for the whole copy.
//
// The helpers start with the first copy that wants them, not with the
// engine, and each ends after kIdle without a piece to copy: an engine that
// moves no large host copy, or has not for a while (one of a thousand in a
// process, say), holds none. One the kernel refuses costs speed and never a
// copy (the caller copies what no helper takes), and the pool asks the
// kernel again at most once per kRetry. Each helper is named ("<name>-<i>": ferry-lx-0 in an engine),
// pinned to the CPUs given, and logs its expected and actual CPUs once.
//
// Thread-safe. A job's bookkeeping below is the pool's, under its lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "platform/cpu_binding.h"
#include "platform/mutex.h"

namespace ferry::local {

// Names and CPUs of a CopyPool's helper threads.
struct CopyHelpers {
  std::string name = "ferry-xcopy";  // helper i is "<name>-<i>"; the kernel keeps 15 characters
  platform::CpuList cpus;            // where they run; empty: where the thread constructing the pool may
  uint64_t engine_id = 0;            // the engine their log lines are about (0: none)
};

class CopyPool {
 public:
  // One copy, cut into pieces by its owner.
  class Job {
   public:
    virtual ~Job() = default;
    // Copies the next piece nobody took yet. False once no piece is left to
    // take (a failure leaves none): no helper asks again.
    virtual bool run_piece() = 0;
    // An offloaded job's end: runs once, on the helper that found it with
    // no piece left and no helper copying it, outside the pool's lock.
    virtual void ended() {}

    size_t wanted = 1;       // helpers that may copy it at once (set before add())
    bool offloaded = false;  // no caller copies or waits for it: the pool ends it
    // The pool's, under its lock.
    size_t working = 0;      // helpers copying a piece of it now
    bool queued = false;     // in the queue: a helper may take a piece
    bool ended_run = false;  // ended() ran (offloaded jobs)
  };

  // How many helpers an engine gets: as many as the CPUs this process may
  // use, at most kMaxHelpers, at least 2 (a copy shared by the caller and
  // one helper already runs at twice one thread's speed; see cross_memory.h).
  static size_t default_size();
  static constexpr size_t kMaxHelpers = 4;
  // After the kernel refused a helper, how long the pool goes without it
  // before it asks again.
  static constexpr std::chrono::seconds kRetry{1};
  // How long a helper waits for a piece before it ends. Starting it again
  // costs tens of microseconds; a copy that wants helpers takes milliseconds.
  static constexpr std::chrono::milliseconds kIdle{1000};

  // `idle`: how long a helper waits for a piece before it ends.
  CopyPool(size_t helpers, CopyHelpers config, std::chrono::milliseconds idle = kIdle);
  // Ends and joins the helpers (one running this destructor itself is left
  // to end on its own). REQUIRES: no job queued.
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  // Starts the helpers that do not run (not again within kRetry of a
  // refusal) and returns how many run. Blocks for thread starts only.
  size_t ensure_started();
  size_t size() const { return size_; }

  // Queues `job` for the helpers, starting those that do not run, and
  // returns how many run; 0: none does, and `job` is not queued (the caller
  // copies it alone). For a job that is not offloaded, the caller copies
  // pieces too and then calls withdraw(); an offloaded job is the pool's
  // until ended(). The job must outlive both.
  size_t add(Job* job);
  // Takes `job` out of the queue and waits until no helper copies a piece
  // of it. Blocks: a piece at most.
  void withdraw(Job* job);

 private:
  struct State;
  static void helper_loop(const std::shared_ptr<State>& s, size_t index);
  // ensure_started() under the pool's lock.
  size_t start_locked();

  const size_t size_;
  // Held by the helpers too: a helper whose job's end lets go of the last
  // owner of this pool runs on after the pool is gone.
  std::shared_ptr<State> s_;
};

}  // namespace ferry::local
