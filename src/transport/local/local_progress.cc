// LocalTransport's progress turn (run by the engine's progress workers) and
// the handlers of the messages it reads from the channel (posting is in
// local_posting.cc and local_one_sided.cc).
#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <future>
#include <optional>
#include <thread>

#include "platform/log.h"
#include "transport/local/local_transport.h"
#include "wire/messages.h"

namespace ferry::local {

using wire::FrameHeader;
using wire::FrameType;

// ---- progress turn --------------------------------------------------------------------

bool LocalTransport::has_pending() {
  {
    platform::MutexLock lock(mu_);
    if (!expected_.empty()) return true;
  }
  return core_.has_posted();
}

bool LocalTransport::peer_gone() const {
  platform::MutexLock lock(control_mu_);
  if (control_.fd() < 0) return true;
  pollfd p{control_.fd(), POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) return true;
  char c;
  return ::recv(control_.fd(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

bool LocalTransport::next_message(std::string& msg) {
  if (channel_broken_) return false;
  Result<bool> r = channel_.receive(msg);
  if (r.ok()) return r.value();
  // Nothing after garbage can be trusted: the connection fails and the ring
  // is not read again.
  channel_broken_ = true;
  core_.fail(r.status().with_context(where()));
  return false;
}

ProgressPool::Client::Turn LocalTransport::turn(bool woken, bool hung_up) {
  Turn t;
  if (woken && drain_doorbell()) hung_up = true;
  bool did = flush_outbox();
  if (outbox_over_budget_.load(std::memory_order_acquire)) {
    core_.fail(Status(Code::kResourceExhausted,
                      where() +
                          ": the peer left more control messages unread in its channel than connection_memory_bytes (" +
                          std::to_string(ctx_->options.connection_memory_bytes) + ") holds"));
  }
  // Bounded: the worker's other connections wait for this turn to end.
  bool more = false;
  const auto began = Clock::now();
  std::string msg;
  for (int n = 1; finish_revokes() && next_message(msg); ++n) {
    did = true;
    Status s = handle(msg);
    if (!s.ok()) {
      core_.fail(s);
      break;
    }
    if (n >= kTurnMessages || Clock::now() - began > kTurnBudget) {
      more = true;
      break;
    }
  }
  more |= !revocations_.empty();
  did |= copier_.poll();
  if (hung_up) {
    peer_exited();
    did = true;
  }
  auto now = Clock::now();
  if (did) last_activity_ = now;
  // Polled again without sleeping while copies are in flight or right after
  // traffic: the next message or copy completion is microseconds away, a
  // sleep and wake-up would cost more than the whole transfer.
  auto quiet = now - last_activity_;
  t.did = did;
  t.hot = more || copier_.busy() || quiet < kSpinWindow || (quiet < kPendingSpinWindow && has_pending());
  // Messages waiting for room in the peer's ring: the peer makes room only
  // by reading, and wakes nobody when it does, so the worker retries them
  // (ProgressPool::kOutboxRetryMs) once the windows passed. Retrying without
  // a pause burnt a core for as long as a peer left its ring unread.
  t.waiting_for_room = outbox_size_.load(std::memory_order_acquire) != 0;
  return t;
}

Status LocalTransport::handle(const std::string& msg) {
  if (msg.size() < wire::kHeaderSize) return Status(Code::kDataLoss, where() + ": truncated message on the channel");
  auto hr = wire::decode_header(reinterpret_cast<const uint8_t*>(msg.data()), wire::kHeaderSize);
  if (!hr.ok()) return hr.status().with_context(where());
  const FrameHeader& h = *hr;
  if (wire::kHeaderSize + h.aux_len + static_cast<size_t>(h.payload_len) != msg.size()) {
    return Status(Code::kDataLoss, where() + ": message length disagrees with its header");
  }
  std::string_view aux(msg.data() + wire::kHeaderSize, h.aux_len);
  std::string_view payload(msg.data() + wire::kHeaderSize + h.aux_len, h.payload_len);
  // Each message's decoder refuses what its type does not carry.
  auto refused = [&](const Status& s) { return s.with_context(where()); };
  switch (h.type) {
    case FrameType::kEager: {
      auto m = wire::decode_eager(h, aux);
      if (!m.ok()) return refused(m.status());
      transport::ArrivedMessage u;
      u.op = m->op;
      u.size = m->size;
      u.eager = true;
      u.bytes.assign(payload);
      return core_.arrive(std::move(u));
    }
    case FrameType::kLocalRts: {
      auto m = wire::decode_local_rts(h, aux, payload);
      return m.ok() ? on_rts(*m) : refused(m.status());
    }
    case FrameType::kLocalCts: {
      auto m = wire::decode_local_cts(h, aux, payload);
      return m.ok() ? on_cts(*m) : refused(m.status());
    }
    case FrameType::kLocalDone: {
      auto m = wire::decode_local_done(h, aux, payload);
      return m.ok() ? on_done(m->id, m->code, m->reason) : refused(m.status());
    }
    case FrameType::kAck: {
      auto m = wire::decode_ack(h, aux);
      return m.ok() ? on_done(m->op, m->code, m->reason) : refused(m.status());
    }
    case FrameType::kLocalOpen: {
      auto m = wire::decode_local_open(h, aux, payload);
      return m.ok() ? on_open(*m) : refused(m.status());
    }
    case FrameType::kLocalExport: {
      auto m = wire::decode_local_export(h, aux, payload);
      return m.ok() ? on_export(*m) : refused(m.status());
    }
    case FrameType::kLocalPull: {
      auto m = wire::decode_local_pull(h, aux, payload);
      return m.ok() ? on_copy(/*pull=*/true, *m) : refused(m.status());
    }
    case FrameType::kLocalPush: {
      auto m = wire::decode_local_push(h, aux, payload);
      return m.ok() ? on_copy(/*pull=*/false, *m) : refused(m.status());
    }
    case FrameType::kLocalNote: {
      auto m = wire::decode_local_note(h, aux, payload);
      if (!m.ok()) return refused(m.status());
      // Confirm first: an application that closes the moment it sees the
      // note would otherwise send CLOSE ahead of the confirmation, and the
      // sender's notify would fail although the note arrived.
      if (m->op != 0) post(wire::encode(wire::Ack{m->op, 0, {}}));
      return core_.notes().push_numbered(m->seq, m->skip, std::string(m->note)).with_context(where());
    }
    case FrameType::kLocalRevoke: {
      auto m = wire::decode_local_revoke(h, aux, payload);
      return m.ok() ? on_revoke(*m) : refused(m.status());
    }
    case FrameType::kHeartbeat:
      if (auto m = wire::decode_heartbeat(h, aux); !m.ok()) return refused(m.status());
      return Status();
    case FrameType::kClose:
      if (auto m = wire::decode_close(h, aux); !m.ok()) return refused(m.status());
      // The peer's own copies ended before it sent this (close(), or its
      // answer to ours); this side's end before it answers, which the
      // peer's close() waits for.
      peer_quiet_.store(true, std::memory_order_release);
      core_.set_closed_by_peer();
      stop_copying(Status(Code::kPeerLost, where() + ": the peer closed the connection"));
      shut_control();
      return Status();
    default:
      return Status(Code::kDataLoss, where() + ": unexpected " + std::string(wire::frame_type_name(h.type)) +
                                         " message on the local channel");
  }
}

Status LocalTransport::on_done(uint64_t id, uint32_t code, std::string_view reason) {
  Completion c;
  {
    platform::MutexLock lock(mu_);
    auto it = expected_.find(id);
    if (it == expected_.end()) return Status();  // already failed locally
    c = std::move(it->second);
    expected_.erase(it);
    pending_sources_.erase(id);
  }
  // where() formats a string: only an error needs it.
  c(code == 0 ? Status() : core_.peer_status(code, reason));
  return Status();
}

Status LocalTransport::on_rts(const wire::LocalRts& m) {
  FERRY_ASSIGN_OR_RETURN(std::vector<SharedSpan> spans, decode_spans(m.spans));
  uint64_t total = 0;
  for (const SharedSpan& s : spans) total += s.length;
  if (total != m.size) return Status(Code::kDataLoss, where() + ": RTS spans do not add up to the message size");
  auto source = std::make_unique<SpansSource>();
  source->spans = std::move(spans);
  transport::ArrivedMessage u;
  u.op = m.op;
  u.size = m.size;
  u.source = std::move(source);
  return core_.arrive(std::move(u));
}

Status LocalTransport::on_cts(const wire::LocalCts& m) {
  FERRY_ASSIGN_OR_RETURN(std::vector<SharedSpan> spans, decode_spans(m.spans));
  core::SegmentList source;
  Completion done;
  {
    platform::MutexLock lock(mu_);
    auto it = pending_sources_.find(m.op);
    auto e = expected_.find(m.op);
    if (it == pending_sources_.end() || e == expected_.end()) {
      // The send already failed here; tell the receiver.
      const std::string_view why = "the send was withdrawn";
      post(wire::encode(wire::LocalDone{m.token, static_cast<uint32_t>(Code::kCancelled), why}), why);
      return Status();
    }
    source = std::move(it->second);
    pending_sources_.erase(it);
    done = std::move(e->second);
    expected_.erase(e);
  }
  uint64_t token = m.token;
  uint64_t size = source.total();
  std::weak_ptr<transport::ConnectionHost> self = core_.weak_host();
  auto finish = [this, self, token, done](const Status& st) {
    if (auto core = self.lock()) answer(token, st);  // the transport lives as long as its core
    done(st);
  };
  // Held until the copy ends (the completion owns it): dereg waits for it.
  auto access = std::make_shared<core::ChunkAccess>(source, 0, size);
  if (!access->ok()) {
    finish(Status(Code::kNotFound, where() + ": send buffer was deregistered"));
    return Status();
  }
  Status s = copier_.start(
      source, spans, size, true, [finish, access](const Status& st) { finish(st); }, LocalCopier::HostCopyBy::kHelpers);
  if (!s.ok()) finish(s.with_context(where()));
  return Status();
}

Status LocalTransport::on_open(const wire::LocalOpen& m) {
  wire::LocalExport r{.request = m.request, .export_id = m.export_id, .key = m.key};
  auto span = ctx_->registry.resolve_export(m.export_id, m.key, 0, m.length);
  // The region stays registered until the answer is posted: a dereg that
  // runs meanwhile waits, then finds the export recorded below and revokes
  // it after the answer (the ring keeps their order). Without the hold, it
  // could find nothing to revoke while the peer was about to cache it.
  core::SegmentList held;
  if (span.ok()) held.add(*span);
  std::optional<core::ChunkAccess> access;
  if (span.ok()) access.emplace(held, 0, span->size);
  std::vector<SharedSpan> spans;
  Status s = span.status();
  if (s.ok() && !access->ok()) s = Status(Code::kNotFound, "export " + std::to_string(m.export_id) + " was revoked");
  if (s.ok()) s = describe_span(*span, spans);
  auto refuse = [&](const Status& why) {
    const std::string reason = why.message().substr(0, wire::kMaxLocalReason);
    r.code = static_cast<uint32_t>(why.code());
    r.reason = reason;
    post(wire::encode(r), reason);
  };
  if (!s.ok()) {
    refuse(s);
    return Status();
  }
  {
    platform::MutexLock lock(mu_);
    shared_exports_[m.export_id] = span->region->region.id;
  }
  r.length = m.length;
  std::string payload;
  encode_spans(spans, payload);
  if (Status f = fits(payload, "opening this export"); !f.ok()) {
    refuse(f);
    return Status();
  }
  r.spans = payload;
  post(wire::encode(r), {}, payload);
  return Status();
}

Status LocalTransport::on_export(const wire::LocalExport& m) {
  auto key = std::make_pair(m.export_id, m.key);
  Result<const ExportInfo*> result = Status();
  Status malformed;
  std::vector<std::function<void(Result<const ExportInfo*>)>> waiters;
  {
    platform::MutexLock lock(mu_);
    auto w = opening_.find(key);
    if (w == opening_.end()) return Status();
    waiters = std::move(w->second);
    opening_.erase(w);
    if (m.code != 0) {
      result = core_.peer_status(m.code, m.reason);
    } else if (auto spans = decode_spans(m.spans); !spans.ok()) {
      // The waiters are no longer where fail() finds them: they hear it here.
      malformed = spans.status();
      result = malformed;
    } else {
      ExportInfo info{m.key, m.length, std::move(spans).value()};
      result = &(exports_[key] = std::move(info));
    }
  }
  platform::ReaderLock gate(revoke_mu_);
  for (auto& w : waiters) w(result);
  return malformed;
}

Status LocalTransport::on_copy(bool pull, const wire::LocalCopy& m) {
  // pull: the peer writes into our export; push: it reads from it.
  const uint64_t op = m.op;
  std::weak_ptr<transport::ConnectionHost> self = core_.weak_host();
  auto finish = [this, self, op](const Status& st) {
    if (auto core = self.lock()) answer(op, st);  // the transport lives as long as its core
  };
  auto spans = decode_spans(m.spans);
  if (!spans.ok()) return spans.status();
  auto span = ctx_->registry.resolve_export(m.export_id, m.key, m.offset, m.size);
  if (!span.ok()) {
    finish(span.status());
    return Status();
  }
  core::SegmentList list;
  list.add(*span);
  if (!LocalCopier::can_execute(list, *spans)) {
    finish(Status(Code::kUnimplemented, "neither side can copy between these memories in one step"));
    return Status();
  }
  // Held until the copy ends (the completion owns it): dereg of the export's
  // region waits for this side's own copy, as the revoke does for the peer's.
  auto access = std::make_shared<core::ChunkAccess>(list, 0, m.size);
  if (!access->ok()) {
    finish(Status(Code::kNotFound, "export " + std::to_string(m.export_id) + " was revoked"));
    return Status();
  }
  // A pull copies the initiator's bytes here (from remote); a push sends ours there.
  Status s = copier_.start(
      list, *spans, m.size, !pull, [finish, access](const Status& st) { finish(st); }, LocalCopier::HostCopyBy::kHelpers);
  if (!s.ok()) finish(s);
  return Status();
}

void LocalTransport::region_retired(uint64_t region_id) {
  std::vector<uint64_t> exports, allocs;
  bool received_into = false;
  {
    platform::MutexLock lock(mu_);
    received_into = shared_receives_.erase(region_id) != 0;
    for (auto it = shared_exports_.begin(); it != shared_exports_.end();) {
      if (it->second == region_id) {
        exports.push_back(it->first);
        it = shared_exports_.erase(it);
      } else {
        ++it;
      }
    }
    auto a = shared_allocs_.find(region_id);
    if (a != shared_allocs_.end()) {
      allocs.assign(a->second.begin(), a->second.end());
      shared_allocs_.erase(a);
    }
  }
  if (exports.empty() && allocs.empty() && !received_into) return;
  if (!core_.failed()) {
    std::string payload;
    for (uint64_t v : exports) payload.append(reinterpret_cast<const char*>(&v), 8);
    for (uint64_t v : allocs) payload.append(reinterpret_cast<const char*>(&v), 8);
    // The peer copies into our memory itself, so "no byte lands after dereg"
    // needs its word: it stops using the region, lets its copies finish, and
    // answers. A peer that never answers is lost within peer_timeout. For a
    // receive buffer alone the list is empty: the peer handles our CTS
    // before this message and its copies end before it answers.
    auto answered = std::make_shared<std::promise<Status>>();
    const wire::LocalRevoke revoke{core_.next_op(), exports.size(), payload};
    expect(revoke.request, [answered](const Status& s) { answered->set_value(s); });
    post(wire::encode(revoke), {}, payload);
    auto answer = answered->get_future();
    if (answer.wait_for(ctx_->options.peer_timeout) != std::future_status::ready) {
      core_.fail(
          Status(Code::kPeerLost, where() + ": the peer did not confirm that it stopped using a deregistered region"));
    } else if (answer.get().ok()) {
      return;
    }
    // The connection failed before the peer answered (a close on another
    // thread, say): what the failure settled decides, below.
  }
  settle_after_failure(region_id);
}

void LocalTransport::settle_after_failure(uint64_t region_id) {
  if (core_.closing()) {
    // A close under way on another thread waits for the peer to stop
    // copying; the dereg must not return before that is settled (close()
    // bounds it: its own copies end, and the peer gets peer_timeout).
    while (!close_settled_.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  // A peer that closed in order, or exited, copies no more; one lost
  // otherwise (silent past peer_timeout, garbage) cannot be asked, and may
  // still be copying if it is alive.
  if (!peer_quiet_.load(std::memory_order_acquire)) {
    FERRY_ENGINE_LOG(kWarn, "local", ctx_->engine_id,
                     "%s: region %llu was shared with a peer lost without confirming it stopped copying (%s); "
                     "if that process is still alive it may still write into the region",
                     where().c_str(), static_cast<unsigned long long>(region_id), core_.usable().message().c_str());
  }
}

Status LocalTransport::on_revoke(const wire::LocalRevoke& m) {
  // decode_local_revoke checked the count against the payload.
  std::string_view payload = m.values;
  std::vector<uint64_t> values(payload.size() / 8);
  // memcpy takes no null pointer, not even for 0 bytes (an empty revoke).
  if (!values.empty()) std::memcpy(values.data(), payload.data(), payload.size());
  Revocation r;
  r.id = m.request;
  r.exports.assign(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(m.exports));
  r.allocs.assign(values.begin() + static_cast<std::ptrdiff_t>(m.exports), values.end());
  revocations_.push_back(std::move(r));
  (void)finish_revokes();
  return Status();
}

bool LocalTransport::finish_revokes() {
  while (!revocations_.empty()) {
    Revocation& r = revocations_.front();
    if (!r.exports_gone) {
      // Exclusive: no application thread is between finding an export and
      // starting its copy (run_item holds the shared side, for as long as a
      // host copy of its own takes): tried, not waited for.
      if (!revoke_mu_.try_lock()) return false;
      {
        platform::MutexLock lock(mu_);
        for (uint64_t e : r.exports) {
          for (auto it = exports_.begin(); it != exports_.end();) {
            it = it->first.first == e ? exports_.erase(it) : std::next(it);
          }
        }
      }
      revoke_mu_.unlock();
      r.exports_gone = true;
    }
    // Copies handed to the helpers, and GPU copies, end on their own (the
    // turns poll the GPU's); the answer waits for them.
    if (!copier_.settled()) return false;
    copier_.drain();  // settled: at once
    for (uint64_t a : r.allocs) copier_.forget(a);
    answer(r.id, Status());
    revocations_.pop_front();
  }
  return true;
}

}  // namespace ferry::local
