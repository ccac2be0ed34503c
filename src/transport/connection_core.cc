// ConnectionCore: checks, matching, notifications and the health latch,
// shared by every transport (its one-sided operations are in
// connection_core_one_sided.cc, the public Connection over it in
// connection.cc).
#include "transport/connection_core.h"

#include <algorithm>

#include "gpu/gather_kernel.h"
#include "gpu/staging_kernel.h"
#include "gpu/stream_signals.h"
#include "platform/heap.h"
#include "platform/log.h"

namespace ferry::transport {
namespace {

// What a message no receive was posted for costs on top of its bytes: the
// bookkeeping around it.
constexpr size_t kUnexpectedBytes = 128;

}  // namespace

std::shared_ptr<ConnectionCore> ConnectionCore::create(std::shared_ptr<core::EngineContext> ctx, uint64_t id,
                                                       PeerIdentity peer, const MakeTransport& make) {
  std::shared_ptr<ConnectionCore> core(new ConnectionCore(std::move(ctx), id, std::move(peer)));
  core->transport_ = make(*core);
  return core;
}

ConnectionCore::ConnectionCore(std::shared_ptr<core::EngineContext> ctx, uint64_t id, PeerIdentity peer)
    : ctx_(std::move(ctx)),
      id_(id),
      peer_(std::move(peer)),
      peer_meter_(ctx_->metrics ? ctx_->metrics->peer_meter(peer_.address) : nullptr),
      budget_(std::make_shared<core::ByteBudget>(ctx_->options.connection_memory_bytes, ctx_->memory_budget)),
      notes_(budget_.get(), &ctx_->notifications),
      ordered_(std::make_shared<core::OrderedPosts>(
          ctx_->stream_gate ? ctx_->stream_gate : std::make_shared<core::StreamGate>(platform::cuda_stream_waits()))) {}

ConnectionCore::~ConnectionCore() {
  close();
  transport_.reset();  // its threads are joined: nothing calls back any more
}

ConnectionCore::HeapReturn::~HeapReturn() {
  if (budget.peak() >= kHeapReturnBytes) platform::return_free_heap();
}

// ---- the latch -----------------------------------------------------------------

Status ConnectionCore::health() const {
  platform::MutexLock lock(health_mu_);
  return health_;
}

Status ConnectionCore::usable() const {
  if (!failed()) return Status();
  return health();
}

void ConnectionCore::fail(const Status& reason) {
  Status why = reason;
  notes_.refuse_new();  // before anyone can see failed_: no note of the peer's comes after
  {
    // The reason is in place before anyone can see failed_ set.
    platform::MutexLock lock(health_mu_);
    if (failed_.load(std::memory_order_relaxed)) return;
    // Once close() began here, whatever the peer did next is this side's
    // own closing: pending transfers end cancelled, as close() promises.
    if (closing() && why.code() != Code::kCancelled) why = Status(Code::kCancelled, where() + ": closed locally");
    health_ = why;
    failed_.store(true, std::memory_order_release);
  }
  if (why.code() == Code::kCancelled || closed_by_peer()) {
    FERRY_ENGINE_LOG(kInfo, std::string(transport_->name()).c_str(), ctx_->engine_id, "%s", why.message().c_str());
  } else {
    FERRY_ENGINE_LOG(kWarn, std::string(transport_->name()).c_str(), ctx_->engine_id, "%s", why.to_string().c_str());
  }
  transport_->failed(why);
  ordered_->fail_all(why);
  std::deque<PostedRecv> posted;
  {
    // Receives posted after this find failed_ set (new_state and recv check
    // it under mu_), so none is left behind.
    platform::MutexLock lock(mu_);
    posted.swap(posted_);
    for (const ArrivedMessage& m : unexpected_) budget_->give(held_cost(m));
    unexpected_.clear();
  }
  arrived_.notify_all();  // probes see failed_
  for (PostedRecv& r : posted) r.state->finish(why);
  notes_.wake();
}

void ConnectionCore::close() {
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  if (transport_) transport_->close();
}

void ConnectionCore::tick(Clock::time_point now) {
  if (!failed()) transport_->tick(now);
}

Status ConnectionCore::exhausted(const std::string& what) const {
  if (budget_->parent_refused() && ctx_->memory_budget) {
    return Status(Code::kResourceExhausted,
                  where() + ": " + what + " would take all connections past engine_memory_bytes (" +
                      std::to_string(ctx_->memory_budget->limit()) + " bytes) held on their peers' behalf (" +
                      std::to_string(budget_->held()) + " of them by this connection)");
  }
  return Status(Code::kResourceExhausted, where() + ": " + what + " would hold more than connection_memory_bytes (" +
                                              std::to_string(budget_->limit()) + " bytes) on the peer's behalf");
}

Status ConnectionCore::peer_status(uint32_t code, std::string_view message) const {
  if (code == 0) return Status();
  Code c = code <= static_cast<uint32_t>(Code::kInternal) ? static_cast<Code>(code) : Code::kInternal;
  return Status(c, "peer of " + where() + " reports: " + std::string(message));
}

// ---- transfers -----------------------------------------------------------------

std::shared_ptr<TransferState> ConnectionCore::new_state(int parts) {
  auto spin = ctx_->options.wait_spin.count() > 0 ? ctx_->options.wait_spin : transport_->wait_spin();
  return std::make_shared<TransferState>(next_op(), parts, spin);
}

std::shared_ptr<TransferState> ConnectionCore::new_state(core::MeteredOp op, int parts) {
  auto state = new_state(parts);
  if (ctx_->metrics) state->meter(ctx_->metrics.get(), op, core::metered_transport(transport_->name()), peer_meter_);
  return state;
}

Transfer ConnectionCore::failed_transfer(const Status& s) {
  auto st = std::make_shared<TransferState>(0, 1);
  st->finish(s);
  return Transfer(st);
}

Transfer ConnectionCore::sendv_async(std::span<const ConstBuffer> parts) {
  if (Status u = usable(); !u.ok()) return failed_transfer(u);
  auto source = core::resolve_parts(ctx_->registry, parts, parts.size() == 1 ? "send buffer" : "sendv part",
                                    /*allow_gpu=*/true);
  if (!source.ok()) return failed_transfer(source.status().with_context(where()));
  auto state = new_state(core::MeteredOp::kSend);
  state->set_bytes(source->total());
  transport_->start_send(state, std::move(source).value());
  return Transfer(state);
}

// ---- receiving and matching ------------------------------------------------------

Transfer ConnectionCore::recvv_async(std::span<const MutableBuffer> parts) {
  if (Status u = usable(); !u.ok()) return failed_transfer(u);
  auto dest = core::resolve_parts(ctx_->registry, parts, parts.size() == 1 ? "receive buffer" : "recvv part",
                                  /*allow_gpu=*/true);
  if (!dest.ok()) return failed_transfer(dest.status().with_context(where()));
  PostedRecv recv{new_state(core::MeteredOp::kRecv), std::move(dest).value()};
  let_stop_landing(recv.state);
  // A message already landing at a blocking receive's deadline is returned
  // if it lands within half of peer_timeout more, rather than dropped (half:
  // a stalled one is stopped, its sender told, before the stall fails the
  // whole connection).
  recv.state->set_past_deadline_grace(ctx_->options.peer_timeout / 2);
  Transfer handle(recv.state);
  ArrivedMessage msg;
  {
    platform::UniqueLock lock(mu_);
    // fail() sets failed_ before it takes mu_ to empty posted_: a receive
    // queued after that would never end.
    if (failed()) {
      lock.unlock();
      recv.state->finish(usable());
      return handle;
    }
    if (unexpected_.empty()) {
      std::weak_ptr<TransferState> weak = recv.state;
      std::weak_ptr<ConnectionCore> self = weak_from_this();
      recv.state->set_canceller([self, weak]() -> bool {
        auto core = self.lock();
        auto st = weak.lock();
        if (!core || !st) return false;
        {
          platform::MutexLock lock(core->mu_);
          auto it = std::find_if(core->posted_.begin(), core->posted_.end(),
                                 [&](const PostedRecv& r) { return r.state == st; });
          if (it == core->posted_.end()) return false;
          core->posted_.erase(it);
        }
        return st->finish(Status(Code::kCancelled, "receive cancelled before a message matched it"));
      });
      posted_.push_back(std::move(recv));
      return handle;
    }
    msg = std::move(unexpected_.front());
    unexpected_.pop_front();
  }
  budget_->give(held_cost(msg));
  deliver(std::move(recv), std::move(msg));
  return handle;
}

Result<uint64_t> ConnectionCore::probe(Deadline deadline) {
  platform::UniqueLock lock(mu_);
  auto ready = [&]() REQUIRES(mu_) { return !unexpected_.empty() || failed(); };
  if (deadline == kNoDeadline) {
    arrived_.wait(lock.native(), ready);
  } else if (!arrived_.wait_until(lock.native(), deadline, ready)) {
    return Status(Code::kDeadlineExceeded, where() + ": probe: no message arrived by the deadline");
  }
  if (!unexpected_.empty()) return unexpected_.front().size;
  lock.unlock();
  return usable();
}

std::optional<PostedRecv> ConnectionCore::take_posted() {
  std::optional<PostedRecv> recv;
  {
    platform::MutexLock lock(mu_);
    if (posted_.empty()) return std::nullopt;
    recv.emplace(std::move(posted_.front()));
    posted_.pop_front();
  }
  recv->state->set_canceller(nullptr);
  return recv;
}

bool ConnectionCore::has_posted() {
  platform::MutexLock lock(mu_);
  return !posted_.empty();
}

size_t ConnectionCore::held_cost(const ArrivedMessage& msg) {
  return kUnexpectedBytes + msg.bytes.size() + (msg.source ? msg.source->held_bytes() : 0);
}

void ConnectionCore::deliver(transport::PostedRecv recv, transport::ArrivedMessage msg) {
  // The one rule for a message larger than the receive that met it, for
  // every transport: the receive and the send end with kBufferTooSmall, and
  // no byte lands.
  const uint64_t capacity = recv.dest.total();
  if (msg.size > capacity) {
    Status s(Code::kBufferTooSmall, where() + ": message of " + std::to_string(msg.size) +
                                        " bytes does not fit the receive buffer of " + std::to_string(capacity) +
                                        " bytes");
    transport_->refuse(msg, s);
    recv.state->finish(s);
    return;
  }
  transport_->match(std::move(recv), std::move(msg));
}

Status ConnectionCore::arrive(ArrivedMessage msg) {
  PostedRecv recv;
  {
    platform::MutexLock lock(mu_);
    // fail() empties unexpected_ under mu_ once failed_ is set: nothing is
    // held for the peer after that.
    if (failed_.load(std::memory_order_acquire)) {
      return Status(Code::kCancelled, where() + ": a message that arrived after the connection failed is dropped");
    }
    if (posted_.empty()) {
      // What no receive has claimed is held for the peer: within the budget.
      if (!budget_->take(held_cost(msg))) return exhausted("messages no receive was posted for");
      unexpected_.push_back(std::move(msg));
      arrived_.notify_all();
      return Status();
    }
    recv = std::move(posted_.front());
    posted_.pop_front();
  }
  recv.state->set_canceller(nullptr);
  deliver(std::move(recv), std::move(msg));
  return Status();
}

// ---- notifications -------------------------------------------------------------

Status ConnectionCore::stream_wait(const Transfer& transfer, const CudaStreamRef& cuda_stream) {
  const std::shared_ptr<TransferState>& state = transfer.state();
  if (!state) return Status(Code::kInvalidArgument, "stream_wait on an empty Transfer handle");
  if (state->done()) return Status();
  FERRY_RETURN_IF_ERROR(platform::stream_waits_possible());
  if (!ctx_->stream_signals) return Status(Code::kUnimplemented, "stream_wait: this engine has no stream signals");
  // The kernels ferry's threads may launch are loaded now, on this thread:
  // loading waits for every stream of the context, the armed one too.
  if (ctx_->staging_kernels) ctx_->staging_kernels->load_where_used();
  if (ctx_->gather_kernels) ctx_->gather_kernels->load_where_used();
  FERRY_RETURN_IF_ERROR(transport_->before_stream_wait());
  FERRY_ASSIGN_OR_RETURN(platform::StreamSignals::Armed armed, ctx_->stream_signals->arm(cuda_stream));
  state->on_finish([signals = ctx_->stream_signals, armed](const Status&) { signals->signal(armed); });
  return Status();
}

Transfer ConnectionCore::notify_async(std::string_view message) {
  if (Status u = usable(); !u.ok()) return failed_transfer(u);
  if (Status c = core::NotificationQueue::check_size(message, "notify"); !c.ok()) return failed_transfer(c);
  auto state = new_state(core::MeteredOp::kNotify);
  transport_->send_note(state, next_note_seq_.fetch_add(1, std::memory_order_relaxed), message,
                        /*caller_thread=*/true);
  return Transfer(state);
}

Result<Note> ConnectionCore::wait_note(Deadline deadline, bool delivered_only) {
  core::NotificationQueue::Entry e;
  switch (notes_.wait(deadline, failed_, e, delivered_only)) {
    case core::NotificationQueue::Wait::kNote:
      return Note{std::move(e.text), e.delivered};
    case core::NotificationQueue::Wait::kStopped:
      return usable();
    case core::NotificationQueue::Wait::kDeadline:
      break;
  }
  return Status(Code::kDeadlineExceeded, "no notification from " + where() + " by the deadline");
}

Result<Note> ConnectionCore::wait_note(Deadline deadline) { return wait_note(deadline, /*delivered_only=*/false); }

Result<std::string> ConnectionCore::wait_notification(Deadline deadline) {
  FERRY_ASSIGN_OR_RETURN(Note n, wait_note(deadline, /*delivered_only=*/true));
  return std::move(n.message);
}

std::optional<Note> ConnectionCore::poll_note() {
  auto e = notes_.poll(/*delivered_only=*/false);
  if (!e) return std::nullopt;
  return Note{std::move(e->text), e->delivered};
}

std::optional<std::string> ConnectionCore::poll_notification() {
  auto e = notes_.poll(/*delivered_only=*/true);
  if (!e) return std::nullopt;
  return std::move(e->text);
}

}  // namespace ferry::transport
