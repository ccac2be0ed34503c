// TransferState and the public Transfer handle.
#include "core/transfer_state.h"

#include <algorithm>
#include <string>
#include <thread>

namespace ferry {

bool TransferState::finish_part(const Status& s) {
  {
    platform::MutexLock lock(mu_);
    if (done_.load(std::memory_order_relaxed)) return false;
    if (!s.ok() && status_.ok()) status_ = s;
    if (--parts_left_ > 0) return false;
    canceller_ = nullptr;
    stopper_ = nullptr;
    count();
    done_.store(true, std::memory_order_release);
    cv_.notify_all();
  }
  run_finish_hooks();
  return true;
}

bool TransferState::finish(const Status& s) {
  {
    platform::MutexLock lock(mu_);
    if (done_.load(std::memory_order_relaxed)) return false;
    if (status_.ok()) status_ = s;
    parts_left_ = 0;
    canceller_ = nullptr;
    stopper_ = nullptr;
    count();
    done_.store(true, std::memory_order_release);
    cv_.notify_all();
  }
  run_finish_hooks();
  return true;
}

void TransferState::on_finish(std::function<void(const Status&)> fn) {
  {
    platform::MutexLock lock(mu_);
    if (!done_.load(std::memory_order_relaxed)) {
      finish_hooks_.push_back(std::move(fn));
      return;
    }
  }
  fn(status());
}

void TransferState::run_finish_hooks() {
  std::vector<std::function<void(const Status&)>> hooks;
  Status s;
  {
    platform::MutexLock lock(mu_);
    hooks.swap(finish_hooks_);
    s = status_;
  }
  for (auto& fn : hooks) fn(s);
}

void TransferState::count() {
  // Before done_ is set: a caller whose wait() returned finds it counted.
  if (meter_ == nullptr) return;
  meter_->record(op_, transport_, bytes(),
                 std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - posted_).count(), status_.code(),
                 peer_meter_.get());
}

Status TransferState::wait(Deadline deadline) {
  // Small transfers finish within tens of microseconds; sleeping on the
  // condition variable adds a scheduler wake-up (10-30 us) to every one of
  // them, and after a sleep of milliseconds an idle core wakes slower still
  // (see Options::wait_spin). So poll first, yielding the CPU to the ferry
  // threads that are finishing the transfer, before going to sleep.
  if (!done_.load(std::memory_order_acquire)) {
    auto spin_until = std::min(deadline, Clock::now() + spin_);
    while (!done_.load(std::memory_order_acquire) && Clock::now() < spin_until) std::this_thread::yield();
  }
  platform::UniqueLock lock(mu_);
  if (deadline == kNoDeadline) {
    cv_.wait(lock.native(), [&] { return done_.load(std::memory_order_relaxed); });
  } else if (!cv_.wait_until(lock.native(), deadline, [&] { return done_.load(std::memory_order_relaxed); })) {
    return Status(Code::kDeadlineExceeded, "transfer " + std::to_string(id_) + " still running at its deadline");
  }
  return status_;
}

Status TransferState::status() const {
  platform::MutexLock lock(mu_);
  if (!done_.load(std::memory_order_relaxed)) {
    return Status(Code::kDeadlineExceeded, "transfer " + std::to_string(id_) + " is still running");
  }
  return status_;
}

void TransferState::set_canceller(std::function<bool()> fn) {
  platform::MutexLock lock(mu_);
  if (!done_.load(std::memory_order_relaxed)) canceller_ = std::move(fn);
}

void TransferState::set_stopper(std::function<bool()> fn) {
  platform::MutexLock lock(mu_);
  if (!done_.load(std::memory_order_relaxed)) stopper_ = std::move(fn);
}

bool TransferState::cancel(bool moving_too) {
  std::function<bool()> withdraw, stop;
  {
    platform::MutexLock lock(mu_);
    withdraw = canceller_;
    if (moving_too) stop = stopper_;
  }
  if (withdraw && withdraw()) return true;
  return stop && !done() && stop();
}

bool TransferState::stop() {
  std::function<bool()> stopper;
  {
    platform::MutexLock lock(mu_);
    stopper = stopper_;
  }
  return stopper && !done() && stopper();
}

// ---- Transfer -----------------------------------------------------------

bool Transfer::test() const { return state_ == nullptr || state_->done(); }

Status Transfer::wait(Deadline deadline) const {
  if (state_ == nullptr) return Status(Code::kInvalidArgument, "wait on an empty Transfer handle");
  return state_->wait(deadline);
}

Status Transfer::wait_or_cancel(Deadline deadline, PastDeadline rule,
                                const std::function<bool(Deadline)>& block) const {
  if (state_ == nullptr) return Status(Code::kInvalidArgument, "wait on an empty Transfer handle");
  auto wait_until = [&](Deadline until) {
    if (block) return block(until);
    (void)state_->wait(until);
    return true;
  };
  auto what = [&] { return "transfer " + std::to_string(state_->id()); };
  auto stopped = [&] {
    bool cancelled = rule == PastDeadline::kCancelOrFinish && state_->cancel(/*moving_too=*/false);
    return Status(Code::kCancelled,
                  "the wait on " + what() + " was interrupted" + (cancelled || test() ? "" : "; it goes on"));
  };
  if (!wait_until(deadline)) return stopped();
  if (test()) return status();
  // A send may wait on the peer application posting a receive, so it may not
  // hold the caller past the deadline; nor is it withdrawn, as the peer may
  // be receiving it.
  if (rule == PastDeadline::kLeave) {
    // Said so that nobody retries: a second send would deliver it twice.
    return Status(Code::kDeadlineExceeded, what() +
                                               " still running at its deadline; it goes on and the message will still "
                                               "be delivered (it was not withdrawn): do not send it again");
  }
  if (state_->cancel(/*moving_too=*/false)) {
    return Status(Code::kDeadlineExceeded, what() + " had not started moving data by its deadline and was cancelled");
  }
  // A receive whose message is landing gets a grace to finish: its message
  // is returned rather than dropped (it is stopped at the end of it).
  if (Clock::duration grace = state_->past_deadline_grace(); grace > Clock::duration::zero()) {
    if (!wait_until(Clock::now() + grace)) return stopped();
    if (test()) return status();
  }
  // Moving data: a write, or a receive or read landing over TCP, is stopped,
  // which returns once none of it lands any more (a chunk a peer stalls
  // mid-way is cut off within peer_timeout). A peer may not stretch the
  // caller's deadline by answering slowly.
  if (state_->stop()) {
    return Status(Code::kDeadlineExceeded,
                  what() + " was moving data at its deadline and was stopped; none of it lands any more");
  }
  // One that cannot be stopped (it ended meanwhile, or its transport lands
  // nothing a peer can stall) runs to its end: returning before then would
  // leave bytes landing in a buffer the caller believes free.
  if (!wait_until(kNoDeadline)) return stopped();
  return status();
}

Status Transfer::status() const {
  if (state_ == nullptr) return Status(Code::kInvalidArgument, "status of an empty Transfer handle");
  return state_->status();
}

size_t Transfer::bytes() const { return state_ == nullptr ? 0 : state_->bytes(); }

bool Transfer::cancel() const { return state_ != nullptr && state_->cancel(/*moving_too=*/true); }
void Transfer::on_finish(std::function<void(const Status&)> fn) const {
  if (state_ == nullptr) {
    fn(status());
    return;
  }
  state_->on_finish(std::move(fn));
}

uint64_t Transfer::id() const { return state_ == nullptr ? 0 : state_->id(); }

}  // namespace ferry
