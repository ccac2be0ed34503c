// Deadlines from Python timeouts, waits that a Ctrl-C can interrupt, and the
// Python Transfer handle.
//
// Every blocking wait runs in slices of kSlice with the GIL released; between
// slices it takes the GIL back and runs PyErr_CheckSignals, so a signal
// handler that raises (SIGINT -> KeyboardInterrupt) ends the wait promptly.
// Memory an unfinished transfer still uses is never released early: its
// owners move to a graveyard that keeps them until the transfer finishes.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "arguments.h"
#include "waker.h"
#include "ferry/transfer.h"

namespace ferry::py {

namespace pyb = pybind11;

inline constexpr std::chrono::milliseconds kSlice{50};

// None -> no deadline; seconds (>= 0) -> now + seconds. ValueError if negative.
Deadline deadline_from(std::optional<double> timeout_s);

// How a wait in slices ended.
enum class Waited { kDone, kDeadline, kInterrupted };

// Runs `slice(d)` with the GIL released for deadlines d of at most kSlice
// until it returns true (kDone) or `deadline` passes (kDeadline). Checks
// signals between slices; when a handler raises, returns kInterrupted with
// the Python error set. Called with the GIL held.
Waited wait_slices(Deadline deadline, const std::function<bool(Deadline)>& slice);

// As wait_slices, true when done, false at the deadline; an interrupt throws
// pyb::error_already_set.
bool wait_in_slices(Deadline deadline, const std::function<bool(Deadline)>& slice);

// Keeps `keep` alive until `t` finishes. GIL held.
void bury(Transfer t, std::vector<pyb::object> keep);
// Drops the graveyard entries whose transfer finished. GIL held.
void sweep_graveyard();
// Entries still waiting; for tests.
size_t graveyard_size();

// The blocking calls' wait (GIL held): Transfer::wait_or_cancel with `rule`,
// the policy of the C++ blocking calls, waiting in slices. On an interrupt
// a receive, write or read is cancelled if it can still stop, then the
// Python exception propagates. Whenever the operation is still running on return, `keep` is
// buried.
Status wait_transfer(const Transfer& t, Deadline deadline, PastDeadline rule, std::vector<pyb::object>& keep);

// The Python-side handle of one asynchronous operation. Thread-safe as far as
// the GIL makes it: every method runs with the GIL held (waits release it).
class PyTransfer {
 public:
  PyTransfer(Transfer t, std::vector<pyb::object> keep) : t_(std::move(t)), keep_(std::move(keep)) {}
  ~PyTransfer();
  PyTransfer(const PyTransfer&) = delete;
  PyTransfer& operator=(const PyTransfer&) = delete;

  bool test();
  // Waits; returns bytes moved, or raises the failure (DeadlineExceeded on the
  // deadline, with the operation still running).
  size_t wait(const Timeout& timeout);
  Status status() const { return t_.status(); }
  size_t bytes() const { return t_.bytes(); }
  bool cancel();
  uint64_t id() const { return t_.id(); }
  const Transfer& transfer() const { return t_; }
  // Signals `waker` once the operation has finished (at once if it has).
  void wake_when_done(std::shared_ptr<Waker> waker);

 private:
  void release_if_done();
  Transfer t_;
  std::vector<pyb::object> keep_;
};

void bind_transfer(pyb::module_& m);

}  // namespace ferry::py
