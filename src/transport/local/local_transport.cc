// LocalTransport: construction, the doorbell, liveness and failure
// (operations are posted in local_posting.cc and local_one_sided.cc; the
// progress turn and the message handlers are in local_progress.cc).
#include "transport/local/local_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cinttypes>
#include <csignal>

#include "platform/log.h"
#include "transport/local/local_workers.h"

namespace ferry::local {

using wire::FrameHeader;
using wire::FrameType;

LocalTransport::LocalTransport(transport::ConnectionHost& core, LocalPeer peer, platform::Socket control,
                               ShmChannel channel)
    : core_(core),
      ctx_(&core.context()),
      peer_(std::move(peer)),
      control_(std::move(control)),
      channel_(std::move(channel)),
      gpu_kit_(ctx_->gpu_reserve ? std::make_shared<platform::GpuKit>(ctx_->gpu_reserve, ctx_->stream_signals)
                                 : nullptr),
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
          ctx_->local_workers->copies, ctx_->gather_kernels, ctx_->resident_gather, gpu_kit_),
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
  post(wire::encode(wire::Close{}));
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

Status LocalTransport::before_stream_wait() {
  if (!gpu_kit_) return Status();
  platform::GpuKitSize size;
  size.streams = 1;  // the copier's lane on each device, in each context
  // Its copies' marks in flight: one a copy the progress workers watch.
  size.events = 64;
  size.blocks[{platform::PinnedKind::kPlain, LocalCopier::kTableBytes}] = static_cast<int>(LocalCopier::kTables);
  return gpu_kit_->fill(size);
}

}  // namespace ferry::local
