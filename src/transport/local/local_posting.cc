// LocalTransport's outbound operations: control messages into the channel
// (or, while the ring is full, its outbox), a send and a receive meeting its
// message (which side copies, and how memory is described to the peer), and
// notifications. Writes and reads are in local_one_sided.cc.
#include <cstring>

#include "transport/local/local_transport.h"

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
  std::string msg = s.ok() ? std::string() : s.message().substr(0, wire::kMaxLocalReason);
  post(wire::encode(wire::LocalDone{id, static_cast<uint32_t>(s.code()), msg}), msg);
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
    expect(op, done);
    post(wire::encode(wire::Eager{op, static_cast<uint32_t>(size)}), {}, bytes);
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
  {
    platform::MutexLock lock(mu_);
    pending_sources_[op] = std::move(source);
  }
  post(wire::encode(wire::LocalRts{op, size, payload}), {}, payload);
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
    post(wire::encode(wire::LocalCts{msg.op, token, payload}), {}, payload);
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
  std::weak_ptr<transport::ConnectionHost> self = core_.weak_host();
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

// ---- notifications --------------------------------------------------------------------

void LocalTransport::post_note(uint64_t op, uint64_t seq, bool skip, std::string_view note) {
  post(wire::encode(wire::LocalNote{op, seq, skip, note}), note);
}

void LocalTransport::send_note(const std::shared_ptr<TransferState>& state, uint64_t seq, std::string_view note,
                               bool /*caller_thread: post() never blocks*/) {
  uint64_t op = core_.next_op();
  expect(op, [state](const Status& s) { state->finish(s); });
  post_note(op, seq, false, note);
}

void LocalTransport::skip_note(uint64_t seq, std::string_view note) { post_note(0, seq, true, note); }

}  // namespace ferry::local
