// ConnectionCore: checks, matching, notifications and the health latch,
// shared by every transport.
#include "transport/connection_core.h"

#include <algorithm>
#include <cinttypes>

#include "platform/log.h"
#include "platform/heap.h"
#include "platform/gather_kernel.h"
#include "platform/staging_kernel.h"
#include "platform/stream_signals.h"

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
  auto state = new_state();
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
  PostedRecv recv{new_state(), std::move(dest).value()};
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

// ---- one-sided ----------------------------------------------------------------

Status ConnectionCore::check_remote(const RemoteDescriptor& r, uint64_t offset, uint64_t size, const char* op) const {
  if (r.engine_id != peer_.engine_id) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s: descriptor belongs to engine %016" PRIx64 ", but ", op, r.engine_id);
    return Status(Code::kInvalidArgument, buf + where());
  }
  if (offset > r.length || size > r.length - offset) {
    return Status(Code::kOutOfRange, std::string(op) + ": [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                         ") leaves remote export " + std::to_string(r.export_id) + " of " +
                                         std::to_string(r.length) + " bytes");
  }
  return Status();
}

namespace {

template <typename Access>
Result<std::vector<RemoteItem>> resolve(const core::Registry& registry, std::span<const Access> items, const char* what,
                                        const std::function<Status(const Access&)>& check, const std::string& where) {
  std::vector<RemoteItem> out;
  out.reserve(items.size());
  for (const Access& a : items) {
    FERRY_RETURN_IF_ERROR(check(a));
    RemoteItem it;
    it.remote = a.remote;
    it.offset = a.remote_offset;
    if (a.size > 0) {
      ConstBuffer part{a.local, a.size};
      auto list = core::resolve_parts(registry, std::span<const ConstBuffer>(&part, 1), what, /*allow_gpu=*/true);
      if (!list.ok()) return list.status().with_context(where);
      it.local = std::move(list).value();
    }
    out.push_back(std::move(it));
  }
  return out;
}

}  // namespace

Result<std::vector<RemoteItem>> ConnectionCore::resolve_items(std::span<const ReadItem> items, const char* op) const {
  return resolve<ReadItem>(
      ctx_->registry, items, "read destination",
      [&](const ReadItem& a) { return check_remote(a.remote, a.remote_offset, a.size, op); }, where());
}

Transfer ConnectionCore::writev_async(std::span<const WriteItem> items, std::string_view notification) {
  if (Status u = usable(); !u.ok()) return failed_transfer(u);
  if (items.empty()) return failed_transfer(Status(Code::kInvalidArgument, "writev: no items"));
  if (Status c = core::NotificationQueue::check_size(notification, "write"); !c.ok()) return failed_transfer(c);
  WriteBatch batch;
  batch.targets.reserve(items.size());
  core::RegionRef last;  // the region of the previous item: a KV cache's blocks share a pool
  for (const WriteItem& a : items) {
    if (Status c = check_remote(a.remote, a.remote_offset, a.size, "write"); !c.ok()) return failed_transfer(c);
    if (a.size > 0) {
      auto* p = static_cast<uint8_t*>(const_cast<void*>(a.local));
      if (last != nullptr && core::holds(last->region, p, a.size)) {
        batch.source.add(last, p, a.size);
      } else {
        auto span = ctx_->registry.resolve_local(a.local, a.size, "write source");
        if (!span.ok()) return failed_transfer(span.status().with_context(where()));
        last = span->region;
        batch.source.add(std::move(span).value());
      }
    }
    batch.targets.push_back({a.remote, a.remote_offset, a.size});
  }
  return post_writes(std::move(batch), notification);
}

Result<BlockPools> ConnectionCore::prepare_blocks(std::span<const Region> local,
                                                  std::span<const RemoteDescriptor> remote) {
  if (local.empty() || remote.empty()) {
    return Status(Code::kInvalidArgument, "prepare_blocks: give at least one local region and one remote export");
  }
  if (local.size() > UINT32_MAX || remote.size() > UINT32_MAX) {
    return Status(Code::kInvalidArgument, "prepare_blocks: more pools than a block can name");
  }
  auto pools = std::make_shared<PreparedPools>();
  pools->engine = ctx_.get();
  pools->connection = id_;
  for (size_t i = 0; i < local.size(); ++i) {
    auto span = ctx_->registry.resolve_local(local[i].base, local[i].length, "local pool");
    if (!span.ok()) return span.status().with_context("prepare_blocks: local pool " + std::to_string(i));
    pools->local.push_back(std::move(span).value());
  }
  for (size_t i = 0; i < remote.size(); ++i) {
    if (Status c = check_remote(remote[i], 0, 0, "prepare_blocks"); !c.ok()) {
      return c.with_context("remote pool " + std::to_string(i));
    }
    pools->remote.push_back(remote[i]);
  }
  BlockPools out;
  out.pools_ = std::move(pools);
  return out;
}

Transfer ConnectionCore::write_blocks_async(const BlockPools& pools, std::span<const Block> blocks,
                                            std::string_view notification) {
  if (Status u = usable(); !u.ok()) return failed_transfer(u);
  const PreparedPools* p = pools.pools_.get();
  if (p == nullptr || p->engine != ctx_.get() || p->connection != id_) {
    return failed_transfer(Status(Code::kInvalidArgument,
                                  "write_blocks: the pools were not prepared on " + where() + " (prepare_blocks)"));
  }
  if (blocks.empty()) return failed_transfer(Status(Code::kInvalidArgument, "write_blocks: no blocks"));
  if (Status c = core::NotificationQueue::check_size(notification, "write"); !c.ok()) return failed_transfer(c);
  uint64_t total = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    if (b.local_pool >= p->local.size() || b.remote_pool >= p->remote.size()) {
      return failed_transfer(Status(Code::kInvalidArgument,
                                    "write_blocks: block " + std::to_string(i) + " names local pool " +
                                        std::to_string(b.local_pool) + " and remote pool " +
                                        std::to_string(b.remote_pool) + "; there are " +
                                        std::to_string(p->local.size()) + " and " + std::to_string(p->remote.size())));
    }
    const core::MemorySpan& from = p->local[b.local_pool];
    const RemoteDescriptor& to = p->remote[b.remote_pool];
    if (b.local_offset > from.size || b.size > from.size - b.local_offset || b.remote_offset > to.length ||
        b.size > to.length - b.remote_offset) {
      return failed_transfer(Status(
          Code::kOutOfRange, "write_blocks: block " + std::to_string(i) + " ([" + std::to_string(b.local_offset) +
                                 ", +" + std::to_string(b.size) + ") of local pool " + std::to_string(b.local_pool) +
                                 " of " + std::to_string(from.size) + " bytes to offset " +
                                 std::to_string(b.remote_offset) + " of remote pool " + std::to_string(b.remote_pool) +
                                 " of " + std::to_string(to.length) + ") runs past a pool's end"));
    }
    total += b.size;
  }
  // The transport's own way with the blocks where it has one, else a batch.
  // Called on this thread before post_writes returns: the references hold.
  return post_writes(total, notification, [&](const std::shared_ptr<TransferState>& state, std::string_view note,
                                              uint64_t seq) {
    if (transport_->start_pool_blocks(state, *p, blocks, total, note, seq)) return;
    WriteBatch batch;
    batch.source.reserve(blocks.size());
    batch.targets.reserve(blocks.size());
    for (const Block& b : blocks) {
      const core::MemorySpan& from = p->local[b.local_pool];
      batch.source.add(from.region, from.data + b.local_offset, static_cast<size_t>(b.size));
      batch.targets.push_back({p->remote[b.remote_pool], b.remote_offset, b.size});
    }
    start_writes(state, std::move(batch), note, seq);
  });
}

Transfer ConnectionCore::post_writes(WriteBatch batch, std::string_view notification) {
  const uint64_t bytes = batch.source.total();
  return post_writes(bytes, notification,
                     [&](const std::shared_ptr<TransferState>& state, std::string_view note, uint64_t seq) {
                       start_writes(state, std::move(batch), note, seq);
                     });
}

Transfer ConnectionCore::post_writes(uint64_t bytes, std::string_view notification, const StartWrites& start) {
  // The notification's place among this connection's notifications is
  // taken now (NotificationQueue::push_numbered); a write that fails gives
  // it up with a skip.
  uint64_t seq = notification.empty() ? 0 : next_note_seq_.fetch_add(1, std::memory_order_relaxed);
  if (seq != 0 && !transport_->notes_ride_with_writes()) {
    return writes_with_trailing_note(bytes, start, notification, seq);
  }
  auto state = new_state();
  state->set_bytes(bytes);
  if (seq != 0) {
    std::weak_ptr<ConnectionCore> self = weak_from_this();
    state->on_finish([self, seq, note = std::string(notification)](const Status& s) {
      if (auto core = self.lock(); core && !s.ok() && !core->failed()) core->transport_->skip_note(seq, note);
    });
  }
  start(state, notification, seq);
  let_stop(state, state);
  return Transfer(state);
}

void ConnectionCore::let_stop_landing(const std::shared_ptr<TransferState>& state) {
  std::weak_ptr<ConnectionCore> self = weak_from_this();
  std::weak_ptr<TransferState> weak = state;
  state->set_stopper([self, weak] {
    auto core = self.lock();
    auto st = weak.lock();
    return core && st && core->transport_->stop_landing(st);
  });
}

void ConnectionCore::let_stop(const std::shared_ptr<TransferState>& shown,
                              const std::shared_ptr<TransferState>& started) {
  std::weak_ptr<ConnectionCore> self = weak_from_this();
  std::weak_ptr<TransferState> weak_shown = shown, weak_started = started;
  shown->set_stopper([self, weak_shown, weak_started] {
    auto core = self.lock();
    auto outer = weak_shown.lock();
    if (!core || !outer) return false;
    auto started = weak_started.lock();  // gone once the write ended (its notification may still be on its way)
    bool stopped = started && core->transport_->stop_write(started);
    // The handle the application holds ends with it (on the thread that
    // ended the write, which also sends the notification or the skip).
    if (outer != started) (void)outer->wait(Clock::now() + core->ctx_->options.peer_timeout);
    return stopped;
  });
}

void ConnectionCore::start_writes(const std::shared_ptr<TransferState>& state, WriteBatch batch,
                                  std::string_view note, uint64_t seq) {
  if (batch.targets.size() > 1) {
    transport_->start_write_batch(state, std::move(batch), note, seq);
    return;
  }
  RemoteItem item;
  item.local = std::move(batch.source);
  item.remote = batch.targets.front().remote;
  item.offset = batch.targets.front().offset;
  transport_->start_write(state, std::move(item), note, seq);
}

Transfer ConnectionCore::writes_with_trailing_note(uint64_t bytes, const StartWrites& start, std::string_view note,
                                                   uint64_t seq) {
  // The items may land in any order: the notification follows once every
  // one of them is in place, or is skipped if one failed (the peer then
  // delivers the notifications after it without waiting).
  auto outer = new_state();
  outer->set_bytes(bytes);
  auto parts = std::make_shared<TransferState>(0, 1);
  std::weak_ptr<ConnectionCore> self = weak_from_this();
  // Runs on a ferry thread: the transport queues the note, never blocks here.
  parts->on_finish([self, outer, seq, note = std::string(note)](const Status& s) {
    auto core = self.lock();
    if (!core) {
      outer->finish(Status(Code::kCancelled, "notification not sent: the connection is gone"));
      return;
    }
    if (!s.ok()) {
      if (!core->failed()) core->transport_->skip_note(seq, note);
      outer->finish(s);
      return;
    }
    if (Status u = core->usable(); !u.ok()) {
      outer->finish(u);
      return;
    }
    core->transport_->send_note(outer, seq, note, /*caller_thread=*/false);
  });
  start(parts, "", 0);
  let_stop(outer, parts);
  return Transfer(outer);
}

Transfer ConnectionCore::readv_async(std::span<const ReadItem> items) {
  if (Status u = usable(); !u.ok()) return failed_transfer(u);
  if (items.empty()) return failed_transfer(Status(Code::kInvalidArgument, "readv: no items"));
  auto resolved = resolve_items(items, "read");
  if (!resolved.ok()) return failed_transfer(resolved.status());
  auto state = new_state(static_cast<int>(resolved->size()));
  size_t total = 0;
  for (const RemoteItem& it : *resolved) total += it.local.total();
  state->set_bytes(total);
  let_stop_landing(state);
  for (RemoteItem& it : *resolved) transport_->start_read(state, std::move(it));
  return Transfer(state);
}

// ---- notifications -------------------------------------------------------------

Status ConnectionCore::stream_wait(const Transfer& transfer, void* cuda_stream) {
  const std::shared_ptr<TransferState>& state = transfer.state();
  if (!state) return Status(Code::kInvalidArgument, "stream_wait on an empty Transfer handle");
  if (state->done()) return Status();
  if (!ctx_->stream_signals) return Status(Code::kUnimplemented, "stream_wait: this engine has no stream signals");
  // The kernels ferry's threads may launch are loaded now, on this thread:
  // loading waits for every stream of the context, the armed one too.
  if (ctx_->staging_kernels) ctx_->staging_kernels->load_where_used();
  if (ctx_->gather_kernels) ctx_->gather_kernels->load_where_used();
  FERRY_ASSIGN_OR_RETURN(platform::StreamSignals::Armed armed, ctx_->stream_signals->arm(cuda_stream));
  state->on_finish([signals = ctx_->stream_signals, armed](const Status&) { signals->signal(armed); });
  return Status();
}

Transfer ConnectionCore::notify_async(std::string_view message) {
  if (Status u = usable(); !u.ok()) return failed_transfer(u);
  if (Status c = core::NotificationQueue::check_size(message, "notify"); !c.ok()) return failed_transfer(c);
  auto state = new_state();
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

// ---- Connection: the public face, over the one core ------------------------------

namespace ferry {
namespace {

transport::ConnectionCore& core_of(Connection* c) { return static_cast<transport::ConnectionCore&>(*c); }
const transport::ConnectionCore& core_of(const Connection* c) {
  return static_cast<const transport::ConnectionCore&>(*c);
}

// An operation's arguments as a held operation keeps them (the caller's
// arrays and strings may be gone when it is posted), and as it passes them.
template <typename T>
std::vector<T> own(std::span<const T> s) {
  return std::vector<T>(s.begin(), s.end());
}
inline std::string own(std::string_view s) { return std::string(s); }
inline BlockPools own(const BlockPools& p) { return p; }
template <typename T>
std::span<const T> pass(const std::vector<T>& v) {
  return std::span<const T>(v);
}
inline std::string_view pass(const std::string& s) { return s; }
inline const BlockPools& pass(const BlockPools& p) { return p; }

// Posts `post(core, args...)` now, or holds it behind the streams and what
// is held already (core/stream_order.h).
template <typename Post, typename... Args>
Transfer in_order(transport::ConnectionCore& core, std::span<void* const> streams, Post post, const Args&... args) {
  core::OrderedPosts& ordered = core.ordered();
  if (ordered.posts_now(streams)) return post(core, args...);
  std::weak_ptr<transport::ConnectionCore> weak = core.weak_from_this();
  auto held = [weak, post, owned = std::make_tuple(own(args)...)]() -> Transfer {
    auto c = weak.lock();
    if (!c) return transport::ConnectionCore::failed_transfer(Status(Code::kCancelled, "the connection is gone"));
    return std::apply([&](const auto&... o) { return post(*c, pass(o)...); }, owned);
  };
  return ordered.post_later(streams, core.new_state(), std::move(held));
}

const auto kSendv = [](transport::ConnectionCore& c, std::span<const ConstBuffer> p) { return c.sendv_async(p); };
const auto kRecvv = [](transport::ConnectionCore& c, std::span<const MutableBuffer> p) { return c.recvv_async(p); };
const auto kWritev = [](transport::ConnectionCore& c, std::span<const WriteItem> i, std::string_view n) {
  return c.writev_async(i, n);
};
const auto kWriteBlocks = [](transport::ConnectionCore& c, const BlockPools& p, std::span<const Block> b,
                             std::string_view n) { return c.write_blocks_async(p, b, n); };
const auto kReadv = [](transport::ConnectionCore& c, std::span<const ReadItem> i) { return c.readv_async(i); };
const auto kNotify = [](transport::ConnectionCore& c, std::string_view m) { return c.notify_async(m); };

template <typename T>
std::span<const T> one(const T& t) {
  return std::span<const T>(&t, 1);
}

}  // namespace

Transfer Connection::send_async(const void* data, size_t size) {
  ConstBuffer b{data, size};
  return in_order(core_of(this), {}, kSendv, one(b));
}
Transfer Connection::sendv_async(std::span<const ConstBuffer> parts) { return in_order(core_of(this), {}, kSendv, parts); }
Transfer Connection::recv_async(void* data, size_t capacity) {
  MutableBuffer b{data, capacity};
  return in_order(core_of(this), {}, kRecvv, one(b));
}
Transfer Connection::recvv_async(std::span<const MutableBuffer> parts) {
  return in_order(core_of(this), {}, kRecvv, parts);
}
Result<uint64_t> Connection::probe(Deadline deadline) { return core_of(this).probe(deadline); }
Transfer Connection::write_async(const void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
                                 std::string_view notification) {
  WriteItem item{local, size, remote, remote_offset};
  return in_order(core_of(this), {}, kWritev, one(item), notification);
}
Transfer Connection::writev_async(std::span<const WriteItem> items, std::string_view notification) {
  return in_order(core_of(this), {}, kWritev, items, notification);
}
Result<BlockPools> Connection::prepare_blocks(std::span<const Region> local, std::span<const RemoteDescriptor> remote) {
  return core_of(this).prepare_blocks(local, remote);
}
Transfer Connection::write_blocks_async(const BlockPools& pools, std::span<const Block> blocks,
                                        std::string_view notification) {
  return in_order(core_of(this), {}, kWriteBlocks, pools, blocks, notification);
}
size_t BlockPools::local_pools() const { return pools_ ? pools_->local.size() : 0; }
size_t BlockPools::remote_pools() const { return pools_ ? pools_->remote.size() : 0; }
Transfer Connection::read_async(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset) {
  ReadItem item{local, size, remote, remote_offset};
  return in_order(core_of(this), {}, kReadv, one(item));
}
Transfer Connection::readv_async(std::span<const ReadItem> items) { return in_order(core_of(this), {}, kReadv, items); }
Transfer Connection::notify_async(std::string_view message) { return in_order(core_of(this), {}, kNotify, message); }
StreamOrdered Connection::after_streams(std::span<void* const> cuda_streams) {
  return StreamOrdered(this, cuda_streams);
}
Status Connection::stream_wait(const Transfer& transfer, void* cuda_stream) {
  return core_of(this).stream_wait(transfer, cuda_stream);
}

Transfer StreamOrdered::send_async(const void* data, size_t size) {
  ConstBuffer b{data, size};
  return in_order(core_of(connection_), streams_, kSendv, one(b));
}
Transfer StreamOrdered::sendv_async(std::span<const ConstBuffer> parts) {
  return in_order(core_of(connection_), streams_, kSendv, parts);
}
Transfer StreamOrdered::recv_async(void* data, size_t capacity) {
  MutableBuffer b{data, capacity};
  return in_order(core_of(connection_), streams_, kRecvv, one(b));
}
Transfer StreamOrdered::recvv_async(std::span<const MutableBuffer> parts) {
  return in_order(core_of(connection_), streams_, kRecvv, parts);
}
Transfer StreamOrdered::write_async(const void* local, size_t size, const RemoteDescriptor& remote,
                                    uint64_t remote_offset, std::string_view notification) {
  WriteItem item{local, size, remote, remote_offset};
  return in_order(core_of(connection_), streams_, kWritev, one(item), notification);
}
Transfer StreamOrdered::writev_async(std::span<const WriteItem> items, std::string_view notification) {
  return in_order(core_of(connection_), streams_, kWritev, items, notification);
}
Transfer StreamOrdered::write_blocks_async(const BlockPools& pools, std::span<const Block> blocks,
                                           std::string_view notification) {
  return in_order(core_of(connection_), streams_, kWriteBlocks, pools, blocks, notification);
}
Transfer StreamOrdered::read_async(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset) {
  ReadItem item{local, size, remote, remote_offset};
  return in_order(core_of(connection_), streams_, kReadv, one(item));
}
Transfer StreamOrdered::readv_async(std::span<const ReadItem> items) {
  return in_order(core_of(connection_), streams_, kReadv, items);
}
Result<std::string> Connection::wait_notification(Deadline deadline) {
  return core_of(this).wait_notification(deadline);
}
std::optional<std::string> Connection::poll_notification() { return core_of(this).poll_notification(); }
Result<Note> Connection::wait_note(Deadline deadline) { return core_of(this).wait_note(deadline); }
std::optional<Note> Connection::poll_note() { return core_of(this).poll_note(); }
void Connection::set_notification_listener(std::function<void()> listener) {
  core_of(this).set_notification_listener(std::move(listener));
}
void Connection::close() { core_of(this).close(); }
Status Connection::health() const { return core_of(this).health(); }
uint64_t Connection::id() const { return core_of(this).id(); }
uint64_t Connection::peer_engine_id() const { return core_of(this).peer_engine_id(); }
std::string Connection::peer_address() const { return core_of(this).peer_address(); }
std::string_view Connection::transport_name() const { return core_of(this).transport_name(); }


// The blocking forms: post, then wait by the one deadline policy
// (Transfer::wait_or_cancel), which Python's blocking calls use too.
Status Connection::send(const void* data, size_t size, Deadline deadline) {
  return send_async(data, size).wait_or_cancel(deadline, PastDeadline::kLeave);
}
Status Connection::sendv(std::span<const ConstBuffer> parts, Deadline deadline) {
  return sendv_async(parts).wait_or_cancel(deadline, PastDeadline::kLeave);
}
Result<size_t> Connection::recv(void* data, size_t capacity, Deadline deadline) {
  Transfer t = recv_async(data, capacity);
  FERRY_RETURN_IF_ERROR(t.wait_or_cancel(deadline, PastDeadline::kCancelOrFinish));
  return t.bytes();
}
Result<size_t> Connection::recvv(std::span<const MutableBuffer> parts, Deadline deadline) {
  Transfer t = recvv_async(parts);
  FERRY_RETURN_IF_ERROR(t.wait_or_cancel(deadline, PastDeadline::kCancelOrFinish));
  return t.bytes();
}
Status Connection::write(const void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
                         std::string_view notification, Deadline deadline) {
  return write_async(local, size, remote, remote_offset, notification)
      .wait_or_cancel(deadline, PastDeadline::kCancelOrFinish);
}
Status Connection::read(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
                        Deadline deadline) {
  return read_async(local, size, remote, remote_offset).wait_or_cancel(deadline, PastDeadline::kCancelOrFinish);
}
Status Connection::notify(std::string_view message, Deadline deadline) {
  return notify_async(message).wait_or_cancel(deadline, PastDeadline::kLeave);
}

}  // namespace ferry
