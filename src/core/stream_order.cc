// Holding transfers until the CUDA streams they follow reach them.
#include "core/stream_order.h"

#include <algorithm>
#include <atomic>

#include "platform/thread.h"

namespace ferry::core {

// One held operation. Lock order: OrderedPosts::mu_, then mu.
struct OrderedPosts::Held {
  enum class Phase { kHeld, kPosting, kGone };

  std::shared_ptr<TransferState> outer;
  // Streams not reached yet, plus one while they are being armed.
  std::atomic<int> waits_left{0};
  platform::Mutex mu;
  Phase phase GUARDED_BY(mu) = Phase::kHeld;
  std::function<Transfer()> post GUARDED_BY(mu);
  Status refused GUARDED_BY(mu);  // a stream the driver refused
  Transfer inner GUARDED_BY(mu);  // once posted
  std::condition_variable posted;  // phase left kPosting, or inner was set
};

// ---- StreamGate -------------------------------------------------------------------

StreamGate::~StreamGate() { stop(); }

void StreamGate::ready(std::weak_ptr<OrderedPosts> queue) {
  {
    platform::MutexLock lock(mu_);
    if (stopping_) return;
    ready_.push_back(std::move(queue));
  }
  cv_.notify_one();
}

Status StreamGate::start() {
  platform::MutexLock lock(mu_);
  if (stopping_) return Status(Code::kCancelled, "the engine is closing");
  if (started_) return Status();
  // Woken by the driver's callbacks; sleeps otherwise.
  Result<std::thread> t = platform::try_start_thread("ferry-stream-ord", [this] { run(); });
  if (!t.ok()) return t.status().with_context("ordering a transfer after a CUDA stream");
  thread_ = std::move(t).value();
  started_ = true;
  return Status();
}

void StreamGate::stop() {
  {
    platform::MutexLock lock(mu_);
    stopping_ = true;
    ready_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void StreamGate::run() {
  for (;;) {
    std::weak_ptr<OrderedPosts> next;
    {
      platform::UniqueLock lock(mu_);
      cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      next = std::move(ready_.front());
      ready_.pop_front();
    }
    if (auto queue = next.lock()) queue->drain();
  }
}

// ---- OrderedPosts -------------------------------------------------------------------

bool OrderedPosts::posts_now(std::span<const CudaStreamRef> streams) {
  {
    platform::MutexLock lock(mu_);
    if (!held_.empty()) return false;
  }
  for (const CudaStreamRef& s : streams) {
    Result<bool> idle = gate_->waits().idle(s);
    if (!idle.ok() || !idle.value()) return false;
  }
  return true;
}

size_t OrderedPosts::held() {
  platform::MutexLock lock(mu_);
  return held_.size();
}

Transfer OrderedPosts::post_later(std::span<const CudaStreamRef> streams, std::shared_ptr<TransferState> outer,
                                  std::function<Transfer()> post) {
  if (Status s = gate_->start(); !s.ok()) {
    outer->finish(s);
    return Transfer(outer);
  }
  auto op = std::make_shared<Held>();
  op->outer = outer;
  op->waits_left.store(static_cast<int>(streams.size()) + 1, std::memory_order_relaxed);
  {
    platform::MutexLock lock(op->mu);
    op->post = std::move(post);
  }
  {
    platform::MutexLock lock(mu_);
    held_.push_back(op);
  }
  std::weak_ptr<OrderedPosts> self = weak_from_this();
  // Held: withdrawn. Being posted: the posted operation's, once it has one.
  // They keep the record (and it `outer`) until `outer` finishes or the
  // operation is posted, which replaces them.
  outer->set_canceller([self, held = op]() -> bool {
    auto queue = self.lock();
    if (!queue) return false;
    if (queue->withdraw(held)) return true;
    auto inner = posted_state(*held);
    return inner && inner->cancel(/*moving_too=*/false);
  });
  outer->set_stopper([self, held = op]() -> bool {
    auto queue = self.lock();
    if (!queue) return false;
    if (queue->withdraw(held)) return true;
    auto inner = posted_state(*held);
    return inner && inner->stop();
  });
  std::shared_ptr<StreamGate> gate = gate_;
  auto reached = [op, self, gate] {
    if (op->waits_left.fetch_sub(1, std::memory_order_acq_rel) == 1) gate->ready(self);
  };
  for (const CudaStreamRef& s : streams) {
    Status armed = gate_->waits().when_reached(s, reached);
    if (!armed.ok()) {
      {
        platform::MutexLock lock(op->mu);
        if (op->refused.ok()) op->refused = armed;
      }
      op->waits_left.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  reached();  // arming is over
  return Transfer(outer);
}

std::shared_ptr<TransferState> OrderedPosts::posted_state(Held& held) {
  // An operation being posted has no handle for a moment: a cancel waits
  // for it rather than miss it (a receive not withdrawn would be waited for
  // without end).
  platform::UniqueLock lock(held.mu);
  held.posted.wait(lock.native(),
                   [&]() REQUIRES(held.mu) { return held.phase != Held::Phase::kPosting || held.inner.state(); });
  return held.inner.state();
}

bool OrderedPosts::withdraw(const std::shared_ptr<Held>& op) {
  bool was_head = false;
  {
    platform::MutexLock lock(mu_);
    {
      platform::MutexLock held_lock(op->mu);
      if (op->phase != Held::Phase::kHeld) return false;
      op->phase = Held::Phase::kGone;
      op->post = nullptr;
    }
    auto it = std::find(held_.begin(), held_.end(), op);
    was_head = it == held_.begin();
    if (it != held_.end()) held_.erase(it);
  }
  bool finished = op->outer->finish(
      Status(Code::kCancelled, "cancelled while it waited for the work queued before it on its CUDA stream"));
  // What was held behind it may be ready now.
  if (was_head) gate_->ready(weak_from_this());
  return finished;
}

void OrderedPosts::fail_all(const Status& why) {
  std::vector<std::shared_ptr<Held>> dropped;
  {
    platform::MutexLock lock(mu_);
    for (auto it = held_.begin(); it != held_.end();) {
      platform::MutexLock held_lock((*it)->mu);
      if ((*it)->phase != Held::Phase::kHeld) {
        ++it;
        continue;
      }
      (*it)->phase = Held::Phase::kGone;
      (*it)->post = nullptr;
      dropped.push_back(*it);
      it = held_.erase(it);
    }
  }
  for (auto& op : dropped) op->outer->finish(why);
}

void OrderedPosts::chain(const std::shared_ptr<TransferState>& outer, const Transfer& inner) {
  const std::shared_ptr<TransferState>& in = inner.state();
  if (!in) {
    outer->finish(Status(Code::kInternal, "a held transfer was posted without a handle"));
    return;
  }
  outer->set_past_deadline_grace(in->past_deadline_grace());
  std::weak_ptr<TransferState> weak_in = in;
  in->on_finish([outer, weak_in](const Status& s) {
    if (auto i = weak_in.lock()) outer->set_bytes(i->bytes());
    outer->finish(s);
  });
}

void OrderedPosts::drain() {
  for (;;) {
    std::shared_ptr<Held> op;
    std::function<Transfer()> post;
    Status refused;
    {
      platform::MutexLock lock(mu_);
      if (held_.empty()) return;
      op = held_.front();
      if (op->waits_left.load(std::memory_order_acquire) != 0) return;
      platform::MutexLock held_lock(op->mu);
      op->phase = Held::Phase::kPosting;
      post = std::move(op->post);
      op->post = nullptr;
      refused = op->refused;
    }
    // Posting may take locks of the connection and call CUDA: no lock here.
    if (refused.ok()) {
      Transfer inner = post();
      {
        platform::MutexLock held_lock(op->mu);
        op->inner = inner;
      }
      op->posted.notify_all();
      chain(op->outer, inner);
      // From now on a cancel goes straight to the posted operation, and the
      // handle no longer keeps the held record (nor, through it, itself).
      std::weak_ptr<TransferState> weak_in = inner.state();
      op->outer->set_canceller([weak_in] {
        auto in = weak_in.lock();
        return in && in->cancel(/*moving_too=*/false);
      });
      op->outer->set_stopper([weak_in] {
        auto in = weak_in.lock();
        return in && in->stop();
      });
    } else {
      op->outer->finish(refused);
    }
    {
      platform::MutexLock lock(mu_);
      held_.pop_front();  // still op: only drain() removes an operation being posted
      platform::MutexLock held_lock(op->mu);
      op->phase = Held::Phase::kGone;
    }
    op->posted.notify_all();
  }
}

}  // namespace ferry::core
