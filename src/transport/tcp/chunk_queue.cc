// ChunkQueue: pull scheduling with a per-path window.
#include "transport/tcp/chunk_queue.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <memory>
#include <utility>

#include "platform/log.h"
#include "platform/cpu_load.h"

namespace ferry::tcp {

namespace {

// Counts one more chunk of `op` on a path, unless the peer acknowledged it.
bool take_unacknowledged(OutOp& op) {
  uint64_t w = op.on_paths.load(std::memory_order_acquire);
  do {
    if ((w & OutOp::kAcked) != 0) return false;
  } while (!op.on_paths.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire));
  return true;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The host's CPU load for the governor; none where /proc/stat cannot be read.
// A reading needs four ticks of all CPUs together; between tries the file is
// left alone for one tick's worth of time.
PathGovernor::CpuMeter host_cpu_meter() {
  constexpr uint64_t kTicks = 4;
  auto load = std::make_shared<platform::HostCpuLoad>("/proc/stat", platform::HostCpuLoad::interval_for_ticks(1));
  if (!load->available()) return {};
  return [load] { return load->since_last(kTicks); };
}

}  // namespace

ChunkQueue::ChunkQueue(uint64_t chunk_bytes, int window, int paths, bool adaptive, int governor_start)
    : ChunkQueue(chunk_bytes, window, paths,
                 PathGovernor(adaptive, paths, kGovernorSampleNs,
                              adaptive ? host_cpu_meter() : PathGovernor::CpuMeter{}, governor_start)) {}

ChunkQueue::ChunkQueue(uint64_t chunk_bytes, int window, int paths, PathGovernor governor)
    : chunk_bytes_(chunk_bytes),
      window_(static_cast<uint64_t>(window)),
      ack_every_(std::max<uint64_t>(1, static_cast<uint64_t>(window) / 8)),
      sent_(static_cast<size_t>(paths), 0),
      landed_(static_cast<size_t>(paths), 0),
      inflight_(static_cast<size_t>(paths)),
      alive_(static_cast<size_t>(paths), true),
      path_cv_(static_cast<size_t>(paths)),
      governor_(governor),
      idle_since_ns_(now_ns()),
      meter_(governor.meter()) {
  for (int p = 0; p < paths; ++p) path_parked_.push_back(std::make_unique<platform::WaitList>());
}

void ChunkQueue::wake_all() {
  for (auto& cv : path_cv_) cv.notify_all();
  for (auto& parked : path_parked_) parked->wake_all();
}

bool ChunkQueue::push(std::shared_ptr<OutOp> op) {
  {
    platform::MutexLock lock(mu_);
    if (stopped_) return false;
    if (busy_since_ns_ < 0) {
      busy_since_ns_ = now_ns();
      governor_.on_idle(busy_since_ns_ - idle_since_ns_);
    }
    queue_.push_back(std::move(op));
  }
  wake_all();
  return true;
}

std::optional<Chunk> ChunkQueue::claim_locked(int path) {
  auto p = static_cast<size_t>(path);
  if (!alive_[p] || sent_[p] - landed_[p] >= window_) return std::nullopt;
  Chunk c;
  // Chunks orphaned by a dead path go first, unless their transfer
  // completed. Those of an aborted transfer still go (empty, marked
  // aborted): the peer learns which path no longer brings them.
  while (!retry_.empty()) {
    Chunk r = std::move(retry_.front());
    retry_.pop_front();
    // An aborted chunk goes empty: it reads no memory and is not counted.
    r.counted = !r.op->aborted;
    if (r.counted && ((r.op->state && r.op->state->done()) || !take_unacknowledged(*r.op))) continue;
    r.resent = r.counted;
    c = std::move(r);
    break;
  }
  if (!c.op) {
    while (!queue_.empty() && queue_.front()->aborted) queue_.pop_front();
    // The oldest transfer this path may carry: one near its NIC (or any,
    // when its near paths have all died), among the paths the governor lets
    // take new chunks.
    uint64_t live = live_mask_locked();
    auto it = queue_.begin();
    for (; it != queue_.end(); ++it) {
      const OutOp& op = **it;
      if (op.aborted) continue;
      uint64_t allowed = op.paths & live;
      if (allowed == 0) allowed = live;
      if (p >= 64 || ((allowed >> p) & 1) == 0) continue;
      int rank = std::popcount(allowed & ((uint64_t{1} << p) - 1));
      if (rank < governor_.active(std::popcount(allowed))) break;
    }
    if (it == queue_.end()) return std::nullopt;
    std::shared_ptr<OutOp> op = *it;
    uint64_t total = op->total();
    c.op = op;
    c.offset = op->next;
    c.size = std::min(op->chunk_bytes != 0 ? op->chunk_bytes : chunk_bytes_, total - op->next);
    op->next += c.size;
    // Unacknowledged: an ACK before every chunk was claimed is refused, and
    // an aborted op hands out no more.
    op->on_paths.fetch_add(1, std::memory_order_acq_rel);
    c.counted = true;
    // A zero-byte operation still travels as one (empty) chunk.
    if (op->next >= total) queue_.erase(it);
  }
  ++sent_[p];
  c.seq = sent_[p];
  c.ack_request = sent_[p] % ack_every_ == 0;
  inflight_[p].push_back(c);
  return c;
}

std::optional<Chunk> ChunkQueue::claim(int path) {
  platform::UniqueLock lock(mu_);
  for (;;) {
    if (stopped_ || !alive_[static_cast<size_t>(path)]) return std::nullopt;
    if (auto c = claim_locked(path)) return c;
    platform::wait_on(lock.native(), path_cv_[static_cast<size_t>(path)], *path_parked_[static_cast<size_t>(path)]);
  }
}

std::optional<Chunk> ChunkQueue::try_claim(int path) {
  platform::MutexLock lock(mu_);
  if (stopped_) return std::nullopt;
  return claim_locked(path);
}

uint64_t ChunkQueue::landed(int path) const {
  platform::MutexLock lock(mu_);
  return landed_[static_cast<size_t>(path)];
}

bool ChunkQueue::await_landed(int path, uint64_t count) {
  auto p = static_cast<size_t>(path);
  platform::UniqueLock lock(mu_);
  for (;;) {
    if (stopped_ || !alive_[p]) return false;
    if (landed_[p] >= count) return true;
    platform::wait_on(lock.native(), path_cv_[p], *path_parked_[p]);  // on_landed, fail_path and stop wake it
  }
}

void ChunkQueue::on_landed(int path, uint64_t landed) {
  auto p = static_cast<size_t>(path);
  bool more_paths = false;
  {
    platform::UniqueLock lock(mu_);
    if (p >= landed_.size()) return;
    // Confirmations are cumulative; a stale or bogus one must not open the window.
    uint64_t now = std::clamp(landed, landed_[p], sent_[p]);
    uint64_t bytes = 0;
    for (uint64_t i = landed_[p]; i < now && !inflight_[p].empty(); ++i) {
      bytes += inflight_[p].front().size;
      inflight_[p].pop_front();
    }
    landed_[p] = now;
    if (governor_.judges() && busy_since_ns_ >= 0) {
      std::optional<platform::CpuReading> reading;
      if (!reading_cpu_ && governor_.reading_due(now_ns() - busy_since_ns_)) {
        // Reading /proc/stat takes ~11 us; the transmit workers claim
        // chunks meanwhile.
        reading_cpu_ = true;
        lock.unlock();
        reading = meter_();
        lock.lock();
        reading_cpu_ = false;
      }
      more_paths = report_locked(bytes, reading);
    }
  }
  // Only this path's window opened, unless the governor let more paths in.
  if (more_paths) {
    wake_all();
  } else {
    path_cv_[p].notify_all();
    path_parked_[p]->wake_all();
  }
}

bool ChunkQueue::report_locked(uint64_t bytes, const std::optional<platform::CpuReading>& reading) {
  if (flushing_) {
    flushing_ = false;
    // Up to the last chunk that asked for a confirmation: a path the
    // governor stopped using may never confirm the few after it.
    for (size_t i = 0; i < landed_.size(); ++i) {
      flushing_ |= alive_[i] && landed_[i] < flush_sent_[i] - flush_sent_[i] % ack_every_;
    }
  }
  int before = governor_.target();
  int64_t t = now_ns();
  // While the meter was read, another report may have found the queue idle:
  // the busy time up to then went with it.
  bool busy = busy_since_ns_ >= 0;
  governor_.on_landed(bytes, busy ? t - busy_since_ns_ : 0, !flushing_, reading);
  if (busy) {
    busy_since_ns_ = idle_locked() ? -1 : t;
    if (busy_since_ns_ < 0) idle_since_ns_ = t;
  }
  if (governor_.target() == before) return false;
  // Judge the new count only once what the old one sent has landed.
  flush_sent_ = sent_;
  flushing_ = true;
  FERRY_LOG(kDebug, "tcp",
            "paths taking new chunks: %d -> %d (last sample %.3f GB/s at %d, host CPUs %.0f%% busy, %.0f%% ours)",
            before, governor_.target(), governor_.last_rate(), governor_.kept(), 100 * governor_.last_cpu(),
            100 * governor_.last_own_cpu());
  return governor_.target() > before;
}

bool ChunkQueue::abort(const std::shared_ptr<OutOp>& op) {
  platform::MutexLock lock(mu_);
  return !std::exchange(op->aborted, true);
}

ChunkQueue::Stop ChunkQueue::stop(const std::shared_ptr<OutOp>& op) {
  {
    platform::MutexLock lock(mu_);
    if (std::exchange(op->aborted, true)) return Stop::kAbortedBefore;
    auto queued = std::find(queue_.begin(), queue_.end(), op);
    if (queued != queue_.end() && op->next == 0) {
      queue_.erase(queued);
      return Stop::kNothingSent;
    }
    Chunk c;
    c.op = op;
    c.offset = std::min(op->next, op->total());
    c.size = 0;
    c.counted = false;
    retry_.push_front(std::move(c));
  }
  wake_all();
  return Stop::kAbortGoes;
}

bool ChunkQueue::aborted(const OutOp& op) const {
  platform::MutexLock lock(mu_);
  return op.aborted;
}

bool ChunkQueue::claimed_all(const OutOp& op) const {
  platform::MutexLock lock(mu_);
  return op.next >= op.total();
}

bool ChunkQueue::acknowledge(OutOp& op, Status answer) {
  op.answer = std::move(answer);
  return (op.on_paths.fetch_or(OutOp::kAcked, std::memory_order_acq_rel) & ~OutOp::kAcked) == 0;
}

bool ChunkQueue::release(const Chunk& c) {
  if (!c.counted) return false;
  return c.op->on_paths.fetch_sub(1, std::memory_order_acq_rel) == (OutOp::kAcked | 1);
}

int ChunkQueue::fail_path(int path) {
  int live = 0;
  {
    platform::MutexLock lock(mu_);
    auto p = static_cast<size_t>(path);
    if (p >= alive_.size()) return live_paths_locked();
    if (alive_[p]) {
      alive_[p] = false;
      for (Chunk& c : inflight_[p]) retry_.push_back(std::move(c));
      inflight_[p].clear();
    }
    live = live_paths_locked();
  }
  wake_all();
  return live;
}

uint64_t ChunkQueue::live_mask_locked() const {
  uint64_t m = 0;
  for (size_t p = 0; p < alive_.size() && p < 64; ++p) {
    if (alive_[p]) m |= uint64_t{1} << p;
  }
  return m;
}

std::vector<bool> ChunkQueue::alive() const {
  platform::MutexLock lock(mu_);
  return alive_;
}

int ChunkQueue::live_paths() const {
  platform::MutexLock lock(mu_);
  return live_paths_locked();
}

bool ChunkQueue::idle_locked() const {
  if (!queue_.empty() || !retry_.empty()) return false;
  for (const auto& q : inflight_) {
    if (!q.empty()) return false;
  }
  return true;
}

int ChunkQueue::active_paths() const {
  platform::MutexLock lock(mu_);
  return governor_.active(live_paths_locked());
}

int ChunkQueue::live_paths_locked() const { return static_cast<int>(std::count(alive_.begin(), alive_.end(), true)); }

std::vector<std::shared_ptr<OutOp>> ChunkQueue::stop() {
  std::vector<std::shared_ptr<OutOp>> left;
  {
    platform::MutexLock lock(mu_);
    stopped_ = true;
    left.assign(queue_.begin(), queue_.end());
    for (const Chunk& c : retry_) left.push_back(c.op);
    queue_.clear();
    retry_.clear();
    for (auto& q : inflight_) q.clear();
  }
  wake_all();
  return left;
}

uint64_t ChunkQueue::in_flight(int path) const {
  platform::MutexLock lock(mu_);
  auto p = static_cast<size_t>(path);
  return sent_[p] - landed_[p];
}

}  // namespace ferry::tcp
