// LocalTransport: posting operations, notifications, liveness and failure
// (the progress turn and the message handlers are in local_progress.cc).
#include "transport/local/local_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstring>

#include "platform/log.h"
#include "transport/local/local_messages.h"
#include "transport/local/local_workers.h"

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

LocalTransport::LocalTransport(transport::ConnectionCore& core, LocalPeer peer, platform::Socket control,
                               ShmChannel channel)
    : core_(core),
      ctx_(&core.context()),
      peer_(std::move(peer)),
      control_(std::move(control)),
      channel_(std::move(channel)),
      copier_(
          *ctx_->gpu_imports, peer_.engine_id, peer_.pid,
          [this] {
            if (!channel_.peer_gave_up()) return Status();
            // Closed after the connection failed: its reason.
            if (channel_.closed()) return core_.health();
            return Status(Code::kPeerLost, where() +
                                               ": the peer gave up on the connection before this copy ended; "
                                               "the bytes copied cannot be trusted");
          },
          ctx_->local_workers->copies, ctx_->gather_kernels, ctx_->resident_gather),
      progress_(ctx_->local_workers->progress) {
  last_peer_beat_at_ = Clock::now();
  last_activity_ = last_peer_beat_at_;
  // The peer's doorbell: one byte rings it, and must not wait for an
  // acknowledgement of the one before (Nagle).
  platform::MutexLock lock(control_mu_);
  int one = 1;
  (void)::setsockopt(control_.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// The core closes first (its destructor), which takes the connection out of
// the progress workers' hands.
LocalTransport::~LocalTransport() = default;

Status LocalTransport::start() {
  int fd;
  {
    platform::MutexLock lock(control_mu_);
    fd = control_.fd();
  }
  // entry_ is set before a turn can run (a turn kicks through it).
  FERRY_RETURN_IF_ERROR(progress_.add(this, fd, entry_));
  return Status();
}

void LocalTransport::kick() {
  if (entry_) progress_.kick(*entry_);
}

void LocalTransport::ring_peer() {
  platform::MutexLock lock(control_mu_);
  if (control_.fd() < 0) return;
  // A full socket buffer means rings the peer has yet to read: it wakes
  // anyway. A peer that hung up is the progress worker's to notice.
  static const char kRing = 'r';
  (void)::send(control_.fd(), &kRing, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

bool LocalTransport::drain_doorbell() {
  platform::MutexLock lock(control_mu_);
  if (control_.fd() < 0) return true;
  // Bounded: a peer that rings without end is read again on the next turn.
  char buf[256];
  for (int i = 0; i < 16; ++i) {
    ssize_t n = ::recv(control_.fd(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
  return false;
}

Result<std::shared_ptr<transport::ConnectionCore>> LocalTransport::connection(
    const std::shared_ptr<core::EngineContext>& ctx, uint64_t id, LocalPeer peer, platform::Socket control,
    ShmChannel channel) {
  transport::PeerIdentity who{peer.engine_id, peer.address, describe(id, peer)};
  auto core = transport::ConnectionCore::create(ctx, id, std::move(who), [&](transport::ConnectionCore& c) {
    return std::make_unique<LocalTransport>(c, std::move(peer), std::move(control), std::move(channel));
  });
  if (Status s = core->start(); !s.ok()) {
    core->close();
    return s;
  }
  return core;
}

std::string LocalTransport::describe(uint64_t id, const LocalPeer& peer) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "local connection %" PRIu64 " to %s (engine %016" PRIx64 ", pid %d)", id,
                peer.address.c_str(), peer.engine_id, static_cast<int>(peer.pid));
  return buf;
}

// ---- messages ---------------------------------------------------------------------

Status LocalTransport::fits(std::string_view payload, const char* what) const {
  if (channel_.fits(wire::kHeaderSize + payload.size())) return Status();
  return Status(Code::kInvalidArgument,
                where() + ": " + what + " takes a control message of " + std::to_string(payload.size()) +
                    " bytes, more than the channel carries (" + std::to_string(payload.size() / kSharedSpanBytes) +
                    " memory pieces, each a part or a separate allocation): use fewer or larger parts");
}

void LocalTransport::post(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  std::string msg = encode(h, aux, payload);
  if (!channel_.fits(msg.size())) {
    // Callers check what can grow (fits()); waiting in the outbox for room
    // that never comes would stall every message behind it.
    core_.fail(Status(Code::kInternal,
                where() + ": a control message of " + std::to_string(msg.size()) + " bytes does not fit the channel"));
    return;
  }
  bool posted = false, ring = false, closed = false;
  {
    platform::MutexLock lock(out_mu_);
    posted = outbox_.empty() && channel_.try_post(msg, {}, &ring);
    // A closed channel takes nothing more, and close() emptied the outbox
    // for good: the message goes nowhere.
    closed = !posted && channel_.closed();
    if (posted || closed) {
    } else if (!core_.budget().take(msg.size())) {
      // A peer that stops reading its ring while it keeps asking would grow
      // the outbox without end: past the budget the message is dropped and
      // the progress worker fails the connection (fail() cannot run here:
      // callers may hold mu_).
      outbox_over_budget_.store(true, std::memory_order_release);
    } else {
      outbox_.push_back(std::move(msg));
      outbox_size_.store(outbox_.size(), std::memory_order_release);
    }
  }
  if (ring) ring_peer();
  if (!posted && !closed) kick();  // the outbox, or its budget, is the worker's
}

bool LocalTransport::flush_outbox() {
  if (outbox_size_.load(std::memory_order_acquire) == 0) return false;
  bool any = false, ring = false;
  {
    platform::MutexLock lock(out_mu_);
    bool rang = false;
    while (!outbox_.empty() && channel_.try_post(outbox_.front(), {}, &rang)) {
      core_.budget().give(outbox_.front().size());
      outbox_.pop_front();
      any = true;
      ring |= rang;
    }
    outbox_size_.store(outbox_.size(), std::memory_order_release);
  }
  if (ring) ring_peer();
  return any;
}

void LocalTransport::expect(uint64_t id, Completion c) {
  {
    platform::MutexLock lock(mu_);
    // fail() sets failed_ before it takes mu_ to empty these tables: an
    // entry added after that would never be completed.
    if (!core_.failed()) {
      expected_[id] = std::move(c);
      return;
    }
  }
  c(core_.usable());
}

void LocalTransport::answer(uint64_t id, const Status& s) {
  FrameHeader h;
  h.type = FrameType::kLocalDone;
  h.id = id;
  h.code = static_cast<uint32_t>(s.code());
  std::string msg = s.ok() ? std::string() : s.message().substr(0, 4000);
  post(h, msg);
}

Status LocalTransport::describe_span(const core::MemorySpan& span, std::vector<SharedSpan>& out) {
  size_t first = out.size();
  FERRY_RETURN_IF_ERROR(ctx_->gpu_exports->describe(span, out));
  platform::MutexLock lock(mu_);
  for (size_t i = first; i < out.size(); ++i) {
    if (out[i].gpu()) shared_allocs_[span.region->region.id].insert(out[i].alloc_base);
  }
  return Status();
}

Status LocalTransport::describe(const core::SegmentList& list, uint64_t size, std::vector<SharedSpan>& out) {
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

void LocalTransport::start_send(const std::shared_ptr<TransferState>& state, core::SegmentList source) {
  uint64_t op = state->id();
  uint64_t size = source.total();
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
    if (!access.ok()) {
      state->finish(Status(Code::kNotFound, where() + ": send buffer was deregistered"));
      return;
    }
    for (const iovec& v : iov) {
      std::memcpy(bytes.data() + at, v.iov_base, v.iov_len);
      at += v.iov_len;
    }
    h.type = FrameType::kEager;
    expect(op, done);
    post(h, {}, bytes);
    return;
  }
  std::vector<SharedSpan> spans;
  if (Status s = describe(source, size, spans); !s.ok()) {
    state->finish(s.with_context(where()));
    return;
  }
  std::string payload;
  encode_spans(spans, payload);
  if (Status s = fits(payload, "this send"); !s.ok()) {
    state->finish(s);
    return;
  }
  // The sender copies once it learns where the receive buffer is (CTS); when
  // it cannot address that buffer, the receiver copies and answers DONE.
  expect(op, done);
  h.type = FrameType::kLocalRts;
  {
    platform::MutexLock lock(mu_);
    pending_sources_[op] = std::move(source);
  }
  post(h, {}, payload);
}

void LocalTransport::refuse(const transport::ArrivedMessage& msg, const Status& why) { answer(msg.op, why); }

void LocalTransport::match(transport::PostedRecv recv, transport::ArrivedMessage msg) {
  const auto& state = recv.state;
  static const std::vector<SharedSpan> kNone;
  const std::vector<SharedSpan>& source = msg.source ? static_cast<const SpansSource&>(*msg.source).spans : kNone;
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
  bool sender_can = !(any_gpu(source) && any_host(recv.dest));
  bool receiver_can = LocalCopier::can_execute(recv.dest, source);
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
      platform::MutexLock lock(mu_);
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
  std::weak_ptr<transport::ConnectionCore> self = core_.weak_from_this();
  Status s = copier_.start(
      recv.dest, source, msg.size, false,
      [this, self, state, op, access](const Status& st) {
        if (auto core = self.lock()) answer(op, st);  // the transport lives as long as its core
        state->finish(st);
      },
      copy_by());
  if (!s.ok()) {
    state->finish(s);
    answer(op, s);
  }
  if (copier_.busy()) kick();  // GPU copies complete in the worker's turns
}

Status LocalTransport::copy_into(const core::SegmentList& dest, const std::string& bytes) {
  if (!any_gpu(dest)) {
    dest.copy_in(0, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    return Status();
  }
  // An eager message for a GPU buffer: small, so a copy per part, waited for.
  std::vector<core::SpanPiece> pieces;
  dest.pieces(0, bytes.size(), pieces);
  const char* from = bytes.data();
  for (const core::SpanPiece& p : pieces) {
    if (p.kind == MemoryKind::kCuda) {
      FERRY_RETURN_IF_ERROR(copier_.copy_to_device_now(p.device, p.data, from, p.size));
    } else {
      std::memcpy(p.data, from, p.size);
    }
    from += p.size;
  }
  return Status();
}

// ---- one-sided ------------------------------------------------------------------------

void LocalTransport::start_write(const std::shared_ptr<TransferState>& state, transport::RemoteItem item,
                                 std::string_view /*note*/, uint64_t /*note_seq*/) {
  start_item(state, std::move(item), /*is_write=*/true);
}

void LocalTransport::start_write_batch(const std::shared_ptr<TransferState>& state, transport::WriteBatch batch,
                                       std::string_view /*note*/, uint64_t /*note_seq*/) {
  const RemoteDescriptor& first = batch.targets.front().remote;
  bool one_export = std::all_of(batch.targets.begin(), batch.targets.end(), [&](const auto& t) {
    return t.remote.export_id == first.export_id && t.remote.key == first.key;
  });
  if (!one_export) {
    start_each(state, std::move(batch));
    return;
  }
  // A KV cache's blocks all go into one pool: one copy of every block.
  std::weak_ptr<transport::ConnectionCore> self = core_.weak_from_this();
  auto shared = std::make_shared<transport::WriteBatch>(std::move(batch));
  with_export(first, [this, self, state, shared](Result<const ExportInfo*> info) {
    auto core = self.lock();  // the transport lives as long as its core
    if (!core) return;
    if (!info.ok()) {
      state->finish_part(info.status());
      return;
    }
    run_batch(state, shared, **info);
  });
}

bool LocalTransport::start_pool_blocks(const std::shared_ptr<TransferState>& state,
                                       const transport::PreparedPools& pools, std::span<const Block> blocks,
                                       uint64_t bytes, std::string_view note, uint64_t /*note_seq*/) {
  // A note follows the write here (notes_ride_with_writes() is false): the
  // core never hands one over, and the general path would carry it.
  if (!note.empty()) return false;
  // This side's pools: GPU memory, all on one device.
  const int device = pools.local.front().region->region.device;
  std::vector<uint8_t*> local;
  local.reserve(pools.local.size());
  for (const core::MemorySpan& m : pools.local) {
    if (m.region->region.kind != MemoryKind::kCuda || m.region->region.device != device) return false;
    local.push_back(m.data);
  }
  platform::ReaderLock gate(revoke_mu_);  // no export of the peer's closes while the copy is queued
  std::vector<SharedSpan> remote;
  remote.reserve(pools.remote.size());
  {
    platform::MutexLock lock(mu_);
    for (const RemoteDescriptor& r : pools.remote) {
      auto it = exports_.find(std::make_pair(r.export_id, r.key));
      // Not opened yet, or not one GPU allocation reaching as far as the
      // descriptor says: the general path opens it, or fails the blocks
      // that reach past it.
      if (it == exports_.end() || it->second.spans.size() != 1) return false;
      const SharedSpan& span = it->second.spans.front();
      if (!span.gpu() || r.length > it->second.length || r.length > span.length) return false;
      remote.push_back(span);
    }
  }
  // Held until the copy ends: deregistering a pool waits for it.
  core::SegmentList held;
  for (const core::MemorySpan& m : pools.local) held.add(m);
  auto access = std::make_shared<core::ChunkAccess>(held, 0, held.total());
  if (!access->ok()) {
    state->finish_part(Status(Code::kNotFound, where() + ": a local pool was deregistered"));
    return true;
  }
  Status s = copier_.start_blocks(
      device, local, remote, blocks, bytes, [state, access](const Status& st) { state->finish_part(st); },
      stop_check(state));
  if (s.code() == Code::kUnimplemented) return false;
  if (!s.ok()) state->finish_part(s.with_context(where()));
  if (copier_.busy()) {
    kick();
  }
  return true;
}

void LocalTransport::run_batch(const std::shared_ptr<TransferState>& state,
                               const std::shared_ptr<transport::WriteBatch>& batch, const ExportInfo& info) {
  std::vector<SharedSpan> remote;
  remote.reserve(batch->targets.size());
  for (const transport::WriteBatch::Target& t : batch->targets) {
    if (t.offset > info.length || t.size > info.length - t.offset) {
      state->finish_part(Status(Code::kOutOfRange, where() + ": access past the end of export " +
                                                       std::to_string(t.remote.export_id)));
      return;
    }
    // The export's spans that hold [offset, offset + size), walked in place.
    uint64_t skip = t.offset, left = t.size;
    for (const SharedSpan& s : info.spans) {
      if (left == 0) break;
      if (skip >= s.length) {
        skip -= s.length;
        continue;
      }
      uint64_t address = s.address + skip, length = std::min(left, s.length - skip);
      skip = 0;
      left -= length;
      // Blocks that continue each other in one allocation: one span, one copy.
      SharedSpan* last = remote.empty() ? nullptr : &remote.back();
      if (last != nullptr && last->kind == s.kind && last->alloc_id == s.alloc_id &&
          last->alloc_base == s.alloc_base && last->address + last->length == address) {
        last->length += length;
      } else {
        remote.push_back(s);
        remote.back().address = address;
        remote.back().length = length;
      }
    }
  }
  const uint64_t size = batch->source.total();
  if (size == 0) {
    state->finish_part(Status());
    return;
  }
  if (!LocalCopier::can_execute(batch->source, remote)) {
    start_each(state, std::move(*batch));  // the peer copies its parts
    return;
  }
  // Held until the copy ends (the completion owns it): dereg waits for it.
  auto access = std::make_shared<core::ChunkAccess>(batch->source, 0, size);
  if (!access->ok()) {
    state->finish_part(Status(Code::kNotFound, where() + ": local buffer was deregistered"));
    return;
  }
  Status s = copier_.start(
      batch->source, remote, size, /*to_remote=*/true,
      [state, access, batch](const Status& st) { state->finish_part(st); }, copy_by(), stop_check(state));
  if (!s.ok()) state->finish_part(s.with_context(where()));
  if (copier_.busy()) {
    kick();
  }
}

void LocalTransport::start_each(const std::shared_ptr<TransferState>& state, transport::WriteBatch batch) {
  // Each item is copied on its own; the batch ends with the last of them.
  auto items_state = std::make_shared<TransferState>(0, static_cast<int>(batch.targets.size()));
  items_state->on_finish([state](const Status& s) { state->finish_part(s); });
  uint64_t at = 0;
  for (const transport::WriteBatch::Target& t : batch.targets) {
    transport::RemoteItem item;
    item.local = batch.source.part(at, t.size);
    item.remote = t.remote;
    item.offset = t.offset;
    at += t.size;
    start_item(items_state, std::move(item), /*is_write=*/true, state);
  }
}

void LocalTransport::start_read(const std::shared_ptr<TransferState>& state, transport::RemoteItem item) {
  start_item(state, std::move(item), /*is_write=*/false);
}

void LocalTransport::with_export(const RemoteDescriptor& r, std::function<void(Result<const ExportInfo*>)> then) {
  auto key = std::make_pair(r.export_id, r.key);
  {
    platform::ReaderLock gate(revoke_mu_);
    platform::UniqueLock lock(mu_);
    auto it = exports_.find(key);
    if (it != exports_.end()) {
      const ExportInfo* info = &it->second;
      lock.unlock();
      then(info);  // starts the copy under the gate
      return;
    }
    if (core_.failed()) {
      lock.unlock();
      then(core_.usable());  // see expect()
      return;
    }
    auto& waiters = opening_[key];
    waiters.push_back(std::move(then));
    if (waiters.size() > 1) return;  // a request is already out
  }
  FrameHeader h;
  h.type = FrameType::kLocalOpen;
  h.id = core_.next_op();
  h.a = r.export_id;
  h.b = r.key;
  h.c = r.length;
  post(h);
}

LocalCopier::StopCheck LocalTransport::stop_check(std::shared_ptr<TransferState> transfer) {
  return [transfer = std::move(transfer)] {
    if (!transfer->stop_requested()) return Status();
    return Status(Code::kCancelled, "the write was cancelled by the application");
  };
}

bool LocalTransport::stop_write(const std::shared_ptr<TransferState>& state) {
  // This side does every copy of a write (or the peer does, and answers once
  // it did): a copy not begun does not begin, a host copy stops before its
  // next piece, and the write is over once the copies that run have ended.
  state->request_stop();
  if (!state->wait(Clock::now() + ctx_->options.peer_timeout).ok() && !state->done()) {
    core_.fail(Status(Code::kPeerLost, where() + ": a cancelled write did not end within peer_timeout"));
    (void)state->wait(Clock::now() + ctx_->options.peer_timeout);
  }
  return state->done() && state->status().code() == Code::kCancelled;
}

void LocalTransport::start_item(const std::shared_ptr<TransferState>& state, Item item, bool is_write,
                                std::shared_ptr<TransferState> stop_from) {
  if (item.local.total() == 0) {
    state->finish_part(Status());
    return;
  }
  if (!stop_from) stop_from = state;
  std::weak_ptr<transport::ConnectionCore> self = core_.weak_from_this();
  auto shared = std::make_shared<Item>(std::move(item));
  with_export(shared->remote, [this, self, state, shared, is_write, stop_from](Result<const ExportInfo*> info) {
    auto core = self.lock();  // the transport lives as long as its core
    if (!core) return;
    if (!info.ok()) {
      state->finish_part(info.status());
      return;
    }
    run_item(state, *shared, **info, is_write, stop_from);
  });
}

void LocalTransport::run_item(const std::shared_ptr<TransferState>& state, const Item& item, const ExportInfo& info,
                               bool is_write, const std::shared_ptr<TransferState>& stop_from) {
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
    // The first item to use an export runs here on a progress worker,
    // once the peer opened it (on_export): a large host copy then goes to
    // the copier's helpers, so acks and notifications do not wait for it.
    Status s = copier_.start(
        item.local, remote, size, is_write, [state, access](const Status& st) { state->finish_part(st); }, copy_by(),
        is_write ? stop_check(stop_from) : LocalCopier::StopCheck());
    if (!s.ok()) state->finish_part(s.with_context(where()));
    if (copier_.busy()) {
      // Queued GPU copies complete on the progress worker. A small copy has
      // already completed here: waking that thread would cost the caller a
      // futex call for nothing.
      kick();
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
  uint64_t op = core_.next_op();
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

void LocalTransport::post_note(uint64_t op, uint64_t seq, bool skip, std::string_view note) {
  FrameHeader h;
  h.type = FrameType::kLocalNote;
  h.id = op;
  h.a = seq;
  h.flags = skip ? kNoteSkip : 0;
  post(h, note);
}

void LocalTransport::send_note(const std::shared_ptr<TransferState>& state, uint64_t seq, std::string_view note,
                               bool /*caller_thread: post() never blocks*/) {
  uint64_t op = core_.next_op();
  expect(op, [state](const Status& s) { state->finish(s); });
  post_note(op, seq, false, note);
}

void LocalTransport::skip_note(uint64_t seq, std::string_view note) { post_note(0, seq, true, note); }

// ---- liveness and failure ------------------------------------------------------------

void LocalTransport::tick(Clock::time_point now) {
  if (channel_.peer_gave_up()) {
    core_.fail(Status(Code::kPeerLost, where() + ": the peer gave up on the connection"));
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
    core_.fail(Status(Code::kPeerLost, where() + ": no traffic from the peer for " + std::to_string(silent.count()) +
                                     " ms (peer_timeout " + std::to_string(ctx_->options.peer_timeout.count()) +
                                     " ms): stopped or overloaded"));
  }
}

void LocalTransport::peer_exited() {
  // What the peer posted before it exited still counts (an acknowledgement
  // of its last receive, say): read it all, then fail what is left.
  std::string msg;
  while (next_message(msg)) {
    if (!handle(msg).ok()) break;
  }
  // A process that is gone copies nothing; one that only hung up may still.
  if (peer_process_gone()) peer_quiet_.store(true, std::memory_order_release);
  core_.fail(Status(Code::kPeerLost, where() + ": the peer process exited"));
}

bool LocalTransport::peer_process_gone() const { return ::kill(peer_.pid, 0) != 0 && errno == ESRCH; }

void LocalTransport::stop_copying(const Status& why) {
  keep_control_open_.store(true, std::memory_order_release);
  core_.fail(why);
  copier_.stop();
  send_close();
}

void LocalTransport::send_close() {
  if (close_sent_.exchange(true)) return;
  FrameHeader h;
  h.type = FrameType::kClose;
  post(h);
  flush_outbox();
}

void LocalTransport::failed(const Status& why) {
  // Before any transfer ends: its memory may be reused as soon as it does,
  // and a peer still copying must learn that its copy cannot be trusted.
  channel_.give_up();
  std::unordered_map<uint64_t, Completion> expected;
  std::map<std::pair<uint64_t, uint64_t>, std::vector<std::function<void(Result<const ExportInfo*>)>>> opening;
  {
    platform::MutexLock lock(mu_);
    expected.swap(expected_);
    opening.swap(opening_);
    pending_sources_.clear();
  }
  for (auto& [id, c] : expected) c(why);
  for (auto& [key, waiters] : opening) {
    for (auto& w : waiters) w(why);
  }
  if (!keep_control_open_.load(std::memory_order_acquire)) shut_control();
  kick();
}

void LocalTransport::close() {
  if (!core_.failed()) {
    // Both sides copy into each other's memory, so neither may deregister
    // it until the other has stopped: fail what is pending, let this side's
    // own copies end, tell the peer, and wait for it to do the same (it
    // closes the control stream once its copies have ended).
    stop_copying(Status(Code::kCancelled, where() + ": connection closed"));
    // The peer answers CLOSE once its own copies have ended (on_close);
    // the progress worker reads it and sets peer_quiet_. A peer whose
    // control stream ends without that answer stopped copying only if its
    // process is gone. Polling: a close waits at most peer_timeout.
    auto until = Clock::now() + ctx_->options.peer_timeout;
    auto hung_up = Clock::time_point::max();
    // On the worker that serves this connection (closed from another
    // connection's turn), nobody else reads the answer: this does.
    const bool read_here = entry_ && progress_.serves_here(*entry_);
    std::string msg;
    while (!peer_quiet_.load(std::memory_order_acquire) && Clock::now() < until) {
      while (read_here && next_message(msg)) {
        if (!handle(msg).ok()) break;
      }
      if (peer_quiet_.load(std::memory_order_acquire)) break;
      if (hung_up == Clock::time_point::max() && peer_gone()) hung_up = Clock::now();
      // The answer precedes the hang-up in the ring: give the reader a moment.
      if (Clock::now() - hung_up > std::chrono::milliseconds(20)) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!peer_quiet_.load(std::memory_order_acquire) && peer_process_gone()) {
      peer_quiet_.store(true, std::memory_order_release);
    }
    if (!peer_quiet_.load(std::memory_order_acquire)) {
      FERRY_ENGINE_LOG(kWarn, "local", ctx_->engine_id,
                       "%s: the peer did not confirm within peer_timeout that it stopped copying", where().c_str());
    }
  }
  close_settled_.store(true, std::memory_order_release);
  core_.fail(Status(Code::kCancelled, where() + ": connection closed"));
  shut_control();
  // No progress turn runs after this (one under way has ended), unless this
  // is that very turn: it goes on once close() returns.
  const bool in_own_turn = entry_ && !progress_.remove(*entry_);
  // A failed connection's copies stop too, while the application may hold
  // it for long (an orderly close did this in stop_copying).
  copier_.stop();
  copier_.forget(0);
  // Nothing reads the control stream or the channel any more: their
  // descriptors and the mapping go now, not when the application lets go of
  // the connection (it may hold a failed one for long). Inside this
  // connection's own turn the turn has yet to end: the destructor lets go
  // of them.
  if (!in_own_turn) {
    {
      platform::MutexLock lock(control_mu_);
      control_.reset();
    }
    let_go_of_channel();
  }
}

void LocalTransport::let_go_of_channel() {
  if (!channel_.close(Clock::now() + kChannelUsersWait)) {
    FERRY_ENGINE_LOG(kWarn, "local", ctx_->engine_id,
                     "%s: a thread was still posting on the channel %lld ms after the connection closed; the "
                     "channel stays mapped until the connection is destroyed",
                     where().c_str(), static_cast<long long>(kChannelUsersWait.count()));
  }
  // What waited for room in the ring would never go now: its bytes go back
  // to the budget.
  platform::MutexLock lock(out_mu_);
  for (const std::string& msg : outbox_) core_.budget().give(msg.size());
  outbox_.clear();
  outbox_size_.store(0, std::memory_order_release);
}

void LocalTransport::shut_control() {
  platform::MutexLock lock(control_mu_);
  control_.shutdown();
}

}  // namespace ferry::local
