// The CUDA copier: staging copies (by the copy kernel where it can, else the
// copy engines) on per-device non-blocking streams, fenced by events, through
// the driver table of gpu/cuda_driver.h.
#include <algorithm>
#include <array>
#include <deque>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "gpu/cuda_driver.h"
#include "gpu/gather_kernel.h"
#include "gpu/gpu_kit.h"
#include "gpu/staging_copier.h"
#include "gpu/staging_kernel.h"
#include "gpu/stream_signals.h"
#include "platform/page_lender.h"

namespace ferry::platform {
namespace {

using cu::DevicePtr;
using cu::Event;
using cu::Stream;

DevicePtr dptr(const void* p) { return static_cast<DevicePtr>(reinterpret_cast<uintptr_t>(p)); }

// Only its owner's thread calls it (see StagingCopier). Every driver call
// runs under a DeviceScope, so a copier used on an application thread leaves
// that thread's current context as it found it. Its streams, events and
// page-locked blocks come from, and go back to, its connection's kit
// (gpu/gpu_kit.h): a copier never makes nor frees a driver object on the
// thread that moves a transfer when the kit was filled.
//
// Two lanes a device: a stream in the application's context (the primary
// one) and one in ferry's own (GpuContext). While an application stream of
// this process waits on the GPU for any engine, a copy queued in the
// application's context may sit behind that wait in a hardware queue the
// two share, and the wait waits for the copy: every copy then goes to
// ferry's context, by the copy engines (docs/architecture.md, "CUDA stream
// order"). Otherwise the application's context, where the staging and
// gather kernels run. The lane is chosen under a Pass of the waits' gate
// (StreamSignals::app_queue_gate), so no wait is queued between the choice
// and the queuing. Copies stay in the order queued: before a device's
// copies move to the other lane, the lane they leave is waited for (it
// always ends: what it holds was queued before any wait).
class CudaCopier final : public StagingCopier {
 public:
  CudaCopier(std::shared_ptr<StagingKernels> kernels, std::shared_ptr<GatherKernels> gather,
             std::shared_ptr<GpuKit> kit)
      : kernels_(std::move(kernels)), gather_(std::move(gather)), kit_(std::move(kit)) {}

  ~CudaCopier() override {
    (void)wait(issued_);
    for (Table& t : tables_) {
      if (t.items != nullptr) kit_->give_block(PinnedKind::kPlain, kTableBytes, t.items);
    }
    for (size_t dev = 0; dev < devices_.size(); ++dev) {
      for (GpuContext ctx : kContexts) {
        Lane& lane = devices_[dev].lane(ctx);
        if (lane.stream == nullptr) continue;
        for (Event e : lane.idle) kit_->give_event(static_cast<int>(dev), e, ctx);
        kit_->give_stream(static_cast<int>(dev), lane.stream, ctx);
      }
    }
  }

  Result<void*> alloc_host(int device, size_t bytes) override {
    return kit_->take_block(PinnedKind::kPlain, bytes, device);
  }

  void free_host(void* p, size_t bytes) override { kit_->give_block(PinnedKind::kPlain, bytes, p); }

  Result<void*> alloc_lendable(int device, size_t bytes) override {
    return kit_->take_block(PinnedKind::kLendable, bytes, device);
  }

  void free_lendable(void* p, size_t bytes) override { kit_->give_block(PinnedKind::kLendable, bytes, p); }

  Status copy(int device, void* dst, const void* src, size_t n) override {
    const CudaDriver& d = cuda();
    if (!d.available()) return Status(Code::kUnimplemented, "GPU memory to stage, but no CUDA driver on this host");
    if (device < 0) return Status(Code::kInvalidArgument, "staging copy without a device");
    QueueGate::Pass app(StreamSignals::app_queue_gate());
    const GpuContext ctx = app.clear() ? GpuContext::kApplication : GpuContext::kFerry;
    DeviceScope scope(device, ctx);
    if (!scope.ok()) return scope.status();
    auto stream = stream_of(device, ctx);
    if (!stream.ok()) return stream.status();
    Status s(Code::kUnimplemented, "no copy kernel");
    if (kernels_ && ctx == GpuContext::kApplication && StagingKernels::fits(dst, src, n)) {
      s = kernels_->copy(device, stream.value(), dst, src, n);
      if (s.ok()) ++kernel_copies_;
    }
    // Bytes the kernel cannot move, or no kernel on this device: the copy engines.
    if (s.code() == Code::kUnimplemented) {
      s = d.check(d.memcpy_async(dptr(dst), dptr(src), n, stream.value()), "cuMemcpyAsync");
    }
    FERRY_RETURN_IF_ERROR(s);
    devices_[static_cast<size_t>(device)].dirty = true;
    return Status();
  }

  Status copy_many(int device, std::span<const Op> many) override {
    const CudaDriver& d = cuda();
    if (many.size() < 2 || !d.available() || device < 0) return StagingCopier::copy_many(device, many);
    uint64_t bytes = 0;
    for (const Op& op : many) bytes += op.n;
    QueueGate::Pass app(StreamSignals::app_queue_gate());
    const GpuContext ctx = app.clear() ? GpuContext::kApplication : GpuContext::kFerry;
    const bool gather = gather_ && ctx == GpuContext::kApplication && GatherKernels::suits(many.size(), bytes);
    if (!gather && !d.has_memcpy_batch()) return StagingCopier::copy_many(device, many);
    DeviceScope scope(device, ctx);
    if (!scope.ok()) return scope.status();
    auto stream = stream_of(device, ctx);
    if (!stream.ok()) return stream.status();
    if (gather) {
      // A chunk of a KV cache's blocks: one launch instead of about a
      // microsecond of copy engine per block (gather_kernel.h), its list in a
      // pinned table where one is free (a launch of two parameters; with the
      // list in its parameters, each of the paths' launches held the
      // driver's lock longer), else in the launch's parameters.
      Status s = copy_listed(device, stream.value(), many, bytes);
      if (s.code() == Code::kUnavailable) {
        pieces_.clear();
        for (const Op& op : many) {
          pieces_.push_back({static_cast<uint8_t*>(op.dst), static_cast<const uint8_t*>(op.src), op.n});
        }
        s = gather_->copy(device, stream.value(), pieces_);
      }
      if (s.code() != Code::kUnimplemented) {
        if (s.ok()) ++kernel_copies_;
        // Even a failure may follow a first launch: the next fence covers it.
        devices_[static_cast<size_t>(device)].dirty = true;
        return s;
      }
      if (!d.has_memcpy_batch()) return StagingCopier::copy_many(device, many);
    }
    dsts_.clear();
    srcs_.clear();
    sizes_.clear();
    for (const Op& op : many) {
      dsts_.push_back(dptr(op.dst));
      srcs_.push_back(dptr(op.src));
      sizes_.push_back(op.n);
    }
    FERRY_RETURN_IF_ERROR(
        d.check(d.memcpy_batch(dsts_.data(), srcs_.data(), sizes_.data(), sizes_.size(), stream.value()),
                "cuMemcpyBatchAsync"));
    devices_[static_cast<size_t>(device)].dirty = true;
    return Status();
  }

  uint64_t kernel_copies() const override { return kernel_copies_; }

  Result<uint64_t> fence() override {
    const CudaDriver& d = cuda();
    Pending p;
    p.ticket = issued_ + 1;
    // A fence that fails part way covers nothing: the events already
    // recorded go back, and their devices still have unfenced copies.
    auto undo = [&](const Status& why) {
      for (const Mark& m : p.marks) {
        if (m.event != nullptr) devices_[static_cast<size_t>(m.device)].lane(m.ctx).idle.push_back(m.event);
        devices_[static_cast<size_t>(m.device)].dirty = true;
      }
      return why;
    };
    for (size_t dev = 0; dev < devices_.size(); ++dev) {
      PerDevice& pd = devices_[dev];
      if (!pd.dirty) continue;
      Lane& lane = pd.lane(pd.in_use);
      Mark m{static_cast<int>(dev), pd.in_use, lane.stream, nullptr};
      // In the application's context while a stream waits, an event would
      // queue behind the wait: the stream is asked instead (nothing is
      // queued on it before the wait ends, so it is idle once these end).
      std::optional<QueueGate::Pass> app;
      if (m.ctx == GpuContext::kApplication) app.emplace(StreamSignals::app_queue_gate());
      if (!app || app->clear()) {
        DeviceScope scope(m.device, m.ctx);
        if (!scope.ok()) return undo(scope.status());
        if (!lane.idle.empty()) {
          m.event = lane.idle.back();
          lane.idle.pop_back();
        } else {
          Result<Event> made = kit_->take_event(m.device, m.ctx);
          if (!made.ok()) return undo(made.status());
          m.event = made.value();
        }
        Status s = d.check(d.event_record(m.event, lane.stream), "cuEventRecord");
        if (!s.ok()) {
          lane.idle.push_back(m.event);
          return undo(s);
        }
      }
      p.marks.push_back(m);
      pd.dirty = false;
    }
    pending_.push_back(std::move(p));
    return ++issued_;
  }

  Status sync() override {
    const CudaDriver& d = cuda();
    Status first;
    for (size_t dev = 0; dev < devices_.size(); ++dev) {
      PerDevice& pd = devices_[dev];
      Status s;
      for (GpuContext ctx : kContexts) {
        if (pd.lane(ctx).stream == nullptr) continue;
        DeviceScope scope(static_cast<int>(dev), ctx);
        Status one =
            scope.ok() ? d.check(d.stream_synchronize(pd.lane(ctx).stream), "cuStreamSynchronize") : scope.status();
        if (s.ok()) s = one;
      }
      if (s.ok()) pd.dirty = false;
      if (first.ok()) first = s;
    }
    return first;
  }

  Result<bool> done(uint64_t ticket) override {
    const CudaDriver& d = cuda();
    while (completed_ < ticket && !pending_.empty()) {
      Pending& p = pending_.front();
      for (const Mark& m : p.marks) {
        DeviceScope scope(m.device, m.ctx);
        cu::Result r = m.event != nullptr ? d.event_query(m.event) : d.stream_query(m.stream);
        if (r == cu::kNotReady) return false;
        FERRY_RETURN_IF_ERROR(d.check(r, m.event != nullptr ? "cuEventQuery" : "cuStreamQuery"));
      }
      retire_front();
    }
    return completed_ >= ticket;
  }

  Status wait(uint64_t ticket) override {
    const CudaDriver& d = cuda();
    while (completed_ < ticket && !pending_.empty()) {
      Pending& p = pending_.front();
      for (const Mark& m : p.marks) {
        DeviceScope scope(m.device, m.ctx);
        if (m.event != nullptr) {
          FERRY_RETURN_IF_ERROR(d.check(d.event_synchronize(m.event), "cuEventSynchronize"));
        } else {
          FERRY_RETURN_IF_ERROR(d.check(d.stream_synchronize(m.stream), "cuStreamSynchronize"));
        }
      }
      retire_front();
    }
    return Status();
  }

 private:
  static constexpr GpuContext kContexts[] = {GpuContext::kApplication, GpuContext::kFerry};
  struct Lane {
    Stream stream = nullptr;
    std::vector<Event> idle;  // recorded events that finished, for reuse
  };
  struct PerDevice {
    std::array<Lane, 2> lanes;                     // by GpuContext
    GpuContext in_use = GpuContext::kApplication;  // the lane copies go to now
    bool dirty = false;                            // copies queued since the last fence
    Lane& lane(GpuContext ctx) { return lanes[static_cast<size_t>(ctx)]; }
  };
  // What a fence waits for on one device: an event, or (event null) the
  // stream having run everything queued on it.
  struct Mark {
    int device;
    GpuContext ctx;
    Stream stream;
    Event event;
  };
  struct Pending {
    uint64_t ticket = 0;
    std::vector<Mark> marks;
  };

  // The stream of `device` in `ctx` (whose scope the caller holds), taken
  // from the kit on first use. When the device's copies move from the other
  // lane, that lane is waited for first, so copies stay in the order queued.
  Result<Stream> stream_of(int device, GpuContext ctx) {
    if (devices_.size() <= static_cast<size_t>(device)) devices_.resize(static_cast<size_t>(device) + 1);
    PerDevice& pd = devices_[static_cast<size_t>(device)];
    Lane& lane = pd.lane(ctx);
    if (lane.stream == nullptr) {
      FERRY_ASSIGN_OR_RETURN(lane.stream, kit_->take_stream(device, ctx));
    }
    if (pd.in_use != ctx) {
      Lane& left = pd.lane(pd.in_use);
      if (left.stream != nullptr) {
        const CudaDriver& d = cuda();
        DeviceScope scope(device, pd.in_use);
        FERRY_RETURN_IF_ERROR(scope.status());
        FERRY_RETURN_IF_ERROR(d.check(d.stream_synchronize(left.stream), "cuStreamSynchronize (changing lanes)"));
      }
      pd.in_use = ctx;
    }
    return lane.stream;
  }

  // A list for the gather kernel in pinned memory, reused once the fence
  // after the copy that read it is done.
  struct Table {
    GatherPiece* items = nullptr;  // kTableItems of them
    uint64_t ticket = 0;           // the fence after its last use (0: never used)
  };
  static constexpr size_t kTables = 4;
  static constexpr size_t kTableItems = kGatherTableItems;
  static constexpr size_t kTableBytes = kGatherTableBytes;

  // Queues `many` (`bytes` in all) as one gather launch that reads its list
  // from a free table. kUnavailable, nothing queued, when no table is free or
  // the list does not fit one.
  Status copy_listed(int device, Stream stream, std::span<const Op> many, uint64_t bytes) {
    constexpr uint64_t kItem = GatherKernels::kItemBytes;
    size_t count = 0;
    for (const Op& op : many) count += (op.n + kItem - 1) / kItem;
    if (count > kTableItems) return Status(Code::kUnavailable, "list longer than a table");
    Table* t = free_table(device);
    if (t == nullptr) return Status(Code::kUnavailable, "no free table");
    size_t at = 0;
    for (const Op& op : many) {
      for (uint64_t off = 0; off < op.n; off += kItem) {
        t->items[at++] = {static_cast<uint8_t*>(op.dst) + off, static_cast<const uint8_t*>(op.src) + off,
                          std::min(kItem, op.n - off)};
      }
    }
    Status s = gather_->copy_table(device, stream, t->items, static_cast<unsigned>(count), bytes);
    // Held until the next fence is done: a launch that failed may still run.
    if (s.code() != Code::kUnimplemented) t->ticket = issued_ + 1;
    return s;
  }

  Table* free_table(int device) {
    for (Table& t : tables_) {
      if (t.items != nullptr) {
        if (t.ticket == 0 || t.ticket <= completed_) return &t;
        auto finished = done(t.ticket);
        if (finished.ok() && *finished) return &t;
        continue;
      }
      Result<void*> p = kit_->take_block(PinnedKind::kPlain, kTableBytes, device);
      if (!p.ok()) return nullptr;
      t.items = static_cast<GatherPiece*>(p.value());
      return &t;
    }
    return nullptr;
  }

  void retire_front() {
    Pending& p = pending_.front();
    for (const Mark& m : p.marks) {
      if (m.event != nullptr) devices_[static_cast<size_t>(m.device)].lane(m.ctx).idle.push_back(m.event);
    }
    completed_ = p.ticket;
    pending_.pop_front();
  }

  const std::shared_ptr<StagingKernels> kernels_;  // null: copy engines only
  const std::shared_ptr<GatherKernels> gather_;    // batches of blocks (null: copy engines)
  const std::shared_ptr<GpuKit> kit_;
  std::vector<PerDevice> devices_;  // by ordinal
  std::deque<Pending> pending_;     // fences not yet seen done, oldest first
  uint64_t issued_ = 0;
  uint64_t completed_ = 0;
  uint64_t kernel_copies_ = 0;          // copies and gathers queued by a kernel
  std::vector<DevicePtr> dsts_, srcs_;  // copy_many's arguments, kept between calls
  std::vector<size_t> sizes_;
  std::vector<GatherPiece> pieces_;  // the gather kernel's, likewise
  std::array<Table, kTables> tables_;
};

}  // namespace

std::unique_ptr<StagingCopier> make_cuda_copier(std::shared_ptr<StagingKernels> kernels,
                                                std::shared_ptr<GatherKernels> gather, std::shared_ptr<GpuKit> kit) {
  // Without a connection's kit (a copier of its own): one no stream_wait fills.
  if (!kit) kit = std::make_shared<GpuKit>(std::make_shared<GpuReserve>(), nullptr);
  return std::make_unique<CudaCopier>(std::move(kernels), std::move(gather), std::move(kit));
}

}  // namespace ferry::platform
