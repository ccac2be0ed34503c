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

void TcpTransport::ack(uint64_t op, const Status& s, uint8_t flags) {
  Outgoing o;
  o.header.type = FrameType::kAck;
  o.header.id = op;
  o.header.flags = flags;
  o.header.code = static_cast<uint32_t>(s.code());
  o.aux = s.message().substr(0, 1024);
  o.header.aux_len = static_cast<uint16_t>(o.aux.size());
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
      FrameHeader h = o.header;
      h.flags |= kFlagAborted;
      h.payload_len = 0;
      std::string why = s.code() == Code::kNotFound ? "the exported memory was deregistered during the read"
                                                    : "the exported memory could not be read: " + s.message();
      why = why.substr(0, 1024);
      h.aux_len = static_cast<uint16_t>(why.size());
      h.code = static_cast<uint32_t>(s.code());
      s = write_control(h, why, nullptr);
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
    if (s.ok()) s = handle_frame(fd, -1, *h, aux);
    if (!s.ok()) {
      core_.fail(s.code() == Code::kDataLoss ? s : Status(Code::kPeerLost, where() + ": control stream: " + s.message()));
      return;
    }
  }
}

Status TcpTransport::handle_frame(int fd, int path, const FrameHeader& h, std::string& aux) {
  bool on_control = path < 0;
  switch (h.type) {
    case FrameType::kData:
      return land_data(fd, path, h);
    case FrameType::kWrite:
      return land_write(fd, path, h, aux);
    default:
      break;
  }
  if (!on_control) {
    return Status(Code::kDataLoss, where() + ": " + std::string(frame_type_name(h.type)) + " frame on data stream " +
                                       std::to_string(path));
  }
  if (h.type != FrameType::kEager && h.payload_len != 0) {
    return Status(Code::kDataLoss, where() + ": " + std::string(frame_type_name(h.type)) + " frame with a payload");
  }
  switch (h.type) {
    case FrameType::kHeartbeat:
      if (quiet_when_idle_ && (h.flags & wire::kHeartbeatWantsAnswer) != 0) answer_heartbeat();
      return Status();
    case FrameType::kClose:
      core_.set_closed_by_peer();
      core_.fail(Status(Code::kPeerLost, where() + ": the peer closed the connection"));
      return Status();
    case FrameType::kEager:
      return handle_eager(fd, h);
    case FrameType::kRts:
      return handle_rts(h);
    case FrameType::kCts:
      return handle_cts(h);
    case FrameType::kAck:
      return handle_ack(h, aux);
    case FrameType::kReadReq:
      return handle_read_req(h);
    case FrameType::kNotify:
      // Confirmed once taken, before the application can see it: one that
      // closes the moment it sees the note would otherwise send CLOSE ahead
      // of the confirmation, and the sender's notify would fail although
      // the note arrived.
      {
        Status queued = core_.notes().push_numbered(h.e, (h.flags & kFlagNoteSkip) != 0, std::move(aux), [&] {
          if (h.id != 0) ack(h.id, Status());
        });
        return queued.ok() ? queued : fail_with(queued.with_context(where()));
      }
    case FrameType::kChunkAck:
      last_progress_ns_.store(now_ns(), std::memory_order_relaxed);
      chunks_.on_landed(static_cast<int>(h.a), h.b);
      return Status();
    default:
      return Status(Code::kDataLoss,
                    where() + ": unexpected " + std::string(frame_type_name(h.type)) + " frame after the handshake");
  }
}

Status TcpTransport::handle_eager(int fd, const FrameHeader& h) {
  if (h.payload_len != h.a) return Status(Code::kDataLoss, where() + ": eager message size and payload disagree");
  if (h.a > Options::kMaxInline) {
    // No engine sends one this large: a header that would make this side
    // allocate up to the frame limit before a byte of payload arrived.
    return Status(Code::kDataLoss, where() + ": eager message of " + std::to_string(h.a) +
                                       " bytes, more than any engine sends inline (" +
                                       std::to_string(Options::kMaxInline) + ")");
  }
  std::optional<transport::PostedRecv> recv = core_.take_posted();
  if (recv && recv->dest.total() >= h.a && !stages(recv->dest)) {
    // The common case: straight from the socket into the posted buffer.
    Status s, stream;
    {
      core::ChunkAccess access(recv->dest, 0, h.a);
      if (access.ok()) {
        std::vector<struct iovec> iov;
        recv->dest.slice(0, h.a, iov);
        stream = platform::recv_all(fd, iov.data(), static_cast<int>(iov.size()));
      } else {
        stream = drain(fd, h.a);
        s = Status(Code::kNotFound, "receive buffer was deregistered before the message arrived");
      }
    }
    if (!stream.ok()) {
      // The stream broke mid-message: this receive, taken off the posted
      // ones, is no longer where the connection's failure would find it.
      recv->state->finish(stream.with_context(where()));
      return stream;
    }
    recv->state->set_bytes(h.a);
    ack(h.id, s);
    recv->state->finish(s);
    return Status();
  }
  std::string bytes(h.a, '\0');
  if (Status s = platform::recv_exact(fd, bytes.data(), bytes.size()); !s.ok()) {
    if (recv) recv->state->finish(s.with_context(where()));  // as above
    return s;
  }
  transport::ArrivedMessage msg;
  msg.op = h.id;
  msg.size = h.a;
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

Status TcpTransport::handle_rts(const FrameHeader& h) {
  transport::ArrivedMessage msg;
  msg.op = h.id;
  msg.size = h.a;
  if (Status s = core_.arrive(std::move(msg)); !s.ok()) return fail_with(s);
  return Status();
}

Status TcpTransport::handle_cts(const FrameHeader& h) {
  std::shared_ptr<OutOp> out;
  {
    platform::MutexLock lock(mu_);
    auto it = awaiting_cts_.find(h.id);
    if (it == awaiting_cts_.end()) {
      return Status(Code::kDataLoss, where() + ": clear-to-send for unknown send " + std::to_string(h.id));
    }
    out = std::move(it->second);
    awaiting_cts_.erase(it);
    sending_[h.id] = out;
    // The peer's application took the message: its engine owes the rest.
    const int64_t now = now_ns();
    if (auto p = pending_.find(h.id); p != pending_.end()) p->second.owed_since_ns = now;
    last_progress_ns_.store(now, std::memory_order_relaxed);
  }
  out->header.type = FrameType::kData;
  out->header.id = h.a;
  if (!chunks_.push(out)) out->state->finish(core_.usable());
  return Status();
}

Status TcpTransport::handle_ack(const FrameHeader& h, std::string& aux) {
  std::shared_ptr<TransferState> state;
  Status answer = core_.peer_status(h.code, aux);
  last_progress_ns_.store(now_ns(), std::memory_order_relaxed);
  {
    platform::MutexLock lock(mu_);
    auto it = pending_.find(h.id);
    if (it == pending_.end()) return Status();  // already failed or finished locally
    if (auto o = sending_.find(h.id); o != sending_.end()) {
      std::shared_ptr<OutOp> op = o->second.lock();
      if (op) {
        if (h.code == 0 && !chunks_.claimed_all(*op)) {
          return Status(Code::kDataLoss, where() + ": the peer acknowledged operation " + std::to_string(h.id) +
                                             " before all of it was sent");
        }
        if (ChunkQueue::acknowledged(*op)) return Status();  // repeated: the first one stands
        // A write this side aborted ends with its own reason (the peer's
        // refusal only says it is over); one the peer completed is done.
        if (h.code != 0 && !op->abort_reason.ok()) answer = op->abort_reason;
        if (h.code == 0 && op->header.e != 0) peer_tells_note_.erase(op->header.e);  // delivered after all
        // Refused: the rest of it goes out empty, marked aborted.
        if (h.code != 0) chunks_.abort(op);
        // A path still sending a chunk of it finishes it (finish_acknowledged).
        if (!ChunkQueue::acknowledge(*op, answer)) return Status();
      }
      sending_.erase(o);
    }
    if (auto l = landings_.find(h.id); l != landings_.end()) {
      // A read: its DATA answers it, and completes it once every byte is in
      // place. An ACK may only refuse it, before any of its bytes came.
      // (Held here: erasing it below must not free the mutex locked next.)
      std::shared_ptr<Landing> landing = l->second;
      Landing& read = *landing;
      platform::MutexLock ll(read.mu);
      if (h.code == 0) {
        return Status(Code::kDataLoss, where() + ": the peer acknowledged read " + std::to_string(h.id) +
                                           " as done; a read is answered by its data");
      }
      if (read.arrivals.received() > 0 || read.arrivals.arriving()) {
        return Status(Code::kDataLoss,
                      where() + ": the peer refused read " + std::to_string(h.id) + " after its data began to land");
      }
      read.arrivals.stop();  // a chunk that comes after all the same is dropped
      held_->budget->give(std::exchange(read.charged, 0));
      landings_.erase(l);
    }
    state = std::move(it->second.state);
    pending_.erase(it);
    awaiting_cts_.erase(h.id);
  }
  state->finish_part(answer);
  return Status();
}

void TcpTransport::finish_acknowledged(const OutOp& op) {
  uint64_t id = op.header.type == FrameType::kData ? op.state->id() : op.header.id;
  bool was_pending;
  {
    platform::MutexLock lock(mu_);
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

Status TcpTransport::handle_read_req(const FrameHeader& h) {
  auto span = ctx_->registry.resolve_export(h.a, h.b, h.c, h.d);
  if (!span.ok()) {
    ack(h.id, span.status());
    return Status();
  }
  auto out = std::make_shared<OutOp>();
  out->header.type = FrameType::kData;
  out->header.id = h.id;
  out->source.add(std::move(span).value());
  out->paths = paths_for(out->source);
  out->chunk_bytes = chunk_for(out->source, out->paths);
  if (h.d <= ctx_->options.inline_max) {
    Outgoing o;
    o.header = out->header;
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
