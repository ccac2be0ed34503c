// The CUDA copier: staging copies (by the copy kernel where it can, else the
// copy engines) on per-device non-blocking streams, fenced by events, through
// the driver table of gpu/cuda_driver.h.
#include <algorithm>
#include <array>
#include <deque>
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
// While an application stream of this process waits on the GPU for any
// engine (StreamSignals::any_waiting), every copy goes to the copy engines
// and none to a kernel: on an H200 a staging kernel queued behind such a
// wait sometimes never ran, and the receive it ended never ended
// (docs/architecture.md, "CUDA stream order"; the runs:
// docs/benchmarks/2026-11-30.md, "session six").
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
      PerDevice& pd = devices_[dev];
      if (pd.stream == nullptr) continue;
      for (Event e : pd.idle) kit_->give_event(static_cast<int>(dev), e);
      kit_->give_stream(static_cast<int>(dev), pd.stream);
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
    DeviceScope scope(device);
    if (!scope.ok()) return scope.status();
    auto stream = stream_of(device);
    if (!stream.ok()) return stream.status();
    Status s(Code::kUnimplemented, "no copy kernel");
    if (kernels_ && StagingKernels::fits(dst, src, n) && !StreamSignals::any_waiting()) {
      s = kernels_->copy(device, stream.value(), dst, src, n);
      if (s.ok()) ++kernel_copies_;
    }
    // Bytes the kernel cannot move, or no kernel on this device: the copy engines.
    if (s.code() == Code::kUnimplemented) {
      s = d.check(d.memcpy_async(dptr(dst), dptr(src), n, stream.value()), "cuMemcpyAsync");
    }
    FERRY_RETURN_IF_ERROR(s);
    devices_[static_cast<size_t>(device)].dirty = true;
    last_device_ = device;
    return Status();
  }

  Status copy_many(int device, std::span<const Op> many) override {
    const CudaDriver& d = cuda();
    if (many.size() < 2 || !d.available() || device < 0) return StagingCopier::copy_many(device, many);
    uint64_t bytes = 0;
    for (const Op& op : many) bytes += op.n;
    const bool gather = gather_ && GatherKernels::suits(many.size(), bytes) && !StreamSignals::any_waiting();
    if (!gather && !d.has_memcpy_batch()) return StagingCopier::copy_many(device, many);
    DeviceScope scope(device);
    if (!scope.ok()) return scope.status();
    auto stream = stream_of(device);
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
        last_device_ = device;
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
    FERRY_RETURN_IF_ERROR(d.check(d.memcpy_batch(dsts_.data(), srcs_.data(), sizes_.data(), sizes_.size(),
                                                 stream.value()),
                                  "cuMemcpyBatchAsync"));
    devices_[static_cast<size_t>(device)].dirty = true;
    last_device_ = device;
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
      for (auto& [dev, e] : p.events) {
        devices_[static_cast<size_t>(dev)].idle.push_back(e);
        devices_[static_cast<size_t>(dev)].dirty = true;
      }
      return why;
    };
    for (size_t dev = 0; dev < devices_.size(); ++dev) {
      PerDevice& pd = devices_[dev];
      if (!pd.dirty) continue;
      DeviceScope scope(static_cast<int>(dev));
      if (!scope.ok()) return undo(scope.status());
      Event e = nullptr;
      if (!pd.idle.empty()) {
        e = pd.idle.back();
        pd.idle.pop_back();
      } else {
        Result<Event> made = kit_->take_event(static_cast<int>(dev));
        if (!made.ok()) return undo(made.status());
        e = made.value();
      }
      Status s = d.check(d.event_record(e, pd.stream), "cuEventRecord");
      if (!s.ok()) {
        pd.idle.push_back(e);
        return undo(s);
      }
      p.events.emplace_back(static_cast<int>(dev), e);
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
      if (pd.stream == nullptr) continue;
      DeviceScope scope(static_cast<int>(dev));
      Status s = scope.ok() ? d.check(d.stream_synchronize(pd.stream), "cuStreamSynchronize") : scope.status();
      if (s.ok()) pd.dirty = false;
      if (first.ok()) first = s;
    }
    return first;
  }

  Result<bool> done(uint64_t ticket) override {
    const CudaDriver& d = cuda();
    while (completed_ < ticket && !pending_.empty()) {
      Pending& p = pending_.front();
      for (auto& [dev, e] : p.events) {
        DeviceScope scope(dev);
        cu::Result r = d.event_query(e);
        if (r == cu::kNotReady) return false;
        FERRY_RETURN_IF_ERROR(d.check(r, "cuEventQuery"));
      }
      retire_front();
    }
    return completed_ >= ticket;
  }

  Status wait(uint64_t ticket) override {
    const CudaDriver& d = cuda();
    while (completed_ < ticket && !pending_.empty()) {
      Pending& p = pending_.front();
      for (auto& [dev, e] : p.events) {
        DeviceScope scope(dev);
        FERRY_RETURN_IF_ERROR(d.check(d.event_synchronize(e), "cuEventSynchronize"));
      }
      retire_front();
    }
    return Status();
  }

 private:
  struct PerDevice {
    Stream stream = nullptr;
    std::vector<Event> idle;  // recorded events that finished, for reuse
    bool dirty = false;       // copies queued since the last fence
  };
  struct Pending {
    uint64_t ticket = 0;
    std::vector<std::pair<int, Event>> events;
  };

  Result<Stream> stream_of(int device) {
    if (devices_.size() <= static_cast<size_t>(device)) devices_.resize(static_cast<size_t>(device) + 1);
    PerDevice& pd = devices_[static_cast<size_t>(device)];
    if (pd.stream == nullptr) {
      FERRY_ASSIGN_OR_RETURN(pd.stream, kit_->take_stream(device));
    }
    return pd.stream;
  }

  // A list for the gather kernel in pinned memory, reused once the fence
  // after the copy that read it is done.
  struct Table {
    GatherPiece* items = nullptr;  // kTableItems of them
    uint64_t ticket = 0;                     // the fence after its last use (0: never used)
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
    for (auto& [dev, e] : p.events) devices_[static_cast<size_t>(dev)].idle.push_back(e);
    completed_ = p.ticket;
    pending_.pop_front();
  }

  const std::shared_ptr<StagingKernels> kernels_;        // null: copy engines only
  const std::shared_ptr<GatherKernels> gather_;   // batches of blocks (null: copy engines)
  const std::shared_ptr<GpuKit> kit_;
  std::vector<PerDevice> devices_;                 // by ordinal
  std::deque<Pending> pending_;                    // fences not yet seen done, oldest first
  uint64_t issued_ = 0;
  uint64_t completed_ = 0;
  uint64_t kernel_copies_ = 0;  // copies and gathers queued by a kernel
  int last_device_ = -1;
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
