// TcpTransport's control stream, both ways: frames written by the posting
// thread or queued for the control writer, and the control reader with the
// handlers of the frames it reads.
#include <sys/socket.h>

#include <optional>

#include "transport/tcp/tcp_internals.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {

using namespace internal;

using wire::FrameHeader;
using wire::FrameType;

Status TcpTransport::write_control(const FrameHeader& h, std::string_view aux, const core::SegmentList* payload,
                                   std::string_view prefix) {
  wire::HeaderBytes hb;
  encode_header(h, hb);
  std::vector<struct iovec> iov;
  iov.push_back({hb.data(), hb.size()});
  if (!aux.empty()) iov.push_back({const_cast<char*>(aux.data()), aux.size()});
  if (!prefix.empty()) iov.push_back({const_cast<char*>(prefix.data()), prefix.size()});
  std::optional<core::ChunkAccess> access;
  std::string staged;  // GPU payloads (small: the control stream carries at most inline_max) go through here
  if (payload != nullptr && payload->total() > 0) {
    access.emplace(*payload, 0, payload->total());
    if (!access->ok()) return Status(Code::kNotFound, "memory was deregistered before it was sent");
    std::vector<Piece> pieces;
    pieces_of(*payload, 0, payload->total(), pieces);
    if (staged_bytes(pieces) > 0) {
      staged.resize(payload->total());
      FERRY_RETURN_IF_ERROR(exchange(pieces, reinterpret_cast<uint8_t*>(staged.data()), /*to_buffer=*/true));
      iov.push_back({staged.data(), staged.size()});
    } else {
      payload->slice(0, payload->total(), iov);
    }
  }
  Status s;
  lock_control();
  // Once the connection failed its descriptor may be closed (and its number reused).
  s = core_.failed() ? Status(Code::kPeerLost, "the connection failed")
                     : platform::send_all(control_.fd(), iov.data(), static_cast<int>(iov.size()));
  unlock_control();
  if (!s.ok()) {
    Status lost(Code::kPeerLost, where() + ": control stream: " + s.message());
    core_.fail(lost);
    return lost;
  }
  last_tx_ns_.store(now_ns(), std::memory_order_relaxed);
  return Status();
}

void TcpTransport::queue_control(Outgoing out) {
  // Small replies go out at once when the stream is free and has room: a
  // hand-off to the control-transmit thread would add a wake-up to every
  // acknowledgement. Never blocks: if the lock is taken or the socket is
  // full, the frame is queued as usual. (Replies are independent of each
  // other, so their order does not matter.)
  if (!out.payload_op && out.aux.empty() && control_write_mu_.try_lock()) {
    ssize_t n = -1;
    Status s;
    wire::HeaderBytes hb;
    if (!core_.failed()) {
      encode_header(out.header, hb);
      n = ::send(control_.fd(), hb.data(), hb.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0 && n < static_cast<ssize_t>(hb.size())) {
        // A partial frame must be finished before anything else is written.
        struct iovec rest = {hb.data() + n, hb.size() - static_cast<size_t>(n)};
        s = platform::send_all(control_.fd(), &rest, 1);
      }
    }
    unlock_control();
    if (n > 0) {
      if (!s.ok()) {
        core_.fail(Status(Code::kPeerLost, where() + ": control stream: " + s.message()));
      } else {
        last_tx_ns_.store(now_ns(), std::memory_order_relaxed);
      }
      return;
    }
  }
  // Queued, it is held on the peer's behalf until the peer reads.
  size_t bytes = kReplyBytes + out.aux.size();
  if (!held_->take_reply(bytes)) {
    core_.fail(core_.exhausted("replies the peer does not read"));
    return;
  }
  out.charged = bytes;
  bool queued = false;
  {
    platform::MutexLock lock(out_mu_);
    if (!out_stopped_) {
      out_.push_back(std::move(out));
      queued = true;
    }
  }
  if (!queued) {
    held_->give_reply(bytes);
    return;
  }
  out_cv_.notify_one();
  out_parked_.wake_all();
}

void TcpTransport::ack(uint64_t op, const Status& s) {
  Outgoing o;
  if (!s.ok()) o.aux = s.message().substr(0, wire::kMaxReason);
  o.header = wire::encode(wire::Ack{op, static_cast<uint32_t>(s.code()), o.aux});
  queue_control(std::move(o));
}

void TcpTransport::control_tx_loop() {
  for (;;) {
    Outgoing o;
    {
      platform::UniqueLock lock(out_mu_);
      while (!out_stopped_ && out_.empty()) platform::wait_on(lock.native(), out_cv_, out_parked_);
      if (out_stopped_) return;
      o = std::move(out_.front());
      out_.pop_front();
      out_writing_ = true;
    }
    const core::SegmentList* payload = o.payload_op ? &o.payload_op->source : nullptr;
    if (payload != nullptr) o.header.payload_len = static_cast<uint32_t>(payload->total());
    Status s = write_control(o.header, o.aux, payload);
    held_->give_reply(std::exchange(o.charged, 0));
    if (!s.ok() && s.code() != Code::kPeerLost && o.payload_op) {
      // The memory of a read reply vanished (or could not be staged): tell the reader instead.
      std::string why = s.code() == Code::kNotFound ? "the exported memory was deregistered during the read"
                                                    : "the exported memory could not be read: " + s.message();
      why = why.substr(0, wire::kMaxReason);
      wire::DataChunk aborted = o.payload_op->data();
      aborted.aborted = true;
      aborted.code = static_cast<uint32_t>(s.code());
      aborted.reason = why;
      s = write_control(wire::encode(aborted), why, nullptr);
    }
    {
      platform::MutexLock lock(out_mu_);
      out_writing_ = false;
      if (out_.empty()) out_drained_cv_.notify_all();
    }
    if (!s.ok() && core_.failed()) return;
  }
}

void TcpTransport::control_rx_loop() {
  int fd = control_.fd();
  std::string aux;
  for (;;) {
    if (Status room = await_reply_room(); !room.ok()) {
      core_.fail(room);
      return;
    }
    wire::HeaderBytes hb;
    Status s = platform::recv_exact(fd, hb.data(), hb.size());
    if (!s.ok()) {
      core_.fail(Status(Code::kPeerLost, where() + ": control stream: " + s.message()));
      return;
    }
    last_rx_ns_.store(now_ns(), std::memory_order_relaxed);
    auto h = wire::decode_header(hb.data(), hb.size());
    if (!h.ok()) {
      core_.fail(h.status().with_context(where() + ": control stream"));
      return;
    }
    aux.resize(h->aux_len);
    if (h->aux_len > 0) s = platform::recv_exact(fd, aux.data(), aux.size());
    if (s.ok()) s = handle_control_frame(fd, *h, aux);
    if (!s.ok()) {
      core_.fail(s.code() == Code::kDataLoss ? s
                                             : Status(Code::kPeerLost, where() + ": control stream: " + s.message()));
      return;
    }
  }
}

Status TcpTransport::handle_control_frame(int fd, const FrameHeader& h, std::string& aux) {
  // Small bulk frames travel inline on the control stream: the landing's.
  if (h.type == FrameType::kData || h.type == FrameType::kWrite) return land_frame(fd, /*path=*/-1, h, aux);
  // A frame the decoder refuses fails the connection (data loss).
  auto refused = [&](const Status& s) { return s.with_context(where() + ": control stream"); };
  switch (h.type) {
    case FrameType::kHeartbeat: {
      auto m = wire::decode_heartbeat(h, aux);
      if (!m.ok()) return refused(m.status());
      if (m->wants_answer) answer_heartbeat();
      return Status();
    }
    case FrameType::kClose: {
      if (auto m = wire::decode_close(h, aux); !m.ok()) return refused(m.status());
      core_.set_closed_by_peer();
      core_.fail(Status(Code::kPeerLost, where() + ": the peer closed the connection"));
      return Status();
    }
    case FrameType::kEager: {
      auto m = wire::decode_eager(h, aux);
      return m.ok() ? handle_eager(fd, *m) : refused(m.status());
    }
    case FrameType::kRts: {
      auto m = wire::decode_rts(h, aux);
      return m.ok() ? handle_rts(*m) : refused(m.status());
    }
    case FrameType::kCts: {
      auto m = wire::decode_cts(h, aux);
      return m.ok() ? handle_cts(*m) : refused(m.status());
    }
    case FrameType::kAck: {
      auto m = wire::decode_ack(h, aux);
      return m.ok() ? handle_ack(*m) : refused(m.status());
    }
    case FrameType::kReadReq: {
      auto m = wire::decode_read_req(h, aux);
      return m.ok() ? handle_read_req(*m) : refused(m.status());
    }
    case FrameType::kNotify: {
      auto m = wire::decode_notify(h, aux);
      if (!m.ok()) return refused(m.status());
      // Confirmed once taken, before the application can see it: one that
      // closes the moment it sees the note would otherwise send CLOSE ahead
      // of the confirmation, and the sender's notify would fail although
      // the note arrived.
      const uint64_t op = m->op;
      Status queued = core_.notes().push_numbered(m->seq, m->skip, std::move(aux), [&] {
        if (op != 0) ack(op, Status());
      });
      return queued.ok() ? queued : fail_with(queued.with_context(where()));
    }
    case FrameType::kChunkAck: {
      auto m = wire::decode_chunk_ack(h, aux);
      if (!m.ok()) return refused(m.status());
      last_progress_ns_.store(now_ns(), std::memory_order_relaxed);
      chunks_.on_landed(static_cast<int>(m->path), m->landed);
      return Status();
    }
    default:
      return Status(Code::kDataLoss,
                    where() + ": unexpected " + std::string(frame_type_name(h.type)) + " frame after the handshake");
  }
}

Status TcpTransport::handle_eager(int fd, const wire::Eager& m) {
  const uint64_t size = m.size;
  std::optional<transport::PostedRecv> recv = core_.take_posted();
  if (recv && recv->dest.total() >= size && !stages(recv->dest)) {
    // The common case: straight from the socket into the posted buffer.
    Status s, stream;
    {
      core::ChunkAccess access(recv->dest, 0, size);
      if (access.ok()) {
        std::vector<struct iovec> iov;
        recv->dest.slice(0, size, iov);
        stream = platform::recv_all(fd, iov.data(), static_cast<int>(iov.size()));
      } else {
        stream = drain(fd, size);
        s = Status(Code::kNotFound, "receive buffer was deregistered before the message arrived");
      }
    }
    if (!stream.ok()) {
      // The stream broke mid-message: this receive, taken off the posted
      // ones, is no longer where the connection's failure would find it.
      recv->state->finish(stream.with_context(where()));
      return stream;
    }
    recv->state->set_bytes(size);
    ack(m.op, s);
    recv->state->finish(s);
    return Status();
  }
  std::string bytes(size, '\0');
  if (Status s = platform::recv_exact(fd, bytes.data(), bytes.size()); !s.ok()) {
    if (recv) recv->state->finish(s.with_context(where()));  // as above
    return s;
  }
  transport::ArrivedMessage msg;
  msg.op = m.op;
  msg.size = size;
  msg.eager = true;
  msg.bytes = std::move(bytes);
  if (recv) {
    core_.deliver(std::move(*recv), std::move(msg));  // refuses a buffer too small
    return Status();
  }
  // A receive posted while the bytes were read takes it there.
  if (Status s = core_.arrive(std::move(msg)); !s.ok()) return fail_with(s);
  return Status();
}

Status TcpTransport::handle_rts(const wire::Rts& m) {
  transport::ArrivedMessage msg;
  msg.op = m.op;
  msg.size = m.size;
  if (Status s = core_.arrive(std::move(msg)); !s.ok()) return fail_with(s);
  return Status();
}

Status TcpTransport::handle_cts(const wire::Cts& m) {
  std::shared_ptr<OutOp> out;
  {
    platform::MutexLock lock(send_mu_);
    auto it = awaiting_cts_.find(m.op);
    if (it == awaiting_cts_.end()) {
      return Status(Code::kDataLoss, where() + ": clear-to-send for unknown send " + std::to_string(m.op));
    }
    out = std::move(it->second);
    awaiting_cts_.erase(it);
    sending_[m.op] = out;
    // The peer's application took the message: its engine owes the rest.
    const int64_t now = now_ns();
    if (auto p = pending_.find(m.op); p != pending_.end()) p->second.owed_since_ns = now;
    last_progress_ns_.store(now, std::memory_order_relaxed);
  }
  out->frame = wire::DataChunk{.token = m.token};
  if (!chunks_.push(out)) out->state->finish(core_.usable());
  return Status();
}

Status TcpTransport::handle_ack(const wire::Ack& m) {
  std::shared_ptr<TransferState> state;
  Status answer = core_.peer_status(m.code, m.reason);
  last_progress_ns_.store(now_ns(), std::memory_order_relaxed);
  {
    platform::MutexLock send_lock(send_mu_);
    platform::MutexLock receive_lock(receive_mu_);
    auto it = pending_.find(m.op);
    if (it == pending_.end()) return Status();  // already failed or finished locally
    if (auto o = sending_.find(m.op); o != sending_.end()) {
      std::shared_ptr<OutOp> op = o->second.lock();
      if (op) {
        if (m.code == 0 && !chunks_.claimed_all(*op)) {
          return Status(Code::kDataLoss, where() + ": the peer acknowledged operation " + std::to_string(m.op) +
                                             " before all of it was sent");
        }
        if (ChunkQueue::acknowledged(*op)) return Status();  // repeated: the first one stands
        // A write this side aborted ends with its own reason (the peer's
        // refusal only says it is over); one the peer completed is done.
        if (m.code != 0 && !op->abort_reason.ok()) answer = op->abort_reason;
        if (m.code == 0 && op->note_seq() != 0) peer_tells_note_.erase(op->note_seq());  // delivered after all
        // Refused: the rest of it goes out empty, marked aborted.
        if (m.code != 0) chunks_.abort(op);
        // A path still sending a chunk of it finishes it (finish_acknowledged).
        if (!ChunkQueue::acknowledge(*op, answer)) return Status();
      }
      sending_.erase(o);
    }
    if (auto l = landings_.find(m.op); l != landings_.end()) {
      // A read: its DATA answers it, and completes it once every byte is in
      // place. An ACK may only refuse it, before any of its bytes came.
      // (Held here: erasing it below must not free the mutex locked next.)
      std::shared_ptr<Landing> landing = l->second;
      Landing& read = *landing;
      platform::MutexLock ll(read.mu);
      if (m.code == 0) {
        return Status(Code::kDataLoss, where() + ": the peer acknowledged read " + std::to_string(m.op) +
                                           " as done; a read is answered by its data");
      }
      if (read.arrivals.received() > 0 || read.arrivals.arriving()) {
        return Status(Code::kDataLoss,
                      where() + ": the peer refused read " + std::to_string(m.op) + " after its data began to land");
      }
      read.arrivals.stop();  // a chunk that comes after all the same is dropped
      held_->budget->give(std::exchange(read.charged, 0));
      landings_.erase(l);
    }
    state = std::move(it->second.state);
    pending_.erase(it);
    awaiting_cts_.erase(m.op);
  }
  state->finish_part(answer);
  return Status();
}

void TcpTransport::finish_acknowledged(const OutOp& op) {
  uint64_t id = op.is_write() ? op.write().op : op.state->id();
  bool was_pending;
  {
    platform::MutexLock lock(send_mu_);
    sending_.erase(id);
    was_pending = pending_.erase(id) > 0;
  }
  if (!was_pending) return;  // failed() finished it
  // The peer may have answered while the chunk was on its way; once the
  // connection failed, whether the chunk got out is not known.
  Status answer = op.answer;
  if (answer.ok() && core_.failed()) answer = core_.health();
  op.state->finish_part(answer);
}

Status TcpTransport::handle_read_req(const wire::ReadReq& m) {
  auto span = ctx_->registry.resolve_export(m.export_id, m.key, m.offset, m.size);
  if (!span.ok()) {
    ack(m.op, span.status());
    return Status();
  }
  auto out = std::make_shared<OutOp>();
  out->frame = wire::DataChunk{.token = m.op};
  out->source.add(std::move(span).value());
  out->paths = paths_for(out->source);
  out->chunk_bytes = chunk_for(out->source, out->paths);
  if (m.size <= ctx_->options.inline_max) {
    Outgoing o;
    o.header = wire::encode(out->data());
    o.payload_op = std::move(out);
    queue_control(std::move(o));  // counted there
  } else {
    if (!held_->take_reply(kReplyBytes)) return fail_with(core_.exhausted("replies the peer does not read"));
    out->hold = std::make_shared<ReplyHold>(held_, kReplyBytes);
    chunks_.push(std::move(out));
  }
  return Status();
}

}  // namespace ferry::tcp
