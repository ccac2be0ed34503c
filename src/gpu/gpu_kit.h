// GpuKit: the CUDA streams, events and page-locked blocks a connection's
// transfer threads use, made ahead of time on an application thread.
//
// Why: Connection::stream_wait makes an application stream wait on the GPU
// until a ferry thread ends the transfer. A driver call that creates or frees
// such objects on that ferry thread can then wait, inside the driver, for the
// waiting stream, and holds the driver's lock while it does: on an H200 a
// path thread creating its first staging stream (cuStreamCreate) behind a
// waiting stream never returned, and every other thread of the process that
// asked the driver for a stream or pinned memory queued behind its lock.
// So stream_wait fills the connection's kit first (GpuKit::fill, before the
// wait is armed), the transfer threads take from the kit, and what they are
// done with goes back to it, and to the engine's GpuReserve when the
// connection ends; nothing is freed before the engine closes.
//
// A take from an empty kit still works (the object is made there and then)
// and is counted: the engine's metrics (gpu_objects_made_late) after a
// stream-waited transfer are what a test checks.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "ferry/status.h"
#include "gpu/cuda_driver.h"
#include "platform/mutex.h"

namespace ferry::platform {

class StreamSignals;

// Page-locked host blocks: plain (cuMemHostAlloc, portable) or lendable
// (ordinary pages a socket may borrow, registered portable and mapped).
enum class PinnedKind { kPlain, kLendable };

// How much of each a connection wants on every device it may copy on.
struct GpuKitSize {
  int streams = 0;  // per device, in each context (GpuContext)
  int events = 0;   // per device, in each context
  // Page-locked blocks, by kind and size: how many of each.
  std::map<std::pair<PinnedKind, size_t>, int> blocks;
};

// What kits gave back, for later kits; frees it all when the engine ends.
class GpuReserve {
 public:
  GpuReserve() = default;
  ~GpuReserve();
  GpuReserve(const GpuReserve&) = delete;
  GpuReserve& operator=(const GpuReserve&) = delete;

  // Objects kits had to make on a take because they had none spare.
  uint64_t made_late() const { return made_late_.load(std::memory_order_relaxed); }

 private:
  friend class GpuKit;
  std::atomic<uint64_t> made_late_{0};
  using BlockKey = std::pair<PinnedKind, size_t>;
  using Lane = std::pair<int, GpuContext>;  // a device and one of its contexts
  Mutex mu_;
  std::map<Lane, std::vector<cu::Stream>> streams_ GUARDED_BY(mu_);
  std::map<Lane, std::vector<cu::Event>> events_ GUARDED_BY(mu_);
  std::map<BlockKey, std::vector<void*>> blocks_ GUARDED_BY(mu_);
};

class GpuKit {
 public:
  // `signals`: arming a stream wait is held off while fill() makes objects
  // (null: none are armed in this engine).
  GpuKit(std::shared_ptr<GpuReserve> reserve, std::shared_ptr<StreamSignals> signals);
  // Everything back to the reserve (its users gave it back first).
  ~GpuKit();
  GpuKit(const GpuKit&) = delete;
  GpuKit& operator=(const GpuKit&) = delete;

  // On an application thread, before a stream waits on this connection:
  // holds `size` on every device this process has a context on, in the
  // device's primary context and in ferry's own (made here the first time:
  // GpuContext), taken from the reserve or made now (no stream is armed
  // meanwhile; where one already waits, the driver may hold this thread
  // until it goes on). A device filled before is skipped: after the first
  // wait, nothing is made.
  Status fill(const GpuKitSize& size) EXCLUDES(mu_);

  // A stream of ferry's own on `device`, in context `ctx` of it
  // (CudaDriver::create_own_stream: non-blocking, the greatest priority; the
  // context is made current here).
  Result<cu::Stream> take_stream(int device, GpuContext ctx = GpuContext::kApplication) EXCLUDES(mu_);
  void give_stream(int device, cu::Stream s, GpuContext ctx = GpuContext::kApplication) EXCLUDES(mu_);
  // An event (timing off) of context `ctx` of `device`.
  Result<cu::Event> take_event(int device, GpuContext ctx = GpuContext::kApplication) EXCLUDES(mu_);
  void give_event(int device, cu::Event e, GpuContext ctx = GpuContext::kApplication) EXCLUDES(mu_);
  // A page-locked block of `bytes`, made in `device`'s context when made here.
  Result<void*> take_block(PinnedKind kind, size_t bytes, int device) EXCLUDES(mu_);
  void give_block(PinnedKind kind, size_t bytes, void* p) EXCLUDES(mu_);

 private:
  using BlockKey = GpuReserve::BlockKey;
  using Lane = GpuReserve::Lane;
  Status top_up(int device, const GpuKitSize& size) REQUIRES(mu_);
  Status top_up_lane(Lane lane, const GpuKitSize& size) REQUIRES(mu_);
  // A spare from `spares` (one of the maps below) under `key`; none, and
  // one more counted made late (GpuReserve::made_late), when it is empty
  // (the first time after a fill, logged naming `what`).
  template <class Key, class T>
  std::optional<T> take_spare(std::map<Key, std::vector<T>> GpuKit::*spares, const Key& key, const char* what)
      EXCLUDES(mu_);

  const std::shared_ptr<GpuReserve> reserve_;
  const std::shared_ptr<StreamSignals> signals_;
  mutable Mutex mu_;
  std::map<Lane, std::vector<cu::Stream>> streams_ GUARDED_BY(mu_);
  std::map<Lane, std::vector<cu::Event>> events_ GUARDED_BY(mu_);
  std::map<BlockKey, std::vector<void*>> blocks_ GUARDED_BY(mu_);
  std::set<int> filled_ GUARDED_BY(mu_);  // devices fill() stocked
  bool warned_late_ GUARDED_BY(mu_) = false;
};

// The devices whose primary context this process has made.
std::vector<int> active_devices();

}  // namespace ferry::platform
