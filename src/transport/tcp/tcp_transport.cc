// TcpTransport: construction, its threads' lifecycle, liveness (silence,
// heartbeats, paths that die) and failure.
#include "transport/tcp/tcp_transport.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cinttypes>
#include <unordered_set>

#include "platform/log.h"
#include "platform/thread.h"
#include "transport/tcp/io_pool.h"
#include "transport/tcp/tcp_internals.h"

namespace ferry::tcp {

using namespace internal;
using wire::FrameHeader;
using wire::FrameType;

bool TcpTransport::Held::take_reply(size_t n) {
  if (!budget->take(n)) return false;
  replies.fetch_add(n, std::memory_order_relaxed);
  return true;
}

void TcpTransport::Held::give_reply(size_t n) {
  budget->give(n);
  size_t before = replies.fetch_sub(n, std::memory_order_relaxed);
  if (before > reply_cap && before - n <= reply_cap) wake();
}

TcpTransport::TcpTransport(transport::ConnectionHost& core, PeerInfo peer, platform::Socket control,
                           std::vector<platform::Socket> data, std::vector<PathInfo> paths,
                           std::unique_ptr<core::Admission::Ticket> ticket)
    : core_(core),
      ctx_(&core.context()),
      peer_(std::move(peer)),
      control_(std::move(control)),
      data_(std::move(data)),
      paths_(std::move(paths)),
      path_dead_(new std::atomic<bool>[data_.size()]),
      chunks_(ctx_->options.chunk_bytes, ctx_->options.window, static_cast<int>(data_.size()),
              ctx_->options.path_policy == PathPolicy::kAdaptive &&
                  governor_engages(static_cast<int>(data_.size()), platform::usable_cpu_count()),
              governor_start(static_cast<int>(data_.size()), platform::usable_cpu_count())),
      ticket_(std::move(ticket)),
      landed_chunks_(data_.size(), 0),
      hooks_(staging_hooks()),
      gpu_kit_(ctx_->gpu_reserve ? std::make_shared<platform::GpuKit>(ctx_->gpu_reserve, ctx_->stream_signals)
                                 : nullptr),
      rx_stage_(data_.size()),
      rx_scratch_(data_.size() + 1),
      held_(std::make_shared<Held>(core.shared_budget())) {
  frame_since_ns_.reset(new std::atomic<int64_t>[data_.size()]);
  for (size_t p = 0; p < data_.size(); ++p) {
    path_dead_[p] = false;
    frame_since_ns_[p] = 0;
    auto node = p < paths_.size() ? ctx_->nic_nodes.find(paths_[p].nic) : ctx_->nic_nodes.end();
    path_nodes_.push_back(node == ctx_->nic_nodes.end() ? -1 : node->second);
    if (ctx_->metrics) path_meters_.push_back(ctx_->metrics->nic_meter(p < paths_.size() ? paths_[p].nic : ""));
  }
  last_rx_ns_ = now_ns();
  last_tx_ns_ = now_ns();
  last_progress_ns_ = now_ns();
}

// The core closes first (its destructor), which joins every worker.
TcpTransport::~TcpTransport() = default;

std::shared_ptr<transport::ConnectionCore> TcpTransport::connection(
    const std::shared_ptr<core::EngineContext>& ctx, uint64_t id, PeerInfo peer, platform::Socket control,
    std::vector<platform::Socket> data, std::vector<PathInfo> paths, std::unique_ptr<core::Admission::Ticket> ticket) {
  transport::PeerIdentity who{peer.engine_id, peer.address, describe(id, peer)};
  return transport::ConnectionCore::create(ctx, id, std::move(who), [&](transport::ConnectionCore& core) {
    return std::make_unique<TcpTransport>(core, std::move(peer), std::move(control), std::move(data), std::move(paths),
                                          std::move(ticket));
  });
}

std::string TcpTransport::describe(uint64_t id, const PeerInfo& peer) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "connection %" PRIu64 " to %s (engine %016" PRIx64 ")", id, peer.address.c_str(),
                peer.engine_id);
  return buf;
}

Status TcpTransport::start() {
  Status st;
  Result<IoPool*> pool = io_pool(*ctx_);
  if (!pool.ok()) st = pool.status().with_context(where());
  // Only the workers' fibers use the data streams from now on: a send or
  // splice that finds no room returns at once and the fiber parks.
  for (auto& d : data_) {
    int flags = ::fcntl(d.fd(), F_GETFL);
    if (st.ok() && (flags < 0 || ::fcntl(d.fd(), F_SETFL, flags | O_NONBLOCK) != 0)) {
      st = Status(Code::kInternal, where() + ": cannot make a data stream non-blocking");
    }
  }
  if (st.ok()) {
    // A quiet connection sends no heartbeats: the kernel probes the peer's
    // host after peer_timeout without traffic, three times a third of it
    // apart, so a vanished host fails it within about twice peer_timeout.
    auto idle = std::chrono::ceil<std::chrono::seconds>(ctx_->options.peer_timeout);
    st = platform::keep_alive(control_, idle, std::max(idle / 3, std::chrono::seconds(1)), 3).with_context(where());
  }
  auto nic = [this](size_t p) { return p < paths_.size() ? paths_[p].nic : std::string(); };
  if (st.ok()) st = spawn((*pool)->pick(IoPool::Role::kRx, nic(0)), [this] { control_rx_loop(); });
  if (st.ok()) st = spawn((*pool)->pick(IoPool::Role::kTx, nic(0)), [this] { control_tx_loop(); });
  for (int p = 0; st.ok() && p < static_cast<int>(data_.size()); ++p) {
    st = spawn((*pool)->pick(IoPool::Role::kTx, nic(static_cast<size_t>(p))), [this, p] { path_tx_loop(p); });
    if (st.ok())
      st = spawn((*pool)->pick(IoPool::Role::kRx, nic(static_cast<size_t>(p))), [this, p] { path_rx_loop(p); });
  }
  worker_done();
  if (!st.ok()) {
    FERRY_ENGINE_LOG(kWarn, "tcp", ctx_->engine_id, "%s", st.to_string().c_str());
    return st;
  }
  FERRY_ENGINE_LOG(kInfo, "tcp", ctx_->engine_id, "%s up with %zu data streams", where().c_str(), data_.size());
  for (size_t p = 0; p < paths_.size(); ++p) {
    FERRY_ENGINE_LOG(kDebug, "tcp", ctx_->engine_id, "%s path %zu: %s", where().c_str(), p, paths_[p].name.c_str());
  }
  return Status();
}

Status TcpTransport::spawn(platform::FiberWorker& worker, std::function<void()> loop) {
  workers_.fetch_add(1, std::memory_order_relaxed);
  // Listed before it can run: close() must find it. Counted as one of the
  // workers that use the sockets until it ends.
  platform::MutexLock lock(fibers_mu_);
  auto task = worker.spawn([this, loop = std::move(loop)] {
    loop();
    if (platform::FiberWorker* w = platform::FiberWorker::current()) w->forget_fd();
    worker_done();
    platform::MutexLock lock(fibers_mu_);
    auto self = std::find(fibers_.begin(), fibers_.end(), platform::FiberWorker::current_task());
    if (self != fibers_.end()) fibers_.erase(self);
    fibers_cv_.notify_all();
  });
  if (!task.ok()) {
    workers_.fetch_sub(1, std::memory_order_relaxed);
    return task.status().with_context(where());
  }
  fibers_.push_back(task->get());
  return Status();
}

bool TcpTransport::await_fibers() {
  platform::FiberTask* me = platform::FiberWorker::current_task();
  bool mine;
  {
    platform::MutexLock lock(fibers_mu_);
    mine = me != nullptr && std::find(fibers_.begin(), fibers_.end(), me) != fibers_.end();
  }
  const size_t left = mine ? 1 : 0;
  auto done = [&] {
    platform::MutexLock lock(fibers_mu_);
    return fibers_.size() <= left;
  };
  if (platform::FiberWorker* w = platform::FiberWorker::current(); w != nullptr && me != nullptr) {
    // On a worker: the fibers waited for may be parked on this very thread.
    w->run_until(done);
  } else {
    platform::UniqueLock lock(fibers_mu_);
    fibers_cv_.wait(lock.native(), [&]() REQUIRES(fibers_mu_) { return fibers_.size() <= left; });
  }
  return !mine;
}

void TcpTransport::worker_done() {
  // The control reader ends only with the connection, so the last one out
  // finds it failed unless a start failed; then close() releases.
  if (workers_.fetch_sub(1, std::memory_order_acq_rel) == 1 && core_.failed()) {
    release_sockets();
  }
}

void TcpTransport::release_sockets() {
  {
    // An application thread may be writing a frame (failed() has shut the
    // stream down, so it returns soon); never the other order: failed() takes
    // sockets_mu_ to wake it.
    lock_control();
    platform::MutexLock lock(sockets_mu_);
    bool closed = sockets_closed_;
    sockets_closed_ = true;
    if (!closed) {
      control_.reset();
      for (auto& d : data_) d.reset();
    }
    unlock_control();
    if (closed) return;
  }
  if (ticket_) ticket_->release();
}

Status TcpTransport::fail_with(const Status& why) {
  core_.fail(why);
  return why;
}

Status TcpTransport::await_reply_room() {
  // A connection that failed takes nothing more from its peer: what a reader
  // had not read yet (a pause below leaves frames behind it) is not landed.
  if (core_.failed()) return core_.health();
  if (held_->replies.load(std::memory_order_relaxed) <= held_->reply_cap) return Status();
  auto room = [&] { return core_.failed() || held_->replies.load(std::memory_order_relaxed) <= held_->reply_cap; };
  bool waited;
  if (std::shared_ptr<platform::FiberTask> task = platform::current_task_shared()) {
    // A reader's fiber parks (its socket is not watched meanwhile: nothing
    // more is read from the peer) until Held::wake or peer_timeout.
    const auto deadline = std::chrono::steady_clock::now() + ctx_->options.peer_timeout;
    waited = true;
    for (;;) {
      {
        platform::MutexLock lock(held_->mu);
        if (room()) break;
        held_->parked.add(task);
      }
      bool timed_out = task->worker->park(deadline, true);
      held_->parked.remove(task.get());
      if (timed_out && !room()) {
        waited = false;
        break;
      }
    }
  } else {
    platform::UniqueLock lock(held_->mu);
    waited = held_->room.wait_for(lock.native(), ctx_->options.peer_timeout, room);
  }
  if (waited) {
    if (core_.failed()) return core_.health();
    last_rx_ns_.store(now_ns(), std::memory_order_relaxed);  // the pause was ours, not the peer's silence
    return Status();
  }
  return Status(Code::kResourceExhausted,
                where() + ": replies the peer does not read: " + std::to_string(held_->replies.load()) +
                    " bytes of them stayed queued past their cap (a quarter of connection_memory_bytes, " +
                    std::to_string(held_->reply_cap) + " bytes) for peer_timeout (" +
                    std::to_string(ctx_->options.peer_timeout.count()) + " ms)");
}

bool TcpTransport::waits_on_peer() {
  if (core_.has_posted()) return true;
  platform::MutexLock send_lock(send_mu_);
  platform::MutexLock receive_lock(receive_mu_);
  return !pending_.empty() || !landings_.empty();
}

void TcpTransport::answer_heartbeat() {
  const int64_t t = now_ns();
  const int64_t gap =
      std::chrono::duration_cast<std::chrono::nanoseconds>(ctx_->options.heartbeat_interval).count() / 2;
  if (t - last_answer_ns_.load(std::memory_order_relaxed) < gap) return;
  last_answer_ns_.store(t, std::memory_order_relaxed);
  Outgoing hb;
  hb.header = wire::encode(wire::Heartbeat{});
  queue_control(std::move(hb));
}

void TcpTransport::tick(Clock::time_point now) {
  if (core_.failed()) return;
  int64_t t = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  int64_t heard = last_rx_ns_.load(std::memory_order_relaxed);
  // A peer owes no sign of life while nothing waits on it; once something
  // does, it has peer_timeout from then to answer the heartbeats that ask it to.
  const bool waiting = waits_on_peer();
  {
    int64_t since = waiting_since_ns_.load(std::memory_order_relaxed);
    since = !waiting ? 0 : (since == 0 ? t : since);
    waiting_since_ns_.store(since, std::memory_order_relaxed);
    heard = std::max(heard, since);
  }
  int64_t silent = t - heard;
  const Options& o = ctx_->options;
  // While replies the peer does not read are over their cap, this side
  // stopped reading, and a reader ends it (await_reply_room) if they stay so.
  bool paused = held_->replies.load(std::memory_order_relaxed) > held_->reply_cap;
  if (waiting && !paused && silent > std::chrono::duration_cast<std::chrono::nanoseconds>(o.peer_timeout).count()) {
    core_.fail(Status(Code::kPeerLost, where() + ": no traffic from the peer for " + std::to_string(silent / 1000000) +
                                           " ms (peer_timeout " + std::to_string(o.peer_timeout.count()) +
                                           " ms): stopped, partitioned or overloaded"));
    return;
  }
  const int64_t limit = std::chrono::duration_cast<std::chrono::nanoseconds>(o.peer_timeout).count();
  // A frame that began on a data path must arrive whole within
  // peer_timeout: the control stream's heartbeats say nothing about it, and
  // its reader may hold a region's lock (dereg waits for it). The peer
  // resends what the path carried on the others.
  for (size_t p = 0; p < data_.size(); ++p) {
    int64_t since = frame_since_ns_[p].load(std::memory_order_relaxed);
    if (since != 0 && t - since > limit && !path_dead_[p].load()) {
      path_failed(static_cast<int>(p),
                  Status(Code::kPeerLost, "a frame stalled mid-way for " + std::to_string((t - since) / 1000000) +
                                              " ms (peer_timeout " + std::to_string(o.peer_timeout.count()) + " ms)"));
      if (core_.failed()) return;
    }
  }
  if (Status owed = check_owed(t); !owed.ok()) {
    core_.fail(owed);
    return;
  }
  int64_t closed = paths_closed_ns_.load(std::memory_order_acquire);
  if (closed != 0 && t - closed > kControlGraceNs) {
    Status down;
    {
      platform::MutexLock lock(paths_down_mu_);
      down = all_paths_down_;
    }
    core_.fail(down);
    return;
  }
  if (!waiting) return;
  int64_t idle = t - last_tx_ns_.load(std::memory_order_relaxed);
  if (idle >= std::chrono::duration_cast<std::chrono::nanoseconds>(o.heartbeat_interval).count()) {
    Outgoing hb;
    hb.header = wire::encode(wire::Heartbeat{/*wants_answer=*/true});
    queue_control(std::move(hb));
  }
}

Status TcpTransport::check_owed(int64_t now_ns) {
  const int64_t limit = std::chrono::duration_cast<std::chrono::nanoseconds>(ctx_->options.peer_timeout).count();
  int64_t progress = last_progress_ns_.load(std::memory_order_relaxed);
  // A frame on its way is progress (its own stall is cut off above).
  for (size_t p = 0; p < data_.size(); ++p) {
    if (frame_since_ns_[p].load(std::memory_order_relaxed) != 0) progress = now_ns;
  }
  if (now_ns - progress <= limit) return Status();
  int64_t oldest = 0;
  size_t answers = 0;  // acknowledgements of sends, writes and reads
  size_t data = 0;     // bytes of receives and reads
  {
    platform::MutexLock send_lock(send_mu_);
    platform::MutexLock receive_lock(receive_mu_);
    auto note = [&](int64_t since, size_t& count) {
      if (since == 0) return;
      ++count;
      if (oldest == 0 || since < oldest) oldest = since;
    };
    for (const auto& [op, p] : pending_) note(p.owed_since_ns, answers);
    for (const auto& [token, l] : landings_) note(l->owed_since_ns, data);
  }
  if (answers + data == 0 || now_ns - oldest <= limit) return Status();
  const int64_t stalled_ms = (now_ns - std::max(oldest, progress)) / 1000000;
  return Status(Code::kPeerLost, where() + ": the peer moved none of the " + std::to_string(answers + data) +
                                     " operation(s) it owes (" + std::to_string(data) + " awaiting its data, " +
                                     std::to_string(answers) + " its answer) for " + std::to_string(stalled_ms) +
                                     " ms (peer_timeout " + std::to_string(ctx_->options.peer_timeout.count()) +
                                     " ms), while it answered heartbeats: stalled or hostile");
}

void TcpTransport::path_failed(int path, const Status& why, bool orderly) {
  if (core_.failed()) return;
  if (path_dead_[static_cast<size_t>(path)].exchange(true)) return;
  {
    platform::MutexLock lock(sockets_mu_);
    if (!sockets_closed_) data_[static_cast<size_t>(path)].shutdown();  // wakes the path's other worker
  }
  int live = chunks_.fail_path(path);
  const std::string& name = static_cast<size_t>(path) < paths_.size() ? paths_[static_cast<size_t>(path)].name : "";
  // An orderly close of a data stream means the peer is closing or exiting
  // (its control stream follows at once): not worth a warning. A link that
  // fails gives a reset or a timeout instead.
  if (orderly) {
    FERRY_ENGINE_LOG(kInfo, "tcp", ctx_->engine_id, "%s: data path %d (%s) closed by the peer", where().c_str(), path,
                     name.c_str());
  } else {
    FERRY_ENGINE_LOG(kWarn, "tcp", ctx_->engine_id, "%s: data path %d (%s) lost: %s; %d path(s) carry on",
                     where().c_str(), path, name.c_str(), why.message().c_str(), live);
    if (ctx_->metrics) ctx_->metrics->path_lost("tcp");
  }
  if (live == 0) {
    Status down(Code::kPeerLost, where() + ": every data path is down (last: path " + std::to_string(path) + " " +
                                     name + ": " + why.message() + ")");
    if (!orderly) {
      core_.fail(down);
      return;
    }
    {
      platform::MutexLock lock(paths_down_mu_);
      all_paths_down_ = down;
    }
    // The peer is closing: what it sent on the control stream before its
    // goodbye (confirmations of notifications, acks) is still to be read
    // there, and sockets keep no order between each other. The control
    // stream's end fails the connection; tick() does if it never comes.
    core_.set_closed_by_peer();
    paths_closed_ns_.store(now_ns(), std::memory_order_release);
  }
}

void TcpTransport::failed(const Status& why) {
  // Shutting the sockets down first wakes every thread blocked on them.
  {
    platform::MutexLock lock(sockets_mu_);
    if (!sockets_closed_) {
      control_.shutdown();
      for (auto& d : data_) d.shutdown();
    }
  }
  std::vector<std::shared_ptr<OutOp>> queued = chunks_.stop();
  std::deque<Outgoing> unsent;
  {
    platform::MutexLock lock(out_mu_);
    out_stopped_ = true;
    unsent.swap(out_);
  }
  for (Outgoing& o : unsent) held_->give_reply(o.charged);
  unsent.clear();
  out_cv_.notify_all();
  out_parked_.wake_all();
  out_drained_cv_.notify_all();
  held_->wake();  // a reader paused for reply room wakes to its end
  std::vector<std::shared_ptr<TransferState>> states;
  std::vector<std::shared_ptr<TransferState>> parts;  // items of operations still draining
  std::unordered_set<const TransferState*> draining;  // operations that end later
  {
    platform::MutexLock send_lock(send_mu_);
    platform::MutexLock receive_lock(receive_mu_);
    // A receive or read with chunks still being written into its memory (a
    // staging copy, a receive breaking off) fails when the last of them
    // ends, not before: its memory is not the application's until then.
    for (auto& [tok, l] : landings_) {
      platform::MutexLock ll(l->mu);
      if (l->arrivals.complete() || !l->arrivals.arriving()) continue;
      l->arrivals.stop();
      l->orphaned = true;
      if (l->error.ok()) l->error = why;
      draining.insert(l->state.get());
    }
    for (auto& [tok, l] : landings_) {
      if (draining.count(l->state.get()) == 0) {
        states.push_back(l->state);
        continue;
      }
      platform::MutexLock ll(l->mu);
      if (!l->orphaned) parts.push_back(l->state);  // another item of a vector read
    }
    // Likewise a send or write with a chunk still held by a path worker (a
    // staging copy or sendmsg may still read its memory): it fails when the
    // worker lets go of it (finish_acknowledged), with this failure unless
    // the peer had answered it already.
    std::unordered_map<uint64_t, PendingOp> held_by_paths;
    std::unordered_set<const TransferState*> sends_draining;
    for (auto& [id, weak] : sending_) {
      std::shared_ptr<OutOp> op = weak.lock();
      if (!op || !op->state) continue;
      bool held = ChunkQueue::acknowledged(*op) ? ChunkQueue::on_a_path(*op) : !ChunkQueue::acknowledge(*op, why);
      auto p = pending_.find(id);
      if (!held || p == pending_.end()) continue;
      held_by_paths.insert(*p);
      sends_draining.insert(p->second.state.get());
      draining.insert(p->second.state.get());
    }
    for (auto& [op, pending] : pending_) {
      const std::shared_ptr<TransferState>& st = pending.state;
      if (draining.count(st.get()) == 0) {
        states.push_back(st);
      } else if (sends_draining.count(st.get()) != 0 && held_by_paths.count(op) == 0) {
        parts.push_back(st);  // another item of a vector write, held by no path
      }
    }
    pending_.clear();
    awaiting_cts_.clear();
    sending_.clear();
    landings_.clear();
    incoming_.clear();
    pending_ = std::move(held_by_paths);
  }
  for (auto& op : queued) {
    if (op->state && draining.count(op->state.get()) == 0) states.push_back(op->state);
  }
  for (auto& st : parts) st->finish_part(why);
  for (auto& st : states) st->finish(why);
}

void TcpTransport::lock_control() NO_THREAD_SAFETY_ANALYSIS {
  std::shared_ptr<platform::FiberTask> task = platform::current_task_shared();
  if (!task) {
    control_write_mu_.lock();
    return;
  }
  for (;;) {
    if (control_write_mu_.try_lock()) return;
    control_parked_.add(task);
    // Taken again after registering: an unlock in between wakes this fiber.
    if (control_write_mu_.try_lock()) {
      control_parked_.remove(task.get());
      return;
    }
    task->worker->park({}, false);
    control_parked_.remove(task.get());
  }
}

void TcpTransport::unlock_control() NO_THREAD_SAFETY_ANALYSIS {
  control_write_mu_.unlock();
  control_parked_.wake_all();
}

bool TcpTransport::try_lock_control_stream() NO_THREAD_SAFETY_ANALYSIS {
  for (int i = 0; i < 100; ++i) {
    if (control_write_mu_.try_lock()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

void TcpTransport::close() {
  if (!core_.failed()) {
    // Frames already queued go first (an application that closes the moment
    // it sees a notification has queued its confirmation), then the goodbye.
    // Wait a little for them, but never block on a peer that stopped reading.
    {
      platform::UniqueLock lock(out_mu_);
      out_drained_cv_.wait_for(lock.native(), std::chrono::milliseconds(100),
                               [&]() REQUIRES(out_mu_) { return out_stopped_ || (out_.empty() && !out_writing_); });
    }
    // A writer may be mid-frame.
    if (try_lock_control_stream()) {
      if (!core_.failed()) {  // failed: the stream may be closed already
        wire::HeaderBytes hb;
        encode_header(wire::encode(wire::Close{}), hb);
        ssize_t ignored = ::send(control_.fd(), hb.data(), hb.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)ignored;
      }
      unlock_control();
    }
  }
  core_.fail(Status(Code::kCancelled, where() + ": closed locally"));
  // Closed from one of its own fibers, that fiber releases on its way out.
  if (await_fibers()) release_sockets();
}

}  // namespace ferry::tcp
