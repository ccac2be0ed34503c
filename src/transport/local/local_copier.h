// LocalCopier: moves bytes between this process's registered memory and a
// same-host peer's memory described by SharedSpans, in one copy: host to
// host by cross-memory attach, anything touching GPU memory by the copy
// engines or the gather kernels (on a per-connection stream per device and
// context, gpu/copy_lanes.h: ferry's own context while a stream of the
// process waits on the GPU; completion by events, or by asking the stream
// where an event would queue behind a wait), the peer's GPU allocations
// opened through GpuImports.
//
// Which side copies: a process can address its own memory, the peer's GPU
// memory (once mapped) and, through the kernel, the peer's host memory from
// its own host memory. It cannot copy between its own GPU and the peer's host
// memory; can_execute() says whether a copy avoids that.
//
// A copy asks, before each piece and once it has ended, whether the peer gave
// up on the connection meanwhile (PeerCheck): the peer may have reused its
// memory since, so the copy fails with the check's status instead of
// succeeding with bytes that were never the message (a process stopped past
// peer_timeout in the middle of a copy resumes it).
//
// A large host copy is cut into pieces that the thread calling start() and
// the engine's copy helpers (CopyPool, shared by every local connection of
// the engine) take in turn, or the helpers alone, for a caller that must not
// stall: HostCopyBy. No thread is started per copy or per connection. Where
// no helper runs (the kernel refused them) the caller copies alone: slower,
// never a failure.
//
// Thread-safe: start() may run on any thread; poll() and drain() belong to
// the connection's progress turns (or its closer).
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/segments.h"
#include "ferry/memory.h"
#include "gpu/copy_lanes.h"
#include "gpu/gather_kernel.h"
#include "gpu/resident_gather.h"
#include "platform/cpu_binding.h"
#include "platform/mutex.h"
#include "transport/local/copy_pool.h"
#include "transport/local/gpu_sharing.h"
#include "transport/local/shared_span.h"

namespace ferry::local {

// The part [offset, offset+size) of a span list (addresses moved, allocation
// fields kept). REQUIRES: offset + size <= total length of `spans`.
std::vector<SharedSpan> slice_spans(const std::vector<SharedSpan>& spans, uint64_t offset, uint64_t size);
bool any_gpu(const std::vector<SharedSpan>& spans);
bool any_host(const std::vector<SharedSpan>& spans);
bool any_gpu(const core::SegmentList& list);
bool any_host(const core::SegmentList& list);

class LocalCopier {
 public:
  using Done = std::function<void(const Status&)>;
  // OK while the peer still stands by the connection; why not, once it gave up.
  using PeerCheck = std::function<Status()>;
  // OK while the copy may go on; why not once its transfer was cancelled.
  using StopCheck = std::function<Status()>;

  // `gather` (null: copy engines only) copies runs of small device-to-device
  // pieces in one launch; `resident` (null: none) takes batches of blocks
  // without a launch; `helpers` (null: none, the caller copies alone) share
  // large host copies.
  LocalCopier(GpuImports& imports, uint64_t peer_engine, pid_t peer_pid, PeerCheck peer_check,
              std::shared_ptr<CopyPool> helpers = nullptr, std::shared_ptr<platform::GatherKernels> gather = nullptr,
              std::shared_ptr<platform::ResidentGather> resident = nullptr,
              std::shared_ptr<platform::GpuKit> kit = nullptr);
  // Waits for the copies handed to the helpers and for queued GPU copies.
  // Blocks.
  ~LocalCopier();

  // True unless the copy would pair this side's GPU memory with the peer's
  // host memory.
  static bool can_execute(const core::SegmentList& local, const std::vector<SharedSpan>& remote) {
    return !(any_gpu(local) && any_host(remote));
  }

  // Who moves a host-only copy of kOffloadBytes or more.
  enum class HostCopyBy {
    kCallerAndHelpers,  // the calling thread, helped: start returns once it ended
    kHelpers,  // the helpers alone: start returns at once (for a thread that must not stall: a progress worker)
  };

  // Copies the first `size` bytes of `local` to (to_remote) or from the
  // remote spans. Host-only parts finish before start returns unless `by`
  // hands them to the helpers (a copy with GPU parts, a small one, or one no
  // helper can take is the caller's after all); GPU parts are queued and
  // finish in poll(). `done` runs exactly once, on the thread that finishes
  // the last part, unless start returns an error (then never). `stop`, if
  // given, is asked before the copy starts and before each piece of a host
  // copy: a copy it stops ends with its status (GPU copies, queued at
  // once, end as queued).
  Status start(const core::SegmentList& local, const std::vector<SharedSpan>& remote, uint64_t size, bool to_remote,
               Done done, HostCopyBy by = HostCopyBy::kCallerAndHelpers, StopCheck stop = {});
  // A batch of blocks from this process's GPU memory on `device` into the
  // peer's GPU allocations (a KV cache's blocks between pools prepared
  // once): block b copies b.size bytes at local[b.local_pool] +
  // b.local_offset to b.remote_offset of remote[b.remote_pool], a span each
  // pool. The caller checked every block against both pools. Handed to the
  // resident gather kernel where one runs, else queued as one gather launch
  // (a few for over 1,360 pieces); `done` and `stop` as start()'s.
  // kUnimplemented, with nothing queued, where the kernel cannot take them
  // (no kernel, blocks too large): the caller copies another way.
  Status start_blocks(int device, std::span<uint8_t* const> local, std::span<const SharedSpan> remote,
                      std::span<const Block> blocks, uint64_t size, Done done, StopCheck stop = {}) EXCLUDES(mu_);
  // Completes queued copies whose marks were reached; true if any did. Never blocks.
  bool poll();
  bool busy() const;
  // No copy handed to the helpers runs and no GPU copy waits for poll():
  // drain() would return at once. Never blocks.
  bool settled() const {
    return offloaded_.load(std::memory_order_acquire) == 0 && inflight_count_.load(std::memory_order_acquire) == 0;
  }
  // Waits for every queued copy, and every host copy handed to the helpers
  // (used before mappings close, and when the peer revokes an export).
  // Blocks.
  void drain();
  // Refuses copies from now on (start() gives kCancelled), stops the host
  // copies that run before their next piece (they end kCancelled) and waits
  // for every copy already running, on any thread (the engine's helpers go
  // on serving other connections). Blocks: a host copy's piece, and queued
  // GPU copies.
  void stop();
  // Copies `n` host bytes at `src` to `dst` on local `device` and waits for
  // them, on this copier's own (non-blocking) stream: unlike cuMemcpy, it
  // does not wait for the application's streams, one of which may be waiting
  // on the GPU for this connection (Connection::stream_wait). Blocks.
  Status copy_to_device_now(int device, void* dst, const void* src, size_t n) EXCLUDES(mu_);
  // Closes the peer's mappings of `alloc_base` (0: all) after draining.
  void forget(uint64_t alloc_base);

  // The gather kernel's pinned lists: kTables of kTableBytes.
  static constexpr size_t kTableItems = 2048;  // 48 KiB a table
  static constexpr size_t kTableBytes = kTableItems * sizeof(platform::GatherPiece);
  static constexpr size_t kTables = 4;

 private:
  struct InFlight {
    std::vector<platform::GpuCopyLanes::Mark> marks;           // what ends it on each lane it used
    std::optional<platform::ResidentGather::Ticket> resident;  // a batch the resident kernel took
    Done done;
  };
  // Copies up to this size complete on the thread that starts them: the
  // copy engines move 1 MiB to a peer GPU in about 11 us on 2 x H100, and
  // handing the completion to the progress worker added about 4 us to it.
  static constexpr uint64_t kCompleteInline = 1024 * 1024;
  // How long the starting thread waits for such a copy before it hands the
  // completion to the progress worker after all.
  static constexpr std::chrono::microseconds kInlineWait{200};
  // A copy of at least this many remote spans queues its GPU pieces in two
  // parts when the gather kernel takes them (start()).
  static constexpr size_t kEarlyLaunchSpans = 64;
  // Host copies from this size on are shared by up to kCrossThreads threads:
  // the caller and kCrossThreads - 1 helpers.
  static constexpr size_t kParallelCrossBytes = 16u << 20;
  static constexpr size_t kCrossThreads = 4;
  // Host copies go in pieces of at most this size, the peer checked before
  // each: what a resumed copy can still write into memory its owner gave up,
  // and how long another connection's copy waits for a helper (a piece at
  // about 2.5 GB/s, one thread's cross-memory speed: 3 ms).
  static constexpr size_t kCrossPiece = 8u << 20;
  // Host copies from this size on may go to the helpers alone (HostCopyBy):
  // below it a copy costs less than the hand-off.
  static constexpr size_t kOffloadBytes = 1u << 20;
  struct HostCopy;  // the pieces of one host copy and who copies them (local_copier.cc)

  // A copy counted in host_copies_ (which stop() waits for) while this lives.
  class Running {
   public:
    explicit Running(std::atomic<int>* n) : n_(n) {}
    Running(Running&& o) noexcept : n_(std::exchange(o.n_, nullptr)) {}
    Running& operator=(Running&&) = delete;
    ~Running() {
      if (n_ != nullptr) n_->fetch_sub(1, std::memory_order_acq_rel);
    }

   private:
    std::atomic<int>* n_;
  };
  // What every copy asks before it starts: the peer still stands by the
  // connection, `stop` (if any) lets it go on, the copier is not stopping.
  // Counts it running until the result is destroyed.
  Result<Running> admit(const StopCheck& stop);
  // `when_done`, with the peer asked once more after a copy's last byte
  // moved (it may have given up meanwhile).
  Done checked(Done when_done);

  Status cross_copy(const std::vector<iovec>& near, const std::vector<iovec>& far, bool to_remote,
                    const StopCheck& stop);
  // Hands a host copy to the helpers alone; `done` runs on the one that ends
  // it. False (nothing taken) when no helper runs.
  bool offload(const std::vector<iovec>& near, const std::vector<iovec>& far, bool to_remote, Done& done,
               const StopCheck& stop);
  // Runs an offloaded copy's completion and lets it go.
  void end_offloaded(HostCopy& job);
  // One GPU piece of a copy, mapped, in the context of `device`.
  struct GpuCopy {
    int device = -1;
    uint8_t* dst = nullptr;
    uint8_t* src = nullptr;
    uint64_t n = 0;
    bool host_src = false, host_dst = false;
  };
  // What the GPU pieces of one copy share, so that a batch of blocks in one
  // pool switches context and opens the peer's allocation once, not per block.
  struct PieceCache {
    int device = -1;
    std::optional<platform::DeviceScope> scope;  // `device` made current
    std::array<char, 16> peer_pci{};             // the peer GPU found last...
    int peer_device = -1;                        // ...and the device that copies to and from it
    std::optional<GpuImports::Opened> opened;    // the allocation opened last...
    int opened_on = -1;                          // ...on this device
    const SharedSpan* located_span = nullptr;    // the span located last in it...
    uint8_t* located = nullptr;                  // ...and where its first byte is here
  };
  // `n` bytes at `offset` of `remote` and at `local`.
  Result<GpuCopy> gpu_piece(uint8_t* local, int local_device, const SharedSpan& remote, uint64_t offset, uint64_t n,
                            bool to_remote, PieceCache& cache);
  // Pinned host memory that start_blocks lists a launch's pieces in
  // (GatherKernels::copy_table), each held from its launch until its copy
  // ended; freed with the copier.
  struct PieceTable {
    platform::GatherPiece* items = nullptr;
    int device = -1;  // whose context allocated it
    bool busy = false;
  };
  // A free table, allocated on first use in the context of `device` (the
  // current one); null when all are busy or no pinned memory can be had
  // (copy() then lists the pieces in the launch's parameters).
  PieceTable* take_table(int device) REQUIRES(mu_);
  // Waits for every copy queued on the streams of `used`, the lanes a copy
  // queued on (a copy given up after some of its pieces were queued).
  void sync_streams(const std::vector<platform::GpuLane>& used) EXCLUDES(mu_);
  // Finishes a copy whose GPU pieces are queued on the streams of `used`:
  // at once if it is small and ends within microseconds, else by marks
  // (GpuCopyLanes::mark) the progress worker polls. An error (after waiting
  // for the streams) means `finish` never runs.
  Status complete_gpu(const std::vector<platform::GpuLane>& used, uint64_t size, Done finish) EXCLUDES(mu_);
  // Finishes a batch the resident kernel took: at once if it is small and
  // ends within microseconds, else in poll().
  void complete_resident(platform::ResidentGather::Ticket ticket, uint64_t size, Done finish);
  // Whether a resident batch ended (ready) and how.
  bool resident_ended(const platform::ResidentGather::Ticket& ticket, Status& st);
  // Queues `copies` on their devices' streams, each run in the context a
  // LaneChoice gives (held only while it is queued), adding each lane to `used`:
  // a run of device-to-device copies on one device (a KV cache's blocks) as
  // one gather launch where it suits and loads, else in one driver call where
  // the driver has cuMemcpyBatchAsync; the rest one by one.
  Status queue_gpu_copies(const std::vector<GpuCopy>& copies, std::vector<platform::GpuLane>& used) EXCLUDES(mu_);

  GpuImports& imports_;
  const std::shared_ptr<platform::GatherKernels> gather_;
  const std::shared_ptr<platform::ResidentGather> resident_;
  const uint64_t peer_engine_;
  const pid_t peer_pid_;
  const PeerCheck peer_check_;
  mutable platform::Mutex mu_;
  platform::GpuCopyLanes lanes_ GUARDED_BY(mu_);  // a stream and events per local device and context
  std::vector<InFlight> inflight_ GUARDED_BY(mu_);
  std::array<PieceTable, kTables> tables_ GUARDED_BY(mu_);  // items null: not allocated yet
  std::atomic<size_t> inflight_count_{0};                   // inflight_.size(), readable without mu_
  bool stopped_ GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_{false};  // stopped_, read by host copies before each piece
  std::atomic<int> host_copies_{0};    // cross-memory copies running (on callers' threads or offloaded)
  std::atomic<int> offloaded_{0};      // of which the helpers run alone

  const std::shared_ptr<CopyPool> helpers_;  // the engine's; null: none
};

}  // namespace ferry::local
