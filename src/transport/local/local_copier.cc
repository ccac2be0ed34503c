// One-copy moves between this process and a same-host peer: the copier's
// life, start(), host copies by cross-memory attach (shared with the
// engine's copy helpers, copy_pool.h), completions (local_copier_gpu.cc
// holds the GPU side).
#include "transport/local/local_copier.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "platform/log.h"
#include "platform/thread.h"
#include "transport/local/cross_memory.h"

namespace ferry::local {

namespace cu = platform::cu;

std::vector<SharedSpan> slice_spans(const std::vector<SharedSpan>& spans, uint64_t offset, uint64_t size) {
  std::vector<SharedSpan> out;
  for (const SharedSpan& s : spans) {
    if (size == 0) break;
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    SharedSpan part = s;
    part.address += offset;
    part.length = std::min(size, s.length - offset);
    size -= part.length;
    offset = 0;
    out.push_back(part);
  }
  return out;
}

bool any_gpu(const std::vector<SharedSpan>& spans) {
  return std::any_of(spans.begin(), spans.end(), [](const SharedSpan& s) { return s.gpu(); });
}
bool any_host(const std::vector<SharedSpan>& spans) {
  return std::any_of(spans.begin(), spans.end(), [](const SharedSpan& s) { return !s.gpu(); });
}
bool any_gpu(const core::SegmentList& list) {
  return std::any_of(list.spans().begin(), list.spans().end(),
                     [](const core::MemorySpan& s) { return s.region->region.kind == MemoryKind::kCuda; });
}
bool any_host(const core::SegmentList& list) {
  return std::any_of(list.spans().begin(), list.spans().end(),
                     [](const core::MemorySpan& s) { return s.region->region.kind != MemoryKind::kCuda; });
}

LocalCopier::LocalCopier(GpuImports& imports, uint64_t peer_engine, pid_t peer_pid, PeerCheck peer_check,
                         std::shared_ptr<CopyPool> helpers, std::shared_ptr<platform::GatherKernels> gather,
                         std::shared_ptr<platform::ResidentGather> resident, std::shared_ptr<platform::GpuKit> kit)
    : imports_(imports),
      gather_(std::move(gather)),
      resident_(std::move(resident)),
      peer_engine_(peer_engine),
      peer_pid_(peer_pid),
      peer_check_(std::move(peer_check)),
      lanes_(std::move(kit)),
      helpers_(std::move(helpers)) {}

LocalCopier::~LocalCopier() {
  drain();
  platform::MutexLock lock(mu_);
  for (PieceTable& t : tables_) {
    if (t.items != nullptr) lanes_.kit().give_block(platform::PinnedKind::kPlain, kTableBytes, t.items);
  }
  // lanes_ gives its streams and events back.
}

Result<LocalCopier::Running> LocalCopier::admit(const StopCheck& stop) {
  FERRY_RETURN_IF_ERROR(peer_check_());
  if (stop) FERRY_RETURN_IF_ERROR(stop());
  platform::MutexLock lock(mu_);
  if (stopped_) return Status(Code::kCancelled, "local copier: the connection is closing");
  host_copies_.fetch_add(1, std::memory_order_acq_rel);
  return Running(&host_copies_);
}

LocalCopier::Done LocalCopier::checked(Done when_done) {
  // Every way a copy ends passes here, after its last byte moved.
  return [this, when_done = std::move(when_done)](const Status& st) { when_done(st.ok() ? peer_check_() : st); };
}

Status LocalCopier::start(const core::SegmentList& local, const std::vector<SharedSpan>& remote, uint64_t size,
                          bool to_remote, Done when_done, HostCopyBy by, StopCheck stop) {
  FERRY_ASSIGN_OR_RETURN(Running running, admit(stop));
  Done done = checked(std::move(when_done));
  std::vector<iovec> near_iov, far_iov;
  std::vector<GpuCopy> gpu;  // queued after the walk, runs of them in one call
  gpu.reserve(remote.size());
  std::vector<platform::GpuLane> used;
  // A failure after GPU pieces were queued: they end before the caller hears
  // of it (and lets go of the memory they use).
  auto abandon = [&](const Status& why) {
    sync_streams(used);
    return why;
  };
  PieceCache cache;
  // A long list of small GPU pieces goes in two launches, the first once
  // half of it is walked: the GPU copies that half while this thread walks
  // the rest.
  size_t early_launch = gather_ && remote.size() >= kEarlyLaunchSpans ? remote.size() / 2 : 0;
  size_t li = 0, ri = 0;
  uint64_t loff = 0, roff = 0, left = size;
  const auto& spans = local.spans();
  while (left > 0) {
    if (li >= spans.size() || ri >= remote.size()) {
      return abandon(Status(Code::kInternal, "local copier: span lists shorter than the copy"));
    }
    const core::MemorySpan& l = spans[li];
    const SharedSpan& r = remote[ri];
    uint64_t n = std::min({left, l.size - loff, r.length - roff});
    uint8_t* near = l.data + loff;
    bool near_gpu = l.region->region.kind == MemoryKind::kCuda;
    if (!near_gpu && !r.gpu()) {
      near_iov.push_back({near, static_cast<size_t>(n)});
      far_iov.push_back({reinterpret_cast<void*>(r.address + roff), static_cast<size_t>(n)});
    } else {
      if (near_gpu && !r.gpu()) {
        return abandon(
            Status(Code::kUnimplemented, "this side cannot copy between its GPU and the peer's host memory"));
      }
      auto piece = gpu_piece(near, near_gpu ? l.region->region.device : -1, r, roff, n, to_remote, cache);
      if (!piece.ok()) return abandon(piece.status());
      gpu.push_back(*piece);
      if (gpu.size() == early_launch) {
        if (Status q = queue_gpu_copies(gpu, used); !q.ok()) return abandon(q);
        gpu.clear();
        early_launch = 0;
      }
    }
    left -= n;
    loff += n;
    roff += n;
    if (loff == l.size) ++li, loff = 0;
    if (roff == r.length) ++ri, roff = 0;
  }
  cache.scope.reset();  // the thread's own context again
  if (Status q = queue_gpu_copies(gpu, used); !q.ok()) return abandon(q);
  if (by == HostCopyBy::kHelpers && used.empty() && size >= kOffloadBytes &&
      offload(near_iov, far_iov, to_remote, done, stop)) {
    return Status();
  }
  Status host_status;
  if (!near_iov.empty()) host_status = cross_copy(near_iov, far_iov, to_remote, stop);
  if (used.empty()) {
    if (!host_status.ok()) return host_status;
    done(Status());
    return Status();
  }
  Done finish = host_status.ok() ? std::move(done) : Done([host_status, done](const Status&) { done(host_status); });
  return complete_gpu(used, size, std::move(finish));
}

namespace {
// `in` cut into consecutive parts of at most `per` bytes.
std::vector<std::vector<iovec>> cut(const std::vector<iovec>& in, size_t per) {
  std::vector<std::vector<iovec>> out(1);
  size_t filled = 0;
  for (iovec v : in) {
    while (v.iov_len > 0) {
      if (filled == per) out.emplace_back(), filled = 0;
      size_t k = std::min(v.iov_len, per - filled);
      out.back().push_back({v.iov_base, k});
      v.iov_base = static_cast<char*>(v.iov_base) + k;
      v.iov_len -= k;
      filled += k;
    }
  }
  return out;
}
}  // namespace

// One host copy cut into pieces. Whoever copies (the caller, the engine's
// helpers) takes the next piece not yet taken, so a helper that comes late
// takes fewer; after a failure nobody takes another.
struct LocalCopier::HostCopy final : CopyPool::Job {
  LocalCopier* copier = nullptr;
  std::vector<std::vector<iovec>> near, far;
  bool to_remote = false;
  StopCheck stop;  // asked before each piece, after the peer
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  platform::Mutex mu;
  Status first_error GUARDED_BY(mu);
  // Offloaded (the helpers alone copy it): what ends it, and the copy
  // itself, held until ended() lets go of it.
  Done on_end;
  std::shared_ptr<HostCopy> keep;

  bool all_taken() const { return failed.load(std::memory_order_acquire) || next.load() >= near.size(); }

  bool run_piece() override {
    if (failed.load(std::memory_order_acquire)) return false;
    size_t i = next.fetch_add(1, std::memory_order_relaxed);
    if (i >= near.size()) return false;
    const LocalCopier& c = *copier;
    Status s = c.peer_check_();
    if (s.ok() && stop) s = stop();
    if (s.ok() && c.stopping_.load(std::memory_order_acquire)) {
      s = Status(Code::kCancelled, "local copier: the connection is closing");
    }
    if (s.ok()) s = to_remote ? cross_write(c.peer_pid_, near[i], far[i]) : cross_read(c.peer_pid_, near[i], far[i]);
    if (!s.ok()) {
      platform::MutexLock lock(mu);
      if (first_error.ok()) first_error = s;
      failed.store(true, std::memory_order_release);
      return false;
    }
    return !all_taken();
  }

  void ended() override { copier->end_offloaded(*this); }
};

Status LocalCopier::cross_copy(const std::vector<iovec>& near, const std::vector<iovec>& far, bool to_remote,
                               const StopCheck& stop) {
  size_t total = 0;
  for (const iovec& v : near) total += v.iov_len;
  // One thread copies at about 0.6x memcpy (the kernel pins each page of the
  // peer as it goes); four share a large copy (see cross_memory.h).
  size_t threads = total < kParallelCrossBytes ? 1 : kCrossThreads;
  size_t per = std::min(kCrossPiece, (total + threads - 1) / threads);
  HostCopy job;
  job.near = cut(near, per);
  job.far = cut(far, per);
  job.to_remote = to_remote;
  job.stop = stop;
  job.copier = this;
  job.wanted = std::min(threads, job.near.size()) - 1;
  const bool helped = job.wanted > 0 && helpers_ && helpers_->add(&job) > 0;
  while (job.run_piece()) {
  }
  // No piece is left to take: no helper may join any more, and the memory
  // is the caller's again once those that did have left.
  if (helped) helpers_->withdraw(&job);
  platform::MutexLock lock(job.mu);
  return job.first_error;
}

bool LocalCopier::offload(const std::vector<iovec>& near, const std::vector<iovec>& far, bool to_remote,
                          Done& done, const StopCheck& stop) {
  size_t helpers = helpers_ ? helpers_->ensure_started() : 0;
  if (helpers == 0) return false;
  size_t total = 0;
  for (const iovec& v : near) total += v.iov_len;
  size_t per = std::min(kCrossPiece, (total + helpers - 1) / helpers);
  auto job = std::make_shared<HostCopy>();
  job->copier = this;
  job->offloaded = true;
  job->near = cut(near, per);
  job->far = cut(far, per);
  job->to_remote = to_remote;
  job->stop = stop;
  job->wanted = std::min(helpers, job->near.size());
  job->on_end = std::move(done);
  job->keep = job;
  host_copies_.fetch_add(1, std::memory_order_acq_rel);
  offloaded_.fetch_add(1, std::memory_order_acq_rel);
  if (helpers_->add(job.get()) == 0) {
    // Every helper ended idle meanwhile and none can start: the caller's.
    done = std::move(job->on_end);
    job->keep.reset();
    offloaded_.fetch_sub(1, std::memory_order_acq_rel);
    host_copies_.fetch_sub(1, std::memory_order_acq_rel);
    return false;
  }
  return true;
}

void LocalCopier::end_offloaded(HostCopy& job) {
  Status s;
  {
    platform::MutexLock l(job.mu);
    s = job.first_error;
  }
  job.on_end(s);
  std::shared_ptr<HostCopy> last = std::move(job.keep);  // `job` goes with it
  last.reset();
  offloaded_.fetch_sub(1, std::memory_order_acq_rel);
  host_copies_.fetch_sub(1, std::memory_order_acq_rel);
}

bool LocalCopier::busy() const { return inflight_count_.load(std::memory_order_acquire) != 0; }

bool LocalCopier::poll() {
  if (!busy()) return false;  // the progress worker asks on every turn: no lock when idle
  std::vector<std::pair<Done, Status>> finished;
  {
    platform::MutexLock lock(mu_);
    for (auto it = inflight_.begin(); it != inflight_.end();) {
      Status st;
      bool ready = !it->resident || resident_ended(*it->resident, st);
      for (const platform::GpuCopyLanes::Mark& m : it->marks) {
        if (!ready) break;
        Result<bool> reached = platform::GpuCopyLanes::reached(m);
        if (reached.ok() && !reached.value()) {
          ready = false;
          break;
        }
        if (!reached.ok() && st.ok()) st = reached.status();
      }
      if (!ready) {
        ++it;
        continue;
      }
      for (const platform::GpuCopyLanes::Mark& m : it->marks) lanes_.recycle(m);
      finished.emplace_back(std::move(it->done), st);
      it = inflight_.erase(it);
    }
    inflight_count_.store(inflight_.size(), std::memory_order_release);
  }
  for (auto& [done, st] : finished) done(st);
  return !finished.empty();
}

void LocalCopier::drain() {
  // Host copies handed to the helpers end on their own (the kernel copies
  // page by page, the helpers take turns between connections' pieces):
  // polled, since they end seldom and this waits seldom.
  while (offloaded_.load(std::memory_order_acquire) != 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (!platform::gpu_driver_available()) return;
  {
    platform::MutexLock lock(mu_);
    lanes_.synchronize_all();
  }
  poll();
  // Batches the resident kernel took end without their stream going idle
  // (the kernel lingers): asked until they did, each within microseconds.
  auto resident_left = [this] {
    platform::MutexLock lock(mu_);
    return std::any_of(inflight_.begin(), inflight_.end(), [](const InFlight& f) { return f.resident.has_value(); });
  };
  while (resident_left()) {
    std::this_thread::sleep_for(std::chrono::microseconds(10));
    poll();
  }
}

void LocalCopier::stop() {
  {
    platform::MutexLock lock(mu_);
    stopped_ = true;
  }
  stopping_.store(true, std::memory_order_release);
  // Cross-memory copies run on the threads that started them (helped by
  // the engine's helpers) and end at their next piece now (the kernel copies
  // page by page, a piece at most kCrossPiece): this waits for them, then
  // for the GPU.
  while (host_copies_.load(std::memory_order_acquire) != 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  drain();
}

void LocalCopier::forget(uint64_t alloc_base) {
  drain();
  imports_.forget(this, peer_engine_, peer_pid_, alloc_base);
}

}  // namespace ferry::local
