// LocalConnection: posting operations, notifications, liveness and failure
// (the progress thread and the message handlers are in local_progress.cc).
#include "transport/local/local_connection.h"

#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstring>

#include "core/log.h"
#include "platform/thread.h"
#include "transport/local/local_messages.h"

namespace ferry::local {
namespace {

using wire::FrameHeader;
using wire::FrameType;

std::string encode(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FrameHeader f = h;
  f.aux_len = static_cast<uint16_t>(aux.size());
  f.payload_len = static_cast<uint32_t>(payload.size());
  wire::HeaderBytes hb;
  wire::encode_header(f, hb);
  std::string out(reinterpret_cast<const char*>(hb.data()), hb.size());
  out.append(aux);
  out.append(payload);
  return out;
}

}  // namespace

LocalConnection::LocalConnection(std::shared_ptr<core::EngineContext> ctx, uint64_t id, LocalPeer peer,
                                 platform::Socket control, ShmChannel channel)
    : ctx_(std::move(ctx)),
      id_(id),
      peer_(std::move(peer)),
      control_(std::move(control)),
      channel_(std::move(channel)),
      copier_(*ctx_->gpu_imports, peer_.engine_id, peer_.pid,
              [this] {
                if (!channel_.peer_gave_up()) return Status();
                return Status(Code::kPeerLost, where() +
                                                   ": the peer gave up on the connection before this copy ended; "
                                                   "the bytes copied cannot be trusted");
              }),
      budget_(ctx_->options.connection_memory_bytes) {
  last_peer_beat_at_ = Clock::now();
}

LocalConnection::~LocalConnection() { close(); }

Status LocalConnection::start() {
  std::string name = "ferry-c" + std::to_string(id_) + "-local";
  FERRY_ASSIGN_OR_RETURN(progress_, platform::try_start_thread(name, [this] { progress_loop(); }));
  return Status();
}

std::string LocalConnection::where() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "local connection %" PRIu64 " to %s (engine %016" PRIx64 ", pid %d)", id_,
                peer_.address.c_str(), peer_.engine_id, static_cast<int>(peer_.pid));
  return buf;
}

Transfer LocalConnection::failed(const Status& s) {
  auto st = std::make_shared<TransferState>(0, 1);
  st->finish(s);
  return Transfer(st);
}

std::shared_ptr<TransferState> LocalConnection::new_state(int parts) {
  // The progress thread polls while copies run, so a waiter polling too costs
  // little, and it does not oversleep a long GPU copy (Options::wait_spin).
  auto spin = ctx_->options.wait_spin.count() > 0 ? ctx_->options.wait_spin : kWaitSpin;
  return std::make_shared<TransferState>(next_id(), parts, spin);
}

uint64_t LocalConnection::next_id() {
  std::lock_guard lock(mu_);
  return next_id_++;
}

Status LocalConnection::usable() const {
  if (!failed_.load(std::memory_order_acquire)) return Status();
  std::lock_guard lock(health_mu_);
  return health_;
}

Status LocalConnection::health() const { return usable(); }

// ---- messages ---------------------------------------------------------------------

Status LocalConnection::fits(std::string_view payload, const char* what) const {
  if (channel_.fits(wire::kHeaderSize + payload.size())) return Status();
  return Status(Code::kInvalidArgument,
                where() + ": " + what + " takes a control message of " + std::to_string(payload.size()) +
                    " bytes, more than the channel carries (" + std::to_string(payload.size() / kSharedSpanBytes) +
                    " memory pieces, each a part or a separate allocation): use fewer or larger parts");
}

void LocalConnection::post(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  std::string msg = encode(h, aux, payload);
  if (!channel_.fits(msg.size())) {
    // Callers check what can grow (fits()); waiting in the outbox for room
    // that never comes would stall every message behind it.
    fail(Status(Code::kInternal,
                where() + ": a control message of " + std::to_string(msg.size()) + " bytes does not fit the channel"));
    return;
  }
  {
    std::lock_guard lock(out_mu_);
    if (outbox_.empty() && channel_.try_post(msg, {})) return;
    // A peer that stops reading its ring while it keeps asking would grow
    // the outbox without end: past the budget the message is dropped and
    // the progress thread fails the connection (fail() cannot run here:
    // callers may hold mu_).
    if (!budget_.take(msg.size())) {
      outbox_over_budget_.store(true, std::memory_order_release);
    } else {
      outbox_.push_back(std::move(msg));
      outbox_size_.store(outbox_.size(), std::memory_order_release);
    }
  }
  local_work_.store(true, std::memory_order_release);
  channel_.kick();
}

bool LocalConnection::flush_outbox() {
  if (outbox_size_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(out_mu_);
  bool any = false;
  while (!outbox_.empty() && channel_.try_post(outbox_.front(), {})) {
    budget_.give(outbox_.front().size());
    outbox_.pop_front();
    any = true;
  }
  outbox_size_.store(outbox_.size(), std::memory_order_release);
  return any;
}

void LocalConnection::expect(uint64_t id, Completion c) {
  {
    std::lock_guard lock(mu_);
    // fail() sets failed_ before it takes mu_ to empty these tables: an
    // entry added after that would never be completed.
    if (!failed_.load(std::memory_order_acquire)) {
      expected_[id] = std::move(c);
      return;
    }
  }
  c(usable());
}

void LocalConnection::answer(uint64_t id, const Status& s) {
  FrameHeader h;
  h.type = FrameType::kLocalDone;
  h.id = id;
  h.code = static_cast<uint32_t>(s.code());
  std::string msg = s.ok() ? std::string() : s.message().substr(0, 4000);
  post(h, msg);
}

Status LocalConnection::describe_span(const core::MemorySpan& span, std::vector<SharedSpan>& out) {
  size_t first = out.size();
  FERRY_RETURN_IF_ERROR(ctx_->gpu_exports->describe(span, out));
  std::lock_guard lock(mu_);
  for (size_t i = first; i < out.size(); ++i) {
    if (out[i].gpu()) shared_allocs_[span.region->region.id].insert(out[i].alloc_base);
  }
  return Status();
}

Status LocalConnection::describe(const core::SegmentList& list, uint64_t size, std::vector<SharedSpan>& out) {
  for (const core::MemorySpan& s : list.spans()) {
    if (size == 0) break;
    core::MemorySpan part = s;
    part.size = std::min<uint64_t>(s.size, size);
    size -= part.size;
    FERRY_RETURN_IF_ERROR(describe_span(part, out));
  }
  return Status();
}

// ---- two-sided ----------------------------------------------------------------------

Transfer LocalConnection::send_async(const void* data, size_t size) {
  ConstBuffer b{data, size};
  return sendv_async(std::span<const ConstBuffer>(&b, 1));
}

Transfer LocalConnection::sendv_async(std::span<const ConstBuffer> parts) {
  if (Status u = usable(); !u.ok()) return failed(u);
  auto source = core::resolve_parts(ctx_->registry, parts, parts.size() == 1 ? "send buffer" : "sendv part", true);
  if (!source.ok()) return failed(source.status().with_context(where()));
  return post_send(std::move(source).value());
}

Transfer LocalConnection::post_send(core::SegmentList source) {
  auto state = new_state();
  Transfer handle(state);
  uint64_t op = state->id();
  uint64_t size = source.total();
  state->set_bytes(size);
  auto done = [state](const Status& s) { state->finish(s); };
  FrameHeader h;
  h.id = op;
  h.a = size;
  if (!any_gpu(source) && size <= std::min<uint64_t>(ctx_->options.inline_max, channel_.max_message() / 2)) {
    // Small host messages ride in the ring: one message, no rendezvous.
    std::string bytes(size, '\0');
    std::vector<iovec> iov;
    source.slice(0, size, iov);
    size_t at = 0;
    core::ChunkAccess access(source, 0, size);
    if (!access.ok()) return failed(Status(Code::kNotFound, where() + ": send buffer was deregistered"));
    for (const iovec& v : iov) {
      std::memcpy(bytes.data() + at, v.iov_base, v.iov_len);
      at += v.iov_len;
    }
    h.type = FrameType::kEager;
    expect(op, done);
    post(h, {}, bytes);
    return handle;
  }
  std::vector<SharedSpan> spans;
  if (Status s = describe(source, size, spans); !s.ok()) return failed(s.with_context(where()));
  std::string payload;
  encode_spans(spans, payload);
  if (Status s = fits(payload, "this send"); !s.ok()) return failed(s);
  // The sender copies once it learns where the receive buffer is (CTS); when
  // it cannot address that buffer, the receiver copies and answers DONE.
  expect(op, done);
  h.type = FrameType::kLocalRts;
  {
    std::lock_guard lock(mu_);
    pending_sources_[op] = std::move(source);
  }
  post(h, {}, payload);
  return handle;
}

Result<uint64_t> LocalConnection::probe(Deadline deadline) {
  std::unique_lock lock(mu_);
  auto ready = [&] { return !unexpected_.empty() || failed_.load(std::memory_order_acquire); };
  if (deadline == kNoDeadline) {
    arrived_.wait(lock, ready);
  } else if (!arrived_.wait_until(lock, deadline, ready)) {
    return Status(Code::kDeadlineExceeded, where() + ": probe: no message arrived by the deadline");
  }
  if (!unexpected_.empty()) return unexpected_.front().size;
  lock.unlock();
  return usable();
}

Transfer LocalConnection::recv_async(void* data, size_t capacity) {
  MutableBuffer b{data, capacity};
  return recvv_async(std::span<const MutableBuffer>(&b, 1));
}

Transfer LocalConnection::recvv_async(std::span<const MutableBuffer> parts) {
  if (Status u = usable(); !u.ok()) return failed(u);
  auto dest = core::resolve_parts(ctx_->registry, parts, parts.size() == 1 ? "receive buffer" : "recvv part", true);
  if (!dest.ok()) return failed(dest.status().with_context(where()));
  return post_recv(std::move(dest).value());
}

Transfer LocalConnection::post_recv(core::SegmentList dest) {
  auto state = new_state();
  Transfer handle(state);
  PostedRecv recv{state, std::move(dest)};
  Unexpected msg;
  {
    std::lock_guard lock(mu_);
    if (failed_.load(std::memory_order_acquire)) {
      state->finish(usable());  // see expect()
      return handle;
    }
    if (unexpected_.empty()) {
      std::weak_ptr<TransferState> weak = state;
      std::weak_ptr<LocalConnection> self = weak_from_this();
      state->set_canceller([self, weak]() -> bool {
        auto conn = self.lock();
        auto st = weak.lock();
        if (!conn || !st) return false;
        {
          std::lock_guard lock(conn->mu_);
          auto it = std::find_if(conn->posted_.begin(), conn->posted_.end(),
                                 [&](const PostedRecv& r) { return r.state == st; });
          if (it == conn->posted_.end()) return false;
          conn->posted_.erase(it);
        }
        return st->finish(Status(Code::kCancelled, "receive cancelled before a message matched it"));
      });
      posted_.push_back(std::move(recv));
      return handle;
    }
    msg = std::move(unexpected_.front());
    unexpected_.pop_front();
    budget_.give(held_cost(msg));
  }
  match(std::move(recv), std::move(msg));
  return handle;
}

void LocalConnection::match(PostedRecv recv, Unexpected msg) {
  const auto& state = recv.state;
  uint64_t capacity = recv.dest.total();
  if (msg.size > capacity) {
    Status s(Code::kBufferTooSmall, where() + ": message of " + std::to_string(msg.size) +
                                        " bytes does not fit the receive buffer of " + std::to_string(capacity));
    state->finish(s);
    answer(msg.op, s);
    return;
  }
  state->set_bytes(msg.size);
  if (msg.eager) {
    core::ChunkAccess access(recv.dest, 0, msg.size);
    if (!access.ok()) {
      Status s(Code::kNotFound, where() + ": receive buffer was deregistered");
      state->finish(s);
      answer(msg.op, s);
      return;
    }
    Status s = copy_into(recv.dest, msg.bytes);
    state->finish(s);
    answer(msg.op, s);
    return;
  }
  if (msg.size == 0) {
    state->finish(Status());
    answer(msg.op, Status());
    return;
  }
  // Who copies. Up to kPullMax the receiver, when it can: its copy then
  // starts as the sender's RTS arrives, two messages (CTS, DONE) sooner than
  // the sender's push would (two-GPU host, GPU to GPU, receiver's time: 4 KiB
  // 14.1 against 16.2 us, 16 MiB 58 against 61 us, 64 MiB 184.1 and 184.9
  // against 184.8 and 189.9 us). Larger messages the sender pushes: a copy
  // engine reads from a peer GPU up to 3 us slower than it writes, and with
  // both directions at once (256 MiB) two reading copy engines reached 0.925
  // of the copy engines' figure, two writing 0.97-0.98.
  bool sender_can = !(any_gpu(msg.source) && any_host(recv.dest));
  bool receiver_can = LocalCopier::can_execute(recv.dest, msg.source);
  if (!receiver_can && !sender_can) {
    Status s(Code::kUnimplemented, where() +
                                       ": a message mixing host and GPU memory on both sides in opposite "
                                       "directions cannot move locally in one copy; split it");
    state->finish(s);
    answer(msg.op, s);
    return;
  }
  if (!receiver_can || (sender_can && msg.size > kPullMax)) {
    std::vector<SharedSpan> spans;
    Status s = describe(recv.dest, msg.size, spans);
    if (!s.ok()) {
      state->finish(s.with_context(where()));
      answer(msg.op, s);
      return;
    }
    std::string payload;
    encode_spans(spans, payload);
    if (Status f = fits(payload, "this receive"); !f.ok()) {
      state->finish(f);
      answer(msg.op, f);
      return;
    }
    {
      // A dereg of the buffer now waits for the peer to stop writing it.
      std::lock_guard lock(mu_);
      for (const core::MemorySpan& span : recv.dest.spans()) shared_receives_.insert(span.region->region.id);
    }
    uint64_t token = state->id();
    expect(token, [state](const Status& st) { state->finish(st); });
    FrameHeader h;
    h.type = FrameType::kLocalCts;
    h.id = msg.op;
    h.a = token;
    post(h, {}, payload);
    return;
  }
  // The receiver copies. The sender hears first: it may be waiting to send
  // the next message.
  uint64_t op = msg.op;
  // Held until the copy ends (the completion owns it): dereg waits for it.
  auto access = std::make_shared<core::ChunkAccess>(recv.dest, 0, msg.size);
  if (!access->ok()) {
    Status gone(Code::kNotFound, where() + ": receive buffer was deregistered");
    state->finish(gone);
    answer(op, gone);
    return;
  }
  std::weak_ptr<LocalConnection> self = weak_from_this();
  Status s = copier_.start(recv.dest, msg.source, msg.size, false, [self, state, op, access](const Status& st) {
    if (auto conn = self.lock()) conn->answer(op, st);
    state->finish(st);
  });
  if (!s.ok()) {
    state->finish(s);
    answer(op, s);
  }
  local_work_.store(true, std::memory_order_release);
}

Status LocalConnection::copy_into(const core::SegmentList& dest, const std::string& bytes) {
  if (!any_gpu(dest)) {
    dest.copy_in(0, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    return Status();
  }
  // An eager message for a GPU buffer: small, so a synchronous copy per part.
  const auto& d = platform::cuda();
  std::vector<core::SpanPiece> pieces;
  dest.pieces(0, bytes.size(), pieces);
  const char* from = bytes.data();
  for (const core::SpanPiece& p : pieces) {
    if (p.kind == MemoryKind::kCuda) {
      platform::DeviceScope on(p.device);
      FERRY_RETURN_IF_ERROR(on.status());
      FERRY_RETURN_IF_ERROR(d.check(d.memcpy(reinterpret_cast<platform::cu::DevicePtr>(p.data),
                                             reinterpret_cast<platform::cu::DevicePtr>(from), p.size),
                                    "cuMemcpy into the receive buffer"));
    } else {
      std::memcpy(p.data, from, p.size);
    }
    from += p.size;
  }
  return Status();
}

// ---- one-sided ------------------------------------------------------------------------

template <typename Access>
Result<std::vector<LocalConnection::Item>> LocalConnection::resolve_items(std::span<const Access> items,
                                                                          const char* op) {
  std::vector<Item> out;
  for (const Access& a : items) {
    Item it;
    it.remote = a.remote;
    it.offset = a.remote_offset;
    if (a.remote.engine_id != peer_.engine_id) {
      return Status(Code::kInvalidArgument, std::string(op) + ": descriptor belongs to another engine than " + where());
    }
    if (a.remote_offset > a.remote.length || a.size > a.remote.length - a.remote_offset) {
      return Status(Code::kOutOfRange, std::string(op) + ": [" + std::to_string(a.remote_offset) + ", +" +
                                           std::to_string(a.size) + ") leaves remote export " +
                                           std::to_string(a.remote.export_id) + " of " +
                                           std::to_string(a.remote.length) + " bytes");
    }
    if (a.size > 0) {
      struct Part {
        const void* data;
        size_t size;
      } part{a.local, a.size};
      auto list = core::resolve_parts(ctx_->registry, std::span<const Part>(&part, 1),
                                      std::string_view(op) == "write" ? "write source" : "read destination", true);
      if (!list.ok()) return list.status().with_context(where());
      it.local = std::move(list).value();
    }
    out.push_back(std::move(it));
  }
  return out;
}

Transfer LocalConnection::write_async(const void* local, size_t size, const RemoteDescriptor& remote,
                                      uint64_t remote_offset, std::string_view notification) {
  WriteItem item{local, size, remote, remote_offset};
  return writev_async(std::span<const WriteItem>(&item, 1), notification);
}

Transfer LocalConnection::writev_async(std::span<const WriteItem> items, std::string_view notification) {
  if (Status u = usable(); !u.ok()) return failed(u);
  if (items.empty()) return failed(Status(Code::kInvalidArgument, "writev: no items"));
  if (Status n = core::NotificationQueue::check_size(notification, "write"); !n.ok()) return failed(n);
  auto resolved = resolve_items(items, "write");
  if (!resolved.ok()) return failed(resolved.status());
  uint64_t seq = 0;
  if (!notification.empty()) {
    std::lock_guard lock(mu_);
    seq = next_note_seq_++;
  }
  int n = static_cast<int>(resolved->size());
  auto outer = new_state(seq != 0 ? 1 : n);
  Transfer handle(outer);
  size_t total = 0;
  for (const Item& it : *resolved) total += it.local.total();
  outer->set_bytes(total);
  std::shared_ptr<TransferState> parts = outer;
  if (seq != 0) {
    // The notification follows every item's data; a failed write skips it
    // (the peer then delivers the notifications after it without waiting).
    std::weak_ptr<LocalConnection> self = weak_from_this();
    parts = std::make_shared<TransferState>(0, n);
    parts->on_finish([self, outer, seq, note = std::string(notification)](const Status& s) {
      if (auto conn = self.lock()) conn->send_note(0, seq, !s.ok(), note);
      outer->finish(s);
    });
  }
  for (Item& it : *resolved) start_item(parts, std::move(it), true);
  return handle;
}

Transfer LocalConnection::read_async(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset) {
  ReadItem item{local, size, remote, remote_offset};
  return readv_async(std::span<const ReadItem>(&item, 1));
}

Transfer LocalConnection::readv_async(std::span<const ReadItem> items) {
  if (Status u = usable(); !u.ok()) return failed(u);
  if (items.empty()) return failed(Status(Code::kInvalidArgument, "readv: no items"));
  auto resolved = resolve_items(items, "read");
  if (!resolved.ok()) return failed(resolved.status());
  auto state = new_state(static_cast<int>(resolved->size()));
  Transfer handle(state);
  size_t total = 0;
  for (const Item& it : *resolved) total += it.local.total();
  state->set_bytes(total);
  for (Item& it : *resolved) start_item(state, std::move(it), false);
  return handle;
}

void LocalConnection::with_export(const RemoteDescriptor& r, std::function<void(Result<const ExportInfo*>)> then) {
  auto key = std::make_pair(r.export_id, r.key);
  {
    std::shared_lock gate(revoke_mu_);
    std::unique_lock lock(mu_);
    auto it = exports_.find(key);
    if (it != exports_.end()) {
      const ExportInfo* info = &it->second;
      lock.unlock();
      then(info);  // starts the copy under the gate
      return;
    }
    if (failed_.load(std::memory_order_acquire)) {
      lock.unlock();
      then(usable());  // see expect()
      return;
    }
    auto& waiters = opening_[key];
    waiters.push_back(std::move(then));
    if (waiters.size() > 1) return;  // a request is already out
  }
  FrameHeader h;
  h.type = FrameType::kLocalOpen;
  h.id = next_id();
  h.a = r.export_id;
  h.b = r.key;
  h.c = r.length;
  post(h);
}

void LocalConnection::start_item(const std::shared_ptr<TransferState>& state, Item item, bool is_write) {
  if (item.local.total() == 0) {
    state->finish_part(Status());
    return;
  }
  std::weak_ptr<LocalConnection> self = weak_from_this();
  auto shared = std::make_shared<Item>(std::move(item));
  with_export(shared->remote, [self, state, shared, is_write](Result<const ExportInfo*> info) {
    auto conn = self.lock();
    if (!conn) return;
    if (!info.ok()) {
      state->finish_part(info.status());
      return;
    }
    conn->run_item(state, *shared, **info, is_write);
  });
}

void LocalConnection::run_item(const std::shared_ptr<TransferState>& state, const Item& item, const ExportInfo& info,
                               bool is_write) {
  uint64_t size = item.local.total();
  if (item.offset + size > info.length) {
    state->finish_part(Status(Code::kOutOfRange,
                              where() + ": access past the end of export " + std::to_string(item.remote.export_id)));
    return;
  }
  std::vector<SharedSpan> remote = slice_spans(info.spans, item.offset, size);
  if (LocalCopier::can_execute(item.local, remote)) {
    // Held until the copy ends (the completion owns it): dereg waits for it.
    auto access = std::make_shared<core::ChunkAccess>(item.local, 0, size);
    if (!access->ok()) {
      state->finish_part(Status(Code::kNotFound, where() + ": local buffer was deregistered"));
      return;
    }
    Status s = copier_.start(item.local, remote, size, is_write,
                             [state, access](const Status& st) { state->finish_part(st); });
    if (!s.ok()) state->finish_part(s.with_context(where()));
    if (copier_.busy()) {
      // Queued GPU copies complete on the progress thread. A small copy has
      // already completed here: waking that thread would cost the caller a
      // futex call for nothing.
      local_work_.store(true, std::memory_order_release);
      channel_.kick();
    }
    return;
  }
  // This side's GPU memory against the peer's host memory: the peer copies.
  std::vector<SharedSpan> mine;
  if (Status s = describe(item.local, size, mine); !s.ok()) {
    state->finish_part(s.with_context(where()));
    return;
  }
  std::string payload;
  encode_spans(mine, payload);
  if (Status f = fits(payload, is_write ? "this write" : "this read"); !f.ok()) {
    state->finish_part(f);
    return;
  }
  uint64_t op = next_id();
  expect(op, [state](const Status& st) { state->finish_part(st); });
  FrameHeader h;
  h.type = is_write ? FrameType::kLocalPull : FrameType::kLocalPush;
  h.id = op;
  h.a = item.remote.export_id;
  h.b = item.remote.key;
  h.c = item.offset;
  h.d = size;
  post(h, {}, payload);
}

// ---- notifications --------------------------------------------------------------------

void LocalConnection::send_note(uint64_t op, uint64_t seq, bool skip, std::string_view note) {
  FrameHeader h;
  h.type = FrameType::kLocalNote;
  h.id = op;
  h.a = seq;
  h.flags = skip ? kNoteSkip : 0;
  post(h, skip ? std::string_view() : note);
}

Transfer LocalConnection::notify_async(std::string_view message) {
  if (Status u = usable(); !u.ok()) return failed(u);
  if (Status n = core::NotificationQueue::check_size(message, "notify"); !n.ok()) return failed(n);
  auto state = new_state();
  uint64_t seq;
  {
    std::lock_guard lock(mu_);
    seq = next_note_seq_++;
  }
  expect(state->id(), [state](const Status& s) { state->finish(s); });
  send_note(state->id(), seq, false, message);
  return Transfer(state);
}

Result<std::string> LocalConnection::wait_notification(Deadline deadline) {
  std::string note;
  switch (notes_.wait(deadline, failed_, note)) {
    case core::NotificationQueue::Wait::kNote:
      return note;
    case core::NotificationQueue::Wait::kStopped:
      return usable();
    case core::NotificationQueue::Wait::kDeadline:
      break;
  }
  return Status(Code::kDeadlineExceeded, "no notification from " + where() + " by the deadline");
}

std::optional<std::string> LocalConnection::poll_notification() { return notes_.poll(); }

// ---- liveness and failure ------------------------------------------------------------

void LocalConnection::tick(Clock::time_point now) {
  if (failed_.load(std::memory_order_acquire)) return;
  if (channel_.peer_gave_up()) {
    fail(Status(Code::kPeerLost, where() + ": the peer gave up on the connection"));
    return;
  }
  channel_.beat();
  uint64_t beats = channel_.peer_beats();
  if (beats != last_peer_beats_) {
    last_peer_beats_ = beats;
    last_peer_beat_at_ = now;
    return;
  }
  auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_peer_beat_at_);
  if (silent > ctx_->options.peer_timeout) {
    fail(Status(Code::kPeerLost, where() + ": no traffic from the peer for " + std::to_string(silent.count()) +
                                     " ms (peer_timeout " + std::to_string(ctx_->options.peer_timeout.count()) +
                                     " ms): stopped or overloaded"));
  }
}

void LocalConnection::peer_exited() {
  // What the peer posted before it exited still counts (an acknowledgement
  // of its last receive, say): read it all, then fail what is left.
  std::string msg;
  while (next_message(msg)) {
    if (!handle(msg).ok()) break;
  }
  // A process that is gone copies nothing; one that only hung up may still.
  if (peer_process_gone()) peer_quiet_.store(true, std::memory_order_release);
  fail(Status(Code::kPeerLost, where() + ": the peer process exited"));
}

bool LocalConnection::peer_process_gone() const { return ::kill(peer_.pid, 0) != 0 && errno == ESRCH; }

void LocalConnection::stop_copying(const Status& why) {
  fail(why, /*shutdown_control=*/false);
  copier_.stop();
  send_close();
}

void LocalConnection::send_close() {
  if (close_sent_.exchange(true)) return;
  FrameHeader h;
  h.type = FrameType::kClose;
  post(h);
  flush_outbox();
}

void LocalConnection::fail(const Status& why) { fail(why, true); }

void LocalConnection::fail(const Status& why, bool shutdown_control) {
  {
    // The reason is in place before anyone can see failed_ set.
    std::lock_guard lock(health_mu_);
    if (failed_.load(std::memory_order_relaxed)) return;
    health_ = why;
    failed_.store(true, std::memory_order_release);
  }
  // Before any transfer ends: its memory may be reused as soon as it does,
  // and a peer still copying must learn that its copy cannot be trusted.
  channel_.give_up();
  // The peer's orderly close ends the connection as planned: not a warning.
  if (closed_by_peer_.load(std::memory_order_acquire)) {
    FERRY_LOG(kInfo, "local", "%s", why.to_string().c_str());
  } else if (why.code() != Code::kCancelled) {
    FERRY_LOG(kWarn, "local", "%s", why.to_string().c_str());
  }
  std::unordered_map<uint64_t, Completion> expected;
  std::deque<PostedRecv> posted;
  std::map<std::pair<uint64_t, uint64_t>, std::vector<std::function<void(Result<const ExportInfo*>)>>> opening;
  {
    std::lock_guard lock(mu_);
    expected.swap(expected_);
    posted.swap(posted_);
    opening.swap(opening_);
    for (const Unexpected& u : unexpected_) budget_.give(held_cost(u));
    unexpected_.clear();
    pending_sources_.clear();
  }
  arrived_.notify_all();  // probes see failed_
  for (auto& [id, c] : expected) c(why);
  for (auto& r : posted) r.state->finish(why);
  for (auto& [key, waiters] : opening) {
    for (auto& w : waiters) w(why);
  }
  notes_.wake();
  if (shutdown_control) control_.shutdown();
  local_work_.store(true);
  channel_.kick();
}

void LocalConnection::close() {
  if (closed_.exchange(true)) return;
  if (!failed_.load()) {
    // Both sides copy into each other's memory, so neither may deregister
    // it until the other has stopped: fail what is pending, let this side's
    // own copies end, tell the peer, and wait for it to do the same (it
    // closes the control stream once its copies have ended).
    stop_copying(Status(Code::kCancelled, where() + ": connection closed"));
    // The peer answers CLOSE once its own copies have ended (on_close);
    // the progress thread reads it and sets peer_quiet_. A peer whose
    // control stream ends without that answer stopped copying only if its
    // process is gone. Polling: a close waits at most peer_timeout.
    auto until = Clock::now() + ctx_->options.peer_timeout;
    auto hung_up = Clock::time_point::max();
    while (!peer_quiet_.load(std::memory_order_acquire) && Clock::now() < until) {
      if (hung_up == Clock::time_point::max() && peer_gone()) hung_up = Clock::now();
      // The answer precedes the hang-up in the ring: give the reader a moment.
      if (Clock::now() - hung_up > std::chrono::milliseconds(20)) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!peer_quiet_.load(std::memory_order_acquire) && peer_process_gone()) {
      peer_quiet_.store(true, std::memory_order_release);
    }
    if (!peer_quiet_.load(std::memory_order_acquire)) {
      FERRY_LOG(kWarn, "local", "%s: the peer did not confirm within peer_timeout that it stopped copying",
                where().c_str());
    }
  }
  close_settled_.store(true, std::memory_order_release);
  fail(Status(Code::kCancelled, where() + ": connection closed"));
  control_.shutdown();
  stop_.store(true, std::memory_order_release);
  channel_.kick();
  if (progress_.joinable()) {
    if (progress_.get_id() == std::this_thread::get_id()) {
      progress_.detach();
    } else {
      progress_.join();
    }
  }
  copier_.forget(0);
}

}  // namespace ferry::local
