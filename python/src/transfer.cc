// Interruptible waits, the graveyard of dropped transfers, and Transfer.
#include "transfer.h"

#include <algorithm>
#include <cmath>

#include "errors.h"

namespace ferry::py {
namespace {

struct Buried {
  Transfer t;
  std::vector<pyb::object> keep;
};

// Leaked on purpose: py::objects must not be destroyed after the interpreter.
std::vector<Buried>& graveyard() {
  static auto* g = new std::vector<Buried>();
  return *g;
}

}  // namespace

Deadline deadline_from(std::optional<double> timeout_s) {
  if (!timeout_s) return kNoDeadline;
  if (std::isnan(*timeout_s) || *timeout_s < 0) throw pyb::value_error("timeout must be None or >= 0 seconds");
  if (*timeout_s > 1e9) return kNoDeadline;  // ~31 years: the same thing, without overflow
  return after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*timeout_s)));
}

Waited wait_slices(Deadline deadline, const std::function<bool(Deadline)>& slice) {
  for (;;) {
    Deadline until = std::min(deadline, Clock::now() + kSlice);
    bool done;
    {
      pyb::gil_scoped_release nogil;
      done = slice(until);
    }
    if (done) return Waited::kDone;
    if (Clock::now() >= deadline) return Waited::kDeadline;
    if (PyErr_CheckSignals() != 0) return Waited::kInterrupted;
  }
}

bool wait_in_slices(Deadline deadline, const std::function<bool(Deadline)>& slice) {
  Waited w = wait_slices(deadline, slice);
  if (w == Waited::kInterrupted) throw pyb::error_already_set();
  return w == Waited::kDone;
}

void bury(Transfer t, std::vector<pyb::object> keep) {
  sweep_graveyard();
  if (t.test()) return;  // `keep` goes now
  graveyard().push_back(Buried{std::move(t), std::move(keep)});
}

void sweep_graveyard() {
  auto& g = graveyard();
  g.erase(std::remove_if(g.begin(), g.end(), [](const Buried& b) { return b.t.test(); }), g.end());
}

size_t graveyard_size() {
  sweep_graveyard();
  return graveyard().size();
}

Status wait_transfer(const Transfer& t, Deadline deadline, PastDeadline rule, std::vector<pyb::object>& keep) {
  // The policy is the C++ one; only the blocking is Python's: in slices, with
  // the GIL released, stopping (with the Python error set) on a signal.
  bool interrupted = false;
  Status s = t.wait_or_cancel(deadline, rule, [&](Deadline until) {
    Waited w = wait_slices(until, [&](Deadline d) {
      (void)t.wait(d);
      return t.test();
    });
    interrupted = w == Waited::kInterrupted;
    return !interrupted;
  });
  if (interrupted) {
    pyb::error_already_set raised;  // taken before bury() may release objects
    if (!t.test()) bury(t, std::move(keep));
    throw raised;
  }
  if (!t.test()) bury(t, std::move(keep));
  return s;
}

PyTransfer::~PyTransfer() {
  if (!keep_.empty() && !t_.test()) bury(t_, std::move(keep_));
}

void PyTransfer::release_if_done() {
  if (!keep_.empty() && t_.test()) keep_.clear();
}

bool PyTransfer::test() {
  bool done = t_.test();
  if (done) release_if_done();
  return done;
}

size_t PyTransfer::wait(const Timeout& timeout) {
  Deadline deadline = timeout.deadline;
  (void)wait_in_slices(deadline, [&](Deadline d) {
    (void)t_.wait(d);
    return t_.test();
  });
  // Finished or past the deadline: Transfer::wait answers at once, as in C++.
  Status s = t_.wait(deadline);
  release_if_done();
  throw_if_error(s);
  return t_.bytes();
}

bool PyTransfer::cancel() {
  bool stopped = false;
  {
    // A write's cancel waits until none of it lands any more.
    pyb::gil_scoped_release unlocked;
    stopped = t_.cancel();
  }
  release_if_done();
  return stopped;
}

void PyTransfer::wake_when_done(std::shared_ptr<Waker> waker) {
  t_.on_finish([waker](const Status&) { waker->signal(); });
}

void bind_transfer(pyb::module_& m) {
  pyb::class_<PyTransfer>(m, "Transfer",
                          "Handle of one asynchronous operation. Finished when its data is in place on both ends, "
                          "or failed; never a silent partial result. Keeps the buffers it uses alive until then.")
      .def("test", &PyTransfer::test, "Non-blocking: True once the operation finished (successfully or not).")
      .def("wait", &PyTransfer::wait, pyb::arg("timeout") = pyb::none(),
           "Blocks (GIL released, Ctrl-C raises KeyboardInterrupt) until the operation finishes; returns the bytes "
           "moved (for a receive: the message size). Raises the FerryError of a failure, or DeadlineExceeded when "
           "`timeout` seconds pass first (the operation keeps running).")
      .def("status", &PyTransfer::status,
           "The final ferry.Status once finished; before that, DEADLINE_EXCEEDED saying it is still running.")
      .def_property_readonly("bytes", &PyTransfer::bytes, "Bytes moved; for a receive, the message size.")
      .def_property_readonly("id", &PyTransfer::id, "Id of the operation, unique within its connection.")
      .def_property_readonly("done", &PyTransfer::test, "Same as test().")
      .def("cancel", &PyTransfer::cancel,
           "Stops an operation that has not started moving data (an unmatched receive, a send not yet accepted), or "
           "a write (write, writev, write_blocks) while it moves data: it fails with Cancelled and True is "
           "returned. A write's cancel blocks (GIL released) until none of its bytes lands in the peer's memory "
           "any more, up to the peer_timeout option; the peer's Connection.wait_note then gives its notification "
           "with delivered False, so both sides may reuse the blocks. Otherwise False; the operation runs to its "
           "end.")
      .def("_wake_when_done", &PyTransfer::wake_when_done, pyb::arg("waker"),
           "Signals the ferry._Waker once the operation has finished (ferry.aio).")
      .def("__repr__", [](PyTransfer& t) {
        return text_to_python("<ferry.Transfer id=" + std::to_string(t.id()) +
                              (t.test() ? " " + t.status().to_string() : " running") + ">");
      });
  m.def("_graveyard_size", &graveyard_size, "Dropped transfers still running whose buffers are kept alive.");
}

}  // namespace ferry::py
