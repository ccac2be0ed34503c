// TcpTransport's outbound operations: sends, writes, reads and
// notifications as frames and queued chunks, and a receive meeting its
// message (the core has checked and resolved everything they carry).
#include <cstring>

#include "transport/tcp/tcp_internals.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {

using namespace internal;
using wire::FrameHeader;

bool TcpTransport::await_answer(uint64_t op, const std::shared_ptr<TransferState>& state, bool owed,
                                std::shared_ptr<OutOp> cts, std::shared_ptr<Landing> landing) {
  platform::MutexLock send_lock(send_mu_);
  platform::MutexLock receive_lock(receive_mu_);
  // failed() empties these tables after the latch is set: an entry added
  // later would never be answered.
  if (core_.failed()) return false;
  pending_.emplace(op, PendingOp{state, owed ? now_ns() : 0});
  if (cts) awaiting_cts_.emplace(op, std::move(cts));
  if (landing) landings_.emplace(op, std::move(landing));
  return true;
}

void TcpTransport::written_or_failed(uint64_t op, const Status& s, const std::shared_ptr<TransferState>& state,
                                     bool whole) {
  // kPeerLost failed the connection, which finishes the operation.
  if (s.ok() || s.code() == Code::kPeerLost) return;
  {
    platform::MutexLock lock(send_mu_);
    pending_.erase(op);
  }
  if (whole) {
    state->finish(s.with_context(where()));
  } else {
    state->finish_part(s.with_context(where()));
  }
}

void TcpTransport::start_send(const std::shared_ptr<TransferState>& state, core::SegmentList source) {
  uint64_t size = source.total();
  uint64_t op = state->id();
  bool eager = size <= ctx_->options.inline_max;
  std::shared_ptr<OutOp> out;
  if (!eager) {
    out = std::make_shared<OutOp>();
    out->source = std::move(source);
    out->state = state;
    out->paths = paths_for(out->source);
    out->chunk_bytes = chunk_for(out->source, out->paths);
  }
  // The peer's application decides when a send is received: nothing is
  // owed until its CTS.
  if (!await_answer(op, state, /*owed=*/false, out)) {
    state->finish(core_.usable());
    return;
  }
  FrameHeader h =
      eager ? wire::encode(wire::Eager{op, static_cast<uint32_t>(size)}) : wire::encode(wire::Rts{op, size});
  written_or_failed(op, write_control(h, {}, eager ? &source : nullptr), state, /*whole=*/true);
}

namespace {

// A write of `size` bytes into the peer's export at `item.offset`, as
// operation `op`; each chunk says its own offset and size.
wire::WriteChunk write_of(uint64_t op, const transport::RemoteItem& item, uint64_t size, uint64_t note_seq) {
  wire::WriteChunk w;
  w.op = op;
  w.export_id = item.remote.export_id;
  w.key = item.remote.key;
  w.offset = item.offset;
  w.total = size;
  w.note_seq = note_seq;  // every chunk carries it: any may arrive first
  return w;
}

}  // namespace

void TcpTransport::queue_chunks(uint64_t op, std::shared_ptr<OutOp> out) {
  std::shared_ptr<TransferState> state = out->state;
  {
    platform::MutexLock lock(send_mu_);
    sending_[op] = out;
  }
  if (!chunks_.push(std::move(out))) state->finish_part(core_.usable());
}

void TcpTransport::start_write(const std::shared_ptr<TransferState>& state, transport::RemoteItem item,
                               std::string_view note, uint64_t note_seq) {
  uint64_t size = item.local.total();
  uint64_t op = core_.next_op();
  if (!await_answer(op, state, /*owed=*/true)) {
    state->finish_part(core_.usable());
    return;
  }
  wire::WriteChunk w = write_of(op, item, size, note_seq);
  if (size <= ctx_->options.inline_max) {
    w.size = static_cast<uint32_t>(size);
    w.note = note;
    written_or_failed(op, write_control(wire::encode(w), note, &item.local), state, /*whole=*/false);
    return;
  }
  w.offset = 0;  // per chunk: remote_base + the chunk's offset
  auto out = std::make_shared<OutOp>();
  out->frame = w;
  out->source = std::move(item.local);
  out->remote_base = item.offset;
  out->first_aux = std::string(note);
  out->state = state;
  out->paths = paths_for(out->source);
  out->chunk_bytes = chunk_for(out->source, out->paths);
  queue_chunks(op, std::move(out));
}

void TcpTransport::start_write_batch(const std::shared_ptr<TransferState>& state, transport::WriteBatch batch,
                                     std::string_view note, uint64_t note_seq) {
  auto table = std::make_shared<BlockTable>();
  for (const transport::WriteBatch::Target& t : batch.targets) {
    table->add({t.remote.export_id, t.remote.key, t.offset, t.size});
  }
  start_blocks(state, std::move(table), std::move(batch.source), note, note_seq);
}

bool TcpTransport::start_pool_blocks(const std::shared_ptr<TransferState>& state, const transport::PreparedPools& pools,
                                     std::span<const Block> blocks, uint64_t /*bytes*/, std::string_view note,
                                     uint64_t note_seq) {
  start_blocks(state, BlockTable::over_pools(pools.local, pools.remote, blocks), {}, note, note_seq);
  return true;
}

void TcpTransport::start_blocks(const std::shared_ptr<TransferState>& state, std::shared_ptr<const BlockTable> table,
                                core::SegmentList source, std::string_view note, uint64_t note_seq) {
  if (table->total() == 0) {
    // Only empty blocks: nothing to move (a chunk must name at least one
    // block), so the batch is over once its notification is.
    if (note_seq != 0) {
      send_note(state, note_seq, note, /*caller_thread=*/true);
    } else {
      state->finish_part(Status());
    }
    return;
  }
  auto out = std::make_shared<OutOp>();
  out->source = std::move(source);
  uint64_t op = core_.next_op();
  if (!await_answer(op, state, /*owed=*/true)) {
    state->finish_part(core_.usable());
    return;
  }
  wire::WriteChunk w;
  w.op = op;
  w.total = table->total();
  w.note_seq = note_seq;  // every chunk carries it: any may arrive first
  if (w.total <= ctx_->options.inline_max && table->size() <= BlockTable::kMaxEntriesPerChunk) {
    // A small batch goes whole on the control stream, as a small write does.
    if (table->over_pools()) table->sources(0, w.total, out->source);
    std::string encoded;
    w.block_entries = static_cast<uint32_t>(table->encode(0, w.total, encoded));
    w.size = static_cast<uint32_t>(encoded.size() + w.total);
    w.note = note;
    written_or_failed(op, write_control(wire::encode(w), note, &out->source, encoded), state, /*whole=*/false);
    return;
  }
  out->frame = w;
  out->first_aux = std::string(note);
  out->state = state;
  bool staged = false;
  if (table->over_pools()) {
    // The paths near the first block's memory, as for the whole list.
    core::SegmentList first;
    table->sources(0, 1, first);
    out->paths = paths_for(first);
    staged = hooks_.stage_host || table->any_gpu_source();
  } else {
    out->paths = paths_for(out->source);
    staged = stages(out->source);
  }
  // One staged chunk a path (staged_chunk_bytes says why).
  uint64_t chunk = chunk_for(staged, w.total, out->paths, /*per_path=*/1);
  out->chunk_bytes = table->chunk_limit(chunk != 0 ? chunk : ctx_->options.chunk_bytes);
  out->blocks = std::move(table);
  queue_chunks(op, std::move(out));
}

void TcpTransport::start_read(const std::shared_ptr<TransferState>& state, transport::RemoteItem item) {
  uint64_t size = item.local.total();
  auto landing = std::make_shared<Landing>(state, std::move(item.local), size, /*reply=*/0, /*owed=*/0);
  uint64_t op = core_.next_op();
  if (!await_answer(op, state, /*owed=*/true, nullptr, landing)) {
    state->finish_part(core_.usable());
    return;
  }
  wire::ReadReq r{op, item.remote.export_id, item.remote.key, item.offset, landing->size};
  (void)write_control(wire::encode(r), {}, nullptr);  // a failure fails the connection, which finishes the read
}

void TcpTransport::send_note(const std::shared_ptr<TransferState>& state, uint64_t seq, std::string_view note,
                             bool caller_thread) {
  uint64_t op = core_.next_op();
  if (!await_answer(op, state, /*owed=*/false)) {
    state->finish(core_.usable());
    return;
  }
  FrameHeader h = wire::encode(wire::Notify{op, seq, /*skip=*/false, note});
  if (caller_thread) {
    (void)write_control(h, note, nullptr);  // a failure fails the connection, which finishes it
    return;
  }
  Outgoing o;
  o.header = h;
  o.aux = std::string(note);
  queue_control(std::move(o));
}

bool TcpTransport::stop_write(const std::shared_ptr<TransferState>& state) {
  std::shared_ptr<OutOp> op;
  uint64_t id = 0;
  {
    platform::MutexLock lock(send_mu_);
    for (const auto& [k, weak] : sending_) {
      std::shared_ptr<OutOp> o = weak.lock();
      if (o && o->state == state && o->is_write()) {
        op = std::move(o);
        id = k;
        break;
      }
    }
  }
  // A write not found here is on its way whole (on the control stream) or
  // answered already: it ends as it goes.
  if (op) {
    switch (chunks_.stop(op)) {
      case ChunkQueue::Stop::kNothingSent: {
        bool was_pending;
        {
          platform::MutexLock lock(send_mu_);
          was_pending = pending_.erase(id) > 0;
          sending_.erase(id);
        }
        // The peer saw nothing of it: the skip the write's end sends tells the note.
        if (was_pending) state->finish_part(Status(Code::kCancelled, "write cancelled before any of it was sent"));
        return was_pending;
      }
      case ChunkQueue::Stop::kAbortGoes: {
        platform::MutexLock lock(send_mu_);
        if (op->abort_reason.ok()) op->abort_reason = Status(Code::kCancelled, "write cancelled by the application");
        if (op->note_seq() != 0 && !op->first_aux.empty()) peer_tells_note_.insert(op->note_seq());
        break;
      }
      case ChunkQueue::Stop::kAbortedBefore:
        break;
    }
  }
  // The peer answers once none of the write's chunks lands any more.
  if (!state->wait(Clock::now() + ctx_->options.peer_timeout).ok() && !state->done()) {
    core_.fail(Status(Code::kPeerLost, where() + ": the peer did not answer a cancelled write within peer_timeout"));
    (void)state->wait(Clock::now() + ctx_->options.peer_timeout);
  }
  return state->done() && state->status().code() == Code::kCancelled;
}

bool TcpTransport::stop_landing(const std::shared_ptr<TransferState>& state) {
  std::vector<std::pair<uint64_t, std::shared_ptr<Landing>>> mine;
  {
    platform::MutexLock lock(receive_mu_);
    for (const auto& [token, l] : landings_) {
      if (l->state == state) mine.emplace_back(token, l);
    }
  }
  bool stopped = false;
  for (auto& [token, l] : mine) {
    bool over;
    {
      platform::MutexLock ll(l->mu);
      if (l->arrivals.complete() || l->arrivals.aborted()) continue;
      l->arrivals.stop();  // later chunks of it are drained, not landed
      l->stopped_here = true;
      if (l->error.ok()) l->error = Status(Code::kCancelled, "stopped by its caller while its data arrived");
      over = !l->arrivals.arriving();
      stopped = true;
    }
    // Otherwise the chunk still arriving ends it; a peer that stalls it is
    // cut off by tick within peer_timeout.
    if (over) finish_landing(token, l);
  }
  if (!stopped) return false;
  const Deadline bound = Clock::now() + 2 * ctx_->options.peer_timeout;
  if (!state->wait(bound).ok() && !state->done()) {
    // tick cuts a stalled chunk off; failing the connection also ends it.
    core_.fail(Status(Code::kPeerLost, where() + ": a stopped transfer still had a chunk landing after peer_timeout"));
    (void)state->wait(kNoDeadline);
  }
  return state->status().code() == Code::kCancelled;
}

void TcpTransport::skip_note(uint64_t seq, std::string_view note) {
  if (core_.failed()) return;
  {
    platform::MutexLock lock(send_mu_);
    if (peer_tells_note_.erase(seq) > 0) return;  // an aborted chunk of the write carried it
  }
  Outgoing o;
  o.aux = std::string(note);
  o.header = wire::encode(wire::Notify{/*op=*/0, seq, /*skip=*/true, o.aux});  // op 0: nothing to confirm
  queue_control(std::move(o));
}

void TcpTransport::match(transport::PostedRecv recv, transport::ArrivedMessage msg) {
  if (msg.eager) {
    complete_recv_now(recv, msg.op, msg.size, msg.bytes);
  } else {
    match_rendezvous(std::move(recv), msg.op, msg.size);
  }
}

void TcpTransport::refuse(const transport::ArrivedMessage& msg, const Status& why) { ack(msg.op, why); }

void TcpTransport::complete_recv_now(transport::PostedRecv& recv, uint64_t op, uint64_t size,
                                     const std::string& bytes) {
  Status s;
  {
    core::ChunkAccess access(recv.dest, 0, size);
    if (access.ok()) {
      s = copy_in(recv.dest, reinterpret_cast<const uint8_t*>(bytes.data()), size);
    } else {
      s = Status(Code::kNotFound, "receive buffer was deregistered before the message arrived");
    }
  }
  recv.state->set_bytes(size);
  ack(op, s);
  recv.state->finish(s);
}

void TcpTransport::match_rendezvous(transport::PostedRecv recv, uint64_t op, uint64_t size) {
  auto landing = std::make_shared<Landing>(recv.state, std::move(recv.dest), size, op, now_ns());
  uint64_t token = core_.next_op();
  bool up;
  {
    platform::MutexLock lock(receive_mu_);
    up = !core_.failed();  // see await_answer()
    if (up) landings_.emplace(token, landing);
  }
  if (!up) {
    landing->state->finish(core_.usable());
    return;
  }
  Outgoing o;
  o.header = wire::encode(wire::Cts{op, token});
  queue_control(std::move(o));
}

}  // namespace ferry::tcp
