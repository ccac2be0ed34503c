// TcpTransport's inbound chunks: DATA and WRITE frames land straight in
// registered memory (GPU memory through the path's staging), each chunk
// counted once (a chunk resent after a path died is dropped, not landed
// again over newer bytes), and an operation ends when its last byte is in
// place. The loop that reads a path's frames, and the receiving of a
// chunk's bytes (in place or staged), are in tcp_path_reader.cc.
#include <cinttypes>

#include "platform/log.h"
#include "transport/tcp/tcp_internals.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {

using namespace internal;
using wire::FrameHeader;
using wire::FrameType;

namespace {

// Runs `abandon` when it goes, unless disarmed first: a chunk whose
// accounting never runs (its path broke off, its stager was dropped) still
// stops holding its operation. Shared by the copies of one completion.
class ArrivalGuard {
 public:
  explicit ArrivalGuard(std::function<void()> abandon) : abandon_(std::move(abandon)) {}
  ArrivalGuard(const ArrivalGuard&) = delete;
  ArrivalGuard& operator=(const ArrivalGuard&) = delete;
  ~ArrivalGuard() {
    if (abandon_) abandon_();
  }
  void disarm() { abandon_ = nullptr; }

 private:
  std::function<void()> abandon_;
};

}  // namespace

template <typename Account, typename Abandon>
TcpTransport::Landed TcpTransport::guarded(Account account, Abandon abandon) {
  auto guard = std::make_shared<ArrivalGuard>(std::move(abandon));
  return [account = std::move(account), guard](const Status& landed) mutable {
    guard->disarm();
    return account(landed);
  };
}

template <typename Account, typename Abandon>
Status TcpTransport::account_in_order(int path, Account account, Abandon abandon, const Status& landed) {
  // Host memory behind no copy is accounted at once, with nothing allocated
  // for it; behind a path's running GPU copies it waits its turn, guarded.
  if (!copies_pending(path)) return account(landed);
  return after_earlier(path, [f = guarded(std::move(account), std::move(abandon)), landed]() { return f(landed); });
}

Status TcpTransport::land_frame(int fd, int path, const FrameHeader& h, std::string& aux) {
  // A frame the decoder refuses fails the connection (data loss), named by stream.
  auto refused = [&](const Status& s) {
    return s.with_context(where() + (path < 0 ? ": control stream" : ": data stream " + std::to_string(path)));
  };
  switch (h.type) {
    case FrameType::kData: {
      auto m = wire::decode_data(h, aux);
      return m.ok() ? land_data(fd, path, *m) : refused(m.status());
    }
    case FrameType::kWrite: {
      auto m = wire::decode_write(h, aux);
      return m.ok() ? land_write(fd, path, *m, aux) : refused(m.status());
    }
    default:
      return Status(Code::kDataLoss, where() + ": " + std::string(frame_type_name(h.type)) + " frame on data stream " +
                                         std::to_string(path));
  }
}

Status TcpTransport::land_data(int fd, int path, const wire::DataChunk& m) {
  std::shared_ptr<Landing> l;
  {
    platform::MutexLock lock(receive_mu_);
    auto it = landings_.find(m.token);
    if (it != landings_.end()) l = it->second;
  }
  if (!l) {
    // The operation already ended (aborted or failed); its late bytes go nowhere.
    FERRY_ENGINE_LOG(kDebug, "tcp", ctx_->engine_id, "%s: %u bytes for finished token %" PRIu64 " dropped",
                     where().c_str(), m.size, m.token);
    return drain(fd, m.size);
  }
  if (m.aborted) {
    ChunkArrivals::Abort abort;
    {
      platform::MutexLock lock(l->mu);
      abort = l->arrivals.abort(m.offset, path);
      if (l->arrivals.aborted()) {
        l->error = core_.peer_status(m.code ? m.code : static_cast<uint32_t>(Code::kCancelled), "transfer aborted");
      }
    }
    if (abort.stalled_path >= 0) give_up_stalled_path(abort.stalled_path, path, m.offset);
    // Chunks still being written into the memory end first; the last of
    // them finishes the operation.
    if (abort.over) finish_landing(m.token, l);
    return drain(fd, m.size);
  }
  if (m.offset > l->size || m.size > l->size - m.offset) {
    return Status(Code::kDataLoss, where() + ": data chunk [" + std::to_string(m.offset) + ", +" +
                                       std::to_string(m.size) + ") lies outside its message of " +
                                       std::to_string(l->size) + " bytes");
  }
  if (m.size == 0 && l->size != 0) {
    // Only an empty message travels as an empty chunk; empty ones at every
    // offset would each be remembered.
    return Status(Code::kDataLoss, where() + ": empty data chunk at offset " + std::to_string(m.offset) +
                                       " of a message of " + std::to_string(l->size) + " bytes");
  }
  const uint64_t token = m.token, offset = m.offset, size = m.size;
  ChunkArrivals::Begin begin;
  bool over = false;
  {
    platform::MutexLock lock(l->mu);
    begin = l->arrivals.begin(offset, path);
    // The peer chooses how small the chunks are: each one's record counts.
    if (begin.land && !(over = !held_->budget->take(kArrivalBytes))) l->charged += kArrivalBytes;
    if (over) (void)l->arrivals.end(offset, path, 0, /*landed=*/false);
  }
  if (over) return fail_with(core_.exhausted("chunks of operations still arriving"));
  if (begin.stalled_path >= 0) give_up_stalled_path(begin.stalled_path, path, offset);
  if (!begin.land) return drain(fd, size);  // a resent chunk that had landed already, or aborted
  std::weak_ptr<transport::ConnectionHost> self = core_.weak_host();
  auto abandon = [this, self, token, l, offset, path] {
    auto core = self.lock();  // the transport lives as long as its core
    landing_chunk_abandoned(core ? this : nullptr, token, l, offset, path);
  };
  auto account = [this, l, token, offset, size, path](const Status& landed) -> Status {
    Result<bool> complete = false;
    {
      platform::MutexLock lock(l->mu);
      if (!landed.ok() && l->error.ok()) l->error = landed;
      complete = l->arrivals.end(offset, path, size, /*landed=*/true);
    }
    if (!complete.ok()) return complete.status().with_context(where() + ": message");
    if (*complete) finish_landing(token, l);
    return Status();
  };
  Result<Direct> direct = receive_direct(fd, path, l->dest, offset, size);
  if (!direct.ok()) {
    abandon();
    return direct.status();
  }
  switch (*direct) {
    case Direct::kInPlace:
      return account_in_order(path, std::move(account), std::move(abandon), Status());
    case Direct::kGone:
      return account_in_order(
          path, std::move(account), std::move(abandon),
          Status(Code::kNotFound, "destination memory was deregistered while data arrived (" + where() + ")"));
    case Direct::kStaged:
      break;
  }
  return receive_staged(fd, path, l->dest, offset, size, guarded(std::move(account), std::move(abandon)),
                        [this] { return "destination memory was deregistered while data arrived (" + where() + ")"; });
}

void TcpTransport::finish_landing(uint64_t token, const std::shared_ptr<Landing>& l) {
  Status s;
  bool orphaned, aborted, stopped_here;
  {
    platform::MutexLock lock(l->mu);
    s = l->error;
    orphaned = l->orphaned;
    aborted = l->arrivals.aborted();
    stopped_here = l->stopped_here;
    held_->budget->give(std::exchange(l->charged, 0));
  }
  // An orphan is off the tables already: failed() left its end to this, its
  // last chunk.
  if (!orphaned) {
    platform::MutexLock send_lock(send_mu_);
    platform::MutexLock receive_lock(receive_mu_);
    auto it = landings_.find(token);
    if (it == landings_.end() || it->second != l) return;
    landings_.erase(it);
    if (l->reply_op == 0) pending_.erase(token);
  }
  if (orphaned || aborted) {
    // A receive this side stopped tells its sender, whose send then fails;
    // one the sender aborted, or on a failed connection, needs no answer.
    if (stopped_here && !orphaned && l->reply_op != 0) ack(l->reply_op, s);
    l->state->finish_part(s);  // no bytes; one item of a vector operation
    return;
  }
  if (l->reply_op != 0) {  // a receive: its size is the message's (a read's was set when posted)
    l->state->set_bytes(l->size);
    ack(l->reply_op, s);
  }
  l->state->finish_part(s);
}

void TcpTransport::landing_chunk_abandoned(TcpTransport* conn, uint64_t token, const std::shared_ptr<Landing>& l,
                                           uint64_t offset, int path) {
  Result<bool> complete = false;
  Status error;
  {
    platform::MutexLock lock(l->mu);
    complete = l->arrivals.end(offset, path, 0, /*landed=*/false);
    error = l->error;
  }
  if (!complete.ok() || !*complete) return;
  if (conn != nullptr) {
    conn->finish_landing(token, l);
  } else {
    l->state->finish_part(error);  // the connection is going: nothing to answer, nothing to unlist
  }
}

void TcpTransport::give_up_stalled_path(int stalled, int path, uint64_t offset) {
  path_failed(stalled, Status(Code::kUnavailable, "the peer resent the chunk at offset " + std::to_string(offset) +
                                                      " on data path " + std::to_string(path) +
                                                      " while this path was still bringing it (the peer gave it up)"));
}

Status TcpTransport::land_write(int fd, int path, const wire::WriteChunk& m, std::string& note) {
  // Its decoder validated the frame. Where its bytes go, then whether they
  // land (a chunk seen before, an aborted or refused write), then landing
  // them, and accounting once they are in place (account_write_chunk).
  const uint64_t bytes = m.size - static_cast<uint64_t>(m.block_entries) * wire::kBlockEntryBytes;
  core::SegmentList dest;
  Status resolved = m.aborted ? Status(Code::kCancelled, "aborted") : Status();
  if (!m.aborted && m.block_entries != 0) {
    // The key and the bounds are checked before any state is kept for a write.
    FERRY_RETURN_IF_ERROR(receive_block_table(fd, path, m));
    resolved = resolve_blocks(path, dest);
  } else if (!m.aborted) {
    Result<core::MemorySpan> span = ctx_->registry.resolve_export(m.export_id, m.key, m.offset, m.size);
    resolved = span.status();
    if (span.ok()) dest.add(std::move(span).value());
  }
  WriteAdmission admitted = admit_write_chunk(m, note, resolved, path);
  if (!admitted.violation.ok()) return admitted.violation;
  if (admitted.over) return fail_with(core_.exhausted("writes still arriving"));
  if (admitted.stalled_path >= 0) give_up_stalled_path(admitted.stalled_path, path, m.offset);
  if (m.aborted) {
    if (admitted.answer_abort) {
      if (admitted.aborted_seq != 0) {
        Status told =
            core_.notes().push_numbered(admitted.aborted_seq, /*skip=*/true, std::move(admitted.aborted_note));
        if (!told.ok()) return fail_with(told.with_context(where()));
      }
      ack(m.op, aborted_by_initiator(m.op));
    }
    return drain(fd, bytes);  // an aborted chunk has none
  }
  // Drained outside the lock: a payload that stalls holds up nothing else.
  if (!admitted.refused.ok()) {
    FERRY_RETURN_IF_ERROR(drain(fd, bytes));
    // As for a write that failed: its notification's number is given up and
    // told as not delivered (nothing of the write lands: its later chunks
    // are dropped), and the initiator told. A chunk without the notification
    // leaves it to the initiator's skip, which brings it.
    if (m.note_seq != 0 && !note.empty()) {
      Status skipped = core_.notes().push_numbered(m.note_seq, /*skip=*/true, note);
      if (!skipped.ok()) return fail_with(skipped.with_context(where()));
    }
    ack(m.op, admitted.refused);
    return Status();
  }
  if (!admitted.land) return drain(fd, bytes);  // over, or a resent chunk that had landed already
  return land_write_bytes(fd, path, m, bytes, std::move(note), std::move(dest), resolved);
}

TcpTransport::WriteAdmission TcpTransport::admit_write_chunk(const wire::WriteChunk& m, const std::string& note,
                                                             const Status& resolved, int path) {
  WriteAdmission a;
  const uint64_t op = m.op;
  platform::MutexLock lock(receive_mu_);
  if (finished_writes_.count(op) > 0) return a;  // finished, or aborted with nothing of it still arriving
  auto it = incoming_.find(op);
  if (m.aborted) {
    // Chunks of it still on other paths are dropped from now on. It is over
    // once none is still being written into the export; a path still
    // bringing this chunk was given up by the peer (its late bytes must not
    // land where the peer may write again).
    ChunkArrivals::Abort abort =
        it != incoming_.end() ? it->second.arrivals.abort(m.offset, path) : ChunkArrivals::Abort{true, -1};
    a.stalled_path = abort.stalled_path;
    if (it != incoming_.end()) {
      // The aborted chunk carries the write's notification (one that landed may not have).
      if (m.note_seq != 0) it->second.note_seq = m.note_seq;
      if (it->second.notification.empty()) it->second.notification = note;
    }
    if (abort.over) {
      // Over, none of its chunks landing any more: its notification is told
      // as not delivered, and the initiator, which waits for that, answered.
      a.answer_abort = true;
      a.aborted_seq = it != incoming_.end() ? it->second.note_seq : m.note_seq;
      a.aborted_note = it != incoming_.end() ? std::move(it->second.notification) : note;
      if (it != incoming_.end()) {
        held_->budget->give(it->second.charged);
        incoming_.erase(it);
      }
      remember_finished_write(op);
    }
    return a;
  }
  const bool blocks = m.block_entries != 0;
  if (it == incoming_.end()) {
    // Its first chunk here: the write is refused whole (answered now, and
    // nothing of it kept), or recorded.
    a.refused = resolved;
    if (a.refused.ok() && !blocks) a.refused = ctx_->registry.resolve_export(m.export_id, m.key, 0, m.total).status();
    if (!a.refused.ok()) {
      remember_finished_write(op);  // its other chunks are dropped
      return a;
    }
    if (!held_->budget->take(kWriteBytes)) {
      a.over = true;
      return a;
    }
    it = incoming_.try_emplace(op).first;
    it->second.arrivals = ChunkArrivals(m.total);
    it->second.charged = kWriteBytes;
  }
  IncomingWrite& w = it->second;
  if (w.arrivals.total() != m.total) {
    a.violation =
        Status(Code::kDataLoss, where() + ": chunks of write " + std::to_string(op) + " disagree on its size");
    return a;
  }
  ChunkArrivals::Begin begin = w.arrivals.begin(m.offset, path);
  a.land = begin.land;
  a.stalled_path = begin.stalled_path;
  // The peer chooses how small the chunks are: each one's record counts.
  if (a.land && !held_->budget->take(kArrivalBytes + note.size())) {
    a.over = true;
    (void)w.arrivals.end(m.offset, path, 0, /*landed=*/false);
    a.land = false;
  } else if (a.land) {
    w.charged += kArrivalBytes + note.size();
  }
  return a;
}

Status TcpTransport::land_write_bytes(int fd, int path, const wire::WriteChunk& m, uint64_t bytes, std::string note,
                                      core::SegmentList dest, const Status& resolved) {
  const uint64_t op = m.op;
  const WriteChunkLanded chunk{m.offset, m.note_seq, bytes};
  std::weak_ptr<transport::ConnectionHost> self = core_.weak_host();
  auto abandon = [this, self, op, offset = m.offset, path] {
    if (auto core = self.lock()) write_chunk_abandoned(op, offset, path);  // the transport lives as long as its core
  };
  auto account = [this, op, chunk, path, note = std::move(note)](const Status& landed) mutable -> Status {
    return account_write_chunk(op, chunk, path, std::move(note), landed);
  };
  if (!resolved.ok()) {
    // Its memory went after the write was admitted: the bytes go nowhere,
    // and the write ends with the reason once all of it arrived.
    if (Status s = drain(fd, bytes); !s.ok()) {
      abandon();
      return s;
    }
    return account_in_order(path, std::move(account), std::move(abandon), resolved);
  }
  Result<Direct> direct = receive_direct(fd, path, dest, 0, dest.total());
  if (!direct.ok()) {
    abandon();
    return direct.status();
  }
  const uint64_t export_id = m.block_entries != 0 ? rx_scratch(path).blocks.front().export_id : m.export_id;
  auto gone = [export_id] { return "export " + std::to_string(export_id) + " was deregistered during the write"; };
  switch (*direct) {
    case Direct::kInPlace:
      return account_in_order(path, std::move(account), std::move(abandon), Status());
    case Direct::kGone:
      return account_in_order(path, std::move(account), std::move(abandon), Status(Code::kNotFound, gone()));
    case Direct::kStaged:
      break;
  }
  const uint64_t size = dest.total();
  return receive_staged(fd, path, std::move(dest), 0, size, guarded(std::move(account), std::move(abandon)), gone);
}

Status TcpTransport::account_write_chunk(uint64_t op, const WriteChunkLanded& chunk, int path, std::string note,
                                         const Status& landed) {
  IncomingWrite done;
  {
    platform::MutexLock lock(receive_mu_);
    if (finished_writes_.count(op) > 0) return Status();  // aborted while this chunk was copied
    auto it = incoming_.find(op);
    if (it == incoming_.end()) return Status();
    IncomingWrite& w = it->second;
    if (!note.empty()) w.notification = std::move(note);
    if (chunk.note_seq != 0) w.note_seq = chunk.note_seq;
    if (!landed.ok() && w.error.ok()) w.error = landed;
    Result<bool> complete = w.arrivals.end(chunk.offset, path, chunk.bytes, /*landed=*/true);
    if (!complete.ok()) return complete.status().with_context(where() + ": write " + std::to_string(op));
    if (!*complete) return Status();
    done = std::move(w);
    incoming_.erase(it);
    remember_finished_write(op);
  }
  held_->budget->give(done.charged);
  return complete_write(op, done);
}

Status TcpTransport::aborted_by_initiator(uint64_t op) {
  return Status(Code::kCancelled, "write " + std::to_string(op) + " was aborted by its initiator; " + where() +
                                      " lands none of it any more");
}

void TcpTransport::remember_finished_write(uint64_t op) {
  finished_writes_.insert(op);
  finished_order_.push_back(op);
  if (finished_order_.size() > kFinishedWritesKept) {
    finished_writes_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

void TcpTransport::write_chunk_abandoned(uint64_t op, uint64_t offset, int path) {
  IncomingWrite done;
  {
    platform::MutexLock lock(receive_mu_);
    if (finished_writes_.count(op) > 0) return;
    auto it = incoming_.find(op);
    if (it == incoming_.end()) return;
    Result<bool> complete = it->second.arrivals.end(offset, path, 0, /*landed=*/false);
    if (!complete.ok() || !*complete) return;
    done = std::move(it->second);
    incoming_.erase(it);
    remember_finished_write(op);
  }
  held_->budget->give(done.charged);
  if (Status s = complete_write(op, done); !s.ok()) core_.fail(s);
}

Status TcpTransport::complete_write(uint64_t op, IncomingWrite& done) {
  // The initiator aborted it: now that nothing of it lands any more, its
  // notification (the aborted chunk carried it) is told as not delivered,
  // and the initiator, which waits for that, is answered.
  if (done.arrivals.aborted()) {
    if (done.note_seq != 0) {
      Status told = core_.notes().push_numbered(done.note_seq, /*skip=*/true, std::move(done.notification));
      if (!told.ok()) return fail_with(told.with_context(where()));
    }
    ack(op, aborted_by_initiator(op));
    return Status();
  }
  if (done.note_seq != 0 || !done.notification.empty()) {
    Status queued = core_.notes().push_numbered(done.note_seq, !done.error.ok(), std::move(done.notification));
    if (!queued.ok()) return fail_with(queued.with_context(where()));
  }
  ack(op, done.error);
  return Status();
}

Status TcpTransport::receive_block_table(int fd, int path, const wire::WriteChunk& m) {
  // decode_write checked the count against the payload.
  RxScratch& scratch = rx_scratch(path);
  const size_t table_bytes = static_cast<size_t>(m.block_entries) * wire::kBlockEntryBytes;
  scratch.table.resize(table_bytes);
  FERRY_RETURN_IF_ERROR(platform::recv_exact(fd, scratch.table.data(), table_bytes));
  Status s = decode_block_table(scratch.table, m.block_entries, m.size - table_bytes, scratch.blocks);
  return s.ok() ? s : s.with_context(where() + ": chunk of write " + std::to_string(m.op));
}

Status TcpTransport::resolve_blocks(int path, core::SegmentList& dest) {
  // Blocks of one export follow each other: its key is checked once a run.
  Result<core::MemorySpan> whole = Status(Code::kNotFound, "no export yet");
  const RemoteBlock* run = nullptr;
  const std::vector<RemoteBlock>& blocks = rx_scratch(path).blocks;
  dest.reserve(blocks.size());
  for (const RemoteBlock& b : blocks) {
    if (run == nullptr || b.export_id != run->export_id || b.key != run->key) {
      whole = ctx_->registry.resolve_whole_export(b.export_id, b.key);
      if (!whole.ok()) return whole.status();
      run = &b;
    }
    if (b.offset > whole->size || b.size > whole->size - b.offset) {
      return core::within_export(*whole, b.offset, b.size, b.export_id).status();  // says why
    }
    // Borrows the run's reference: no count written per block (the paths
    // landing blocks of one pool at once would pass it between cores).
    dest.add(whole->region, whole->data + b.offset, static_cast<size_t>(b.size));
  }
  return Status();
}

}  // namespace ferry::tcp
