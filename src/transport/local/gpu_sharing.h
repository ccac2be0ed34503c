// GPU memory shared between processes of one host.
//
// GpuExports (the owner's side) describes registered GPU memory as
// SharedSpans: each stretch is cut at allocation boundaries and named by its
// allocation's handle plus an offset, so a region inside a larger allocation
// (PyTorch's caching allocator) or spanning several physical allocations
// (expandable segments, cuMemCreate + cuMemMap) works. Handles are made once
// per allocation and region and dropped when the region is deregistered.
//
// GpuImports (the user's side) opens a peer's allocation once, in the context
// of a chosen local device, and keeps the mapping until the peer revokes it
// or the connection ends. Opening in the context of the device that will
// drive the copy means no context is created on any other GPU.
//
// Both are thread-safe (one mutex each) and owned by the engine.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "core/registry.h"
#include "gpu/stream_signals.h"
#include "platform/mutex.h"
#include "transport/local/shared_span.h"

namespace ferry::local {

class GpuExports {
 public:
  ~GpuExports();
  // Appends the description of `span` (host or GPU) to `out`.
  Status describe(const core::MemorySpan& span, std::vector<SharedSpan>& out);
  // Forgets (and closes the descriptors of) everything made for `region_id`.
  void retire(uint64_t region_id);

 private:
  struct Alloc {
    uint64_t base = 0;
    uint64_t size = 0;
    HandleType type = HandleType::kNone;
    int fd = -1;
    std::array<char, 64> ipc{};
    std::array<char, 16> pci{};
    uint64_t id = 0;  // SharedSpan::alloc_id
  };
  Result<Alloc> make(uint64_t address, int device);

  platform::Mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, Alloc> allocs_ GUARDED_BY(mu_);  // (region id, base)
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
};

class GpuImports {
 public:
  // Mappings of one peer (process and engine) whose close may be held while
  // a stream waits: past this many, open() refuses that peer's new
  // allocations (kResourceExhausted). A peer that revokes memory as fast as
  // it exports more, while the application's stream waits on it, would
  // otherwise make this process hold every mapping it ever opened.
  static constexpr size_t kMaxHeldPerPeer = 64;

  // `signals` (may be null) says whether an application stream waits on
  // ferry: closing a mapping then waits for that stream, so closes are held
  // until none does (see forget()).
  explicit GpuImports(std::shared_ptr<platform::StreamSignals> signals = nullptr)
      : signals_(std::move(signals)) {}
  ~GpuImports();
  // The local address of `span`'s first byte, opening its allocation in the
  // context of local device `device` if not yet open, for `user` (each
  // connection's copier; a mapping is shared by the connections to one peer
  // process, since an allocation opens once per process). `peer_pid` is the
  // pid the kernel vouched for. The caller has made that context current. kUnavailable /
  // kPermissionDenied with the reason; kDataLoss if the span runs past the
  // allocation as it was opened; kResourceExhausted while kMaxHeldPerPeer of
  // the peer's closed mappings are held.
  Result<uint8_t*> map(const void* user, uint64_t peer_engine, pid_t peer_pid, const SharedSpan& span, int device);
  // An opened allocation: where it starts here and how much of it was opened.
  struct Opened {
    uint64_t base = 0;       // the peer's address of its first byte (SharedSpan::alloc_base)
    uint64_t alloc_id = 0;   // SharedSpan::alloc_id
    uint8_t* local = nullptr;
    uint64_t size = 0;
  };
  // As map(), and what it opened, for finding more spans of the same
  // allocation with locate() while the caller's use of it lasts.
  Result<Opened> open(const void* user, uint64_t peer_engine, pid_t peer_pid, const SharedSpan& span, int device);
  // The local address of `span` in `opened` (the allocation it names).
  // kDataLoss if it runs past what was opened.
  static Result<uint8_t*> locate(const Opened& opened, const SharedSpan& span);
  // `user` stops using the peer's allocation at `alloc_base` (0: all of the
  // peer's); a mapping closes when its last user stops. The caller
  // guarantees none of its copies uses them any more. While an application
  // stream waits on ferry (StreamSignals::any_armed) the close is held, and
  // done by a later open() or forget() once none waits (arming waits for
  // the close: StreamSignals::Quiet), or at destruction:
  // the calling thread (a progress worker) may be the one that
  // ends the transfer the stream waits for, and a close waits for the stream.
  void forget(const void* user, uint64_t peer_engine, pid_t peer_pid, uint64_t alloc_base);

 private:
  struct Mapping {
    uint64_t local = 0;  // where the allocation starts here
    uint64_t size = 0;
    HandleType type = HandleType::kNone;
    int device = -1;
    // The allocation is this process's own (a peer engine of this process,
    // Options::local_same_process): used where it is, nothing to close.
    bool own = false;
    std::set<const void*> users;
    pid_t peer_pid = 0;  // whose allocation it is, for kMaxHeldPerPeer
    uint64_t peer_engine = 0;
  };
  // Maps this process's own allocation of `span` for use from `device`.
  static Result<Mapping> map_own(const SharedSpan& span, int device);
  void close(const Mapping& m);
  // Closes the held mappings unless a stream waits.
  void close_held() REQUIRES(mu_);

  const std::shared_ptr<platform::StreamSignals> signals_;
  platform::Mutex mu_;
  std::vector<Mapping> held_ GUARDED_BY(mu_);
  // By (peer pid, peer engine, base, alloc_id, device). The
  // pid is the kernel's word (peer_proof.h), the engine id the peer's: a
  // peer that names another engine's id still finds only mappings opened
  // for its own process, never another peer's memory. The id keeps a
  // mapping that another connection still holds (one that failed and is not
  // closed yet) from standing in for memory the peer allocated at the same
  // base after it deregistered the old.
  std::map<std::tuple<pid_t, uint64_t, uint64_t, uint64_t, int>, Mapping> maps_ GUARDED_BY(mu_);
};

// The local ordinal of the GPU with PCI address `pci` (as in SharedSpan), or -1.
int local_ordinal_of(const std::array<char, 16>& pci);

}  // namespace ferry::local
