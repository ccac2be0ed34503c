// LocalCopier's GPU side: the per-device streams and events, the peer's
// allocations opened and located piece by piece, runs of pieces queued as
// one gather launch (or one batched copy-engine call), a batch of blocks
// between prepared pools in one launch whose list the kernel reads from a
// pinned table (or, when its blocks join into a few long runs, a copy-engine
// copy a run), and a copy's completion once its GPU pieces are queued.
#include <algorithm>
#include <chrono>
#include <optional>

#include "transport/local/block_pieces.h"
#include "transport/local/local_copier.h"

namespace ferry::local {

namespace cu = platform::cu;
using platform::GatherKernels;
using platform::GatherPiece;
using platform::GpuContext;
using platform::ResidentGather;

Status LocalCopier::copy_to_device_now(int device, void* dst, const void* src, size_t n) {
  if (!platform::gpu_driver_available()) {
    return Status(Code::kUnimplemented, "GPU memory on a host without a CUDA driver");
  }
  GpuContext ctx = GpuContext::kApplication;
  cu::Stream s = nullptr;
  {
    // Held while the copy is queued, not while it runs.
    platform::LaneChoice choice;
    ctx = choice.context();
    platform::DeviceScope on(device, ctx);
    FERRY_RETURN_IF_ERROR(on.status());
    {
      platform::MutexLock lock(mu_);
      FERRY_ASSIGN_OR_RETURN(s, lanes_.stream(device, ctx));
    }
    FERRY_RETURN_IF_ERROR(platform::queue_copy(s, dst, src, n, platform::CopyDirection::kHostToDevice)
                              .with_context("into the receive buffer"));
  }
  return platform::wait_stream(device, ctx, s).with_context("into the receive buffer");
}

Result<LocalCopier::GpuCopy> LocalCopier::gpu_piece(uint8_t* local, int local_device, const SharedSpan& remote,
                                                    uint64_t offset, uint64_t n, bool to_remote, PieceCache& cache) {
  if (!platform::gpu_driver_available()) {
    return Status(Code::kUnimplemented, "GPU memory on a host without a CUDA driver");
  }
  // The copy runs in the context of the local GPU. With only host memory
  // here, in a context this process already has (the peer's GPU is reached
  // through peer access); only a process with none takes the peer GPU's.
  int device = local_device;
  if (device < 0) {
    if (cache.peer_device < 0 || cache.peer_pci != remote.pci) {
      cache.peer_pci = remote.pci;
      cache.peer_device = platform::first_active_device(local_ordinal_of(remote.pci));
    }
    device = cache.peer_device;
  }
  if (device < 0) {
    return Status(Code::kUnavailable, "the peer's GPU " + std::string(remote.pci.data()) +
                                          " is not visible to this process (CUDA_VISIBLE_DEVICES?)");
  }
  if (!remote.gpu()) return Status(Code::kInternal, "local copier: GPU memory paired with the peer's host memory");
  if (cache.device != device || !cache.scope) {
    cache.scope.reset();
    cache.scope.emplace(device);
    cache.device = device;
  }
  FERRY_RETURN_IF_ERROR(cache.scope->status());
  if (!cache.opened || cache.opened_on != device || cache.opened->base != remote.alloc_base ||
      cache.opened->alloc_id != remote.alloc_id) {
    FERRY_ASSIGN_OR_RETURN(cache.opened, imports_.open(this, peer_engine_, peer_pid_, remote, device));
    cache.opened_on = device;
    cache.located_span = nullptr;
  }
  if (cache.located_span != &remote) {
    FERRY_ASSIGN_OR_RETURN(cache.located, GpuImports::locate(*cache.opened, remote));
    cache.located_span = &remote;
  }
  uint8_t* far = cache.located + offset;  // the walk keeps offset + n within the span
  GpuCopy c;
  c.device = device;
  c.dst = to_remote ? far : local;
  c.src = to_remote ? local : far;
  c.n = n;
  c.host_dst = to_remote ? false : local_device < 0;  // `far` is always GPU memory
  c.host_src = to_remote ? local_device < 0 : false;
  return c;
}

Status LocalCopier::queue_gpu_copies(const std::vector<GpuCopy>& copies, std::vector<platform::GpuLane>& used) {
  std::vector<cu::DevicePtr> dsts, srcs;
  std::vector<size_t> sizes;
  std::vector<GatherPiece> pieces;
  for (size_t i = 0; i < copies.size();) {
    const GpuCopy& c = copies[i];
    // The gather kernel in the application's context only while no stream
    // waits there; else the copy engines, from ferry's own (copy_lanes.h).
    platform::LaneChoice choice;
    const GpuContext ctx = choice.context();
    platform::DeviceScope on(c.device, ctx);
    FERRY_RETURN_IF_ERROR(on.status());
    platform::MutexLock lock(mu_);
    FERRY_ASSIGN_OR_RETURN(cu::Stream s, lanes_.stream(c.device, ctx));
    const platform::GpuLane lane{c.device, ctx};
    if (std::find(used.begin(), used.end(), lane) == used.end()) used.push_back(lane);
    // The run of device-to-device copies on this device that starts here.
    size_t end = i;
    while (end < copies.size() && copies[end].device == c.device && !copies[end].host_src && !copies[end].host_dst) {
      ++end;
    }
    uint64_t run_bytes = 0;
    for (size_t k = i; k < end; ++k) run_bytes += copies[k].n;
    if (gather_ && ctx == GpuContext::kApplication && GatherKernels::suits(end - i, run_bytes)) {
      pieces.clear();
      for (size_t k = i; k < end; ++k) pieces.push_back({copies[k].dst, copies[k].src, copies[k].n});
      Status g = gather_->copy(c.device, s, pieces);
      if (g.ok()) {
        i = end;
        continue;
      }
      if (g.code() != Code::kUnimplemented) return g;
    }
    if (end - i >= 2 && platform::can_queue_batch()) {
      dsts.clear();
      srcs.clear();
      sizes.clear();
      for (size_t k = i; k < end; ++k) {
        dsts.push_back(reinterpret_cast<cu::DevicePtr>(copies[k].dst));
        srcs.push_back(reinterpret_cast<cu::DevicePtr>(copies[k].src));
        sizes.push_back(copies[k].n);
      }
      FERRY_RETURN_IF_ERROR(platform::queue_batch(s, dsts, srcs, sizes));
      i = end;
      continue;
    }
    using platform::CopyDirection;
    CopyDirection direction = c.host_src   ? CopyDirection::kHostToDevice
                              : c.host_dst ? CopyDirection::kDeviceToHost
                                           : CopyDirection::kDeviceToDevice;
    FERRY_RETURN_IF_ERROR(platform::queue_copy(s, c.dst, c.src, c.n, direction));
    ++i;
  }
  return Status();
}

Status LocalCopier::start_blocks(int device, std::span<uint8_t* const> local, std::span<const SharedSpan> remote,
                                 std::span<const Block> blocks, uint64_t size, Done when_done, StopCheck stop) {
  if (!gather_) return Status(Code::kUnimplemented, "no gather kernel");
  // Joining blocks only lowers the count, so a batch whose blocks are too
  // large on average for the kernel stays so: the general path copies them.
  if (!GatherKernels::suits(blocks.size(), size)) return Status(Code::kUnimplemented, "blocks too large to gather");
  FERRY_ASSIGN_OR_RETURN(Running running, admit(stop));
  Done done = checked(std::move(when_done));
  platform::DeviceScope on(device);
  FERRY_RETURN_IF_ERROR(on.status());
  // Where each of the peer's pools begins in this GPU's address space: one
  // lookup a pool, not a block.
  std::vector<uint8_t*> far(remote.size());
  for (size_t i = 0; i < remote.size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(GpuImports::Opened opened, imports_.open(this, peer_engine_, peer_pid_, remote[i], device));
    FERRY_ASSIGN_OR_RETURN(far[i], GpuImports::locate(opened, remote[i]));
  }
  // Kernels run in the application's context, and only while no stream of
  // the process waits there (copy_lanes.h): else the general path's copies.
  std::optional<platform::LaneChoice> choice(std::in_place);
  if (choice->context() != GpuContext::kApplication) {
    return Status(Code::kUnimplemented, "a CUDA stream waits: no kernel");
  }
  constexpr uint64_t kItem = GatherKernels::kItemBytes;
  cu::Stream stream = nullptr;
  PieceTable* table = nullptr;
  {
    platform::MutexLock lock(mu_);
    FERRY_ASSIGN_OR_RETURN(stream, lanes_.stream(device, GpuContext::kApplication));
    table = take_table(device);
  }
  auto give_back = [this](PieceTable* t) {
    platform::MutexLock lock(mu_);
    t->busy = false;
  };
  // The list goes straight into the table the kernel reads; if none is free
  // or the list outgrows it, it rides in the launch's parameters. The
  // resident kernel takes pieces of kPieceBytes, where they fit the table.
  const bool resident = resident_ != nullptr && table != nullptr &&
                        most_block_pieces(blocks.size(), size, ResidentGather::kPieceBytes) <= kTableItems;
  size_t runs = 0;
  std::optional<size_t> listed;
  std::vector<GatherPiece> spilled;
  if (table != nullptr) {
    listed = list_block_pieces(far, local, blocks, resident ? ResidentGather::kPieceBytes : kItem, table->items,
                               kTableItems, runs);
    if (!listed) {
      give_back(table);
      table = nullptr;
    }
  }
  if (!listed) {
    spilled.resize(most_block_pieces(blocks.size(), size, kItem));
    listed = list_block_pieces(far, local, blocks, kItem, spilled.data(), spilled.size(), runs);
    if (!listed) return Status(Code::kInternal, "local copier: a batch's pieces outgrew most_block_pieces");
  }
  if (!GatherKernels::suits(runs, size)) {
    // Blocks that join into few long runs (adjacent on both sides): a
    // copy-engine copy a run.
    if (table != nullptr) give_back(table);
    std::vector<GatherPiece> whole(runs);
    (void)list_block_pieces(far, local, blocks, UINT64_MAX, whole.data(), whole.size(), runs);
    choice.reset();  // queue_gpu_copies chooses for itself
    std::vector<GpuCopy> copies;
    copies.reserve(whole.size());
    for (const GatherPiece& r : whole) copies.push_back({device, r.dst, const_cast<uint8_t*>(r.src), r.n});
    std::vector<platform::GpuLane> used;
    if (Status q = queue_gpu_copies(copies, used); !q.ok()) {
      sync_streams(used);
      return q;
    }
    return complete_gpu(used, size, std::move(done));
  }
  const GatherPiece* list = table != nullptr ? table->items : spilled.data();
  if (resident && table != nullptr) {  // the kernel reads the list after this returns: only from a table
    Result<ResidentGather::Ticket> ticket = resident_->post(device, list, static_cast<unsigned>(*listed));
    if (ticket.ok()) {
      choice.reset();  // posted: completions run without it
      complete_resident(ticket.value(), size, [table, give_back, done = std::move(done)](const Status& st) {
        give_back(table);  // the kernel read it
        done(st);
      });
      return Status();
    }
    // Busy with another batch, or the kernel did not launch: launched
    // instead, from the same table.
  }
  Status queued;
  if (table != nullptr) {
    queued = gather_->copy_table(device, stream, list, static_cast<unsigned>(*listed), size);
    if (!queued.ok()) give_back(table);
  } else {
    queued = gather_->copy(device, stream, std::span<const GatherPiece>(list, *listed));
  }
  choice.reset();                                            // queued: completions run without it
  if (queued.code() == Code::kUnimplemented) return queued;  // nothing queued: the kernel did not load
  std::vector<platform::GpuLane> used{{device, GpuContext::kApplication}};
  if (!queued.ok()) {
    sync_streams(used);
    return queued;
  }
  if (table != nullptr) {
    done = [table, give_back, done = std::move(done)](const Status& st) {
      give_back(table);  // the kernel read it long ago
      done(st);
    };
  }
  Status s = complete_gpu(used, size, std::move(done));
  if (!s.ok() && table != nullptr) give_back(table);  // complete_gpu waited for the copy
  return s;
}

bool LocalCopier::resident_ended(const ResidentGather::Ticket& ticket, Status& st) {
  Result<bool> ended = resident_->finished(ticket);
  if (!ended.ok()) {
    st = ended.status();
    return true;
  }
  return ended.value();
}

void LocalCopier::complete_resident(ResidentGather::Ticket ticket, uint64_t size, Done finish) {
  if (size <= kCompleteInline) {
    // As complete_gpu: a small batch ends within microseconds.
    auto until = std::chrono::steady_clock::now() + kInlineWait;
    Status st;
    while (std::chrono::steady_clock::now() < until) {
      if (resident_ended(ticket, st)) {
        finish(st);
        return;
      }
    }
  }
  InFlight f;
  f.resident = ticket;
  f.done = std::move(finish);
  platform::MutexLock lock(mu_);
  inflight_.push_back(std::move(f));
  inflight_count_.store(inflight_.size(), std::memory_order_release);
}

LocalCopier::PieceTable* LocalCopier::take_table(int device) {
  for (PieceTable& t : tables_) {
    if (t.busy) continue;
    if (t.items == nullptr) {
      // Portable: any of this process's GPUs reads it.
      Result<void*> p = lanes_.kit().take_block(platform::PinnedKind::kPlain, kTableBytes, device);
      if (!p.ok()) return nullptr;
      t.items = static_cast<GatherPiece*>(p.value());
      t.device = device;
    }
    t.busy = true;
    return &t;
  }
  return nullptr;
}

void LocalCopier::sync_streams(const std::vector<platform::GpuLane>& used) {
  for (const platform::GpuLane& lane : used) {
    cu::Stream s = nullptr;
    {
      platform::MutexLock lock(mu_);
      s = lanes_.stream_if_made(lane);
    }
    if (s != nullptr) (void)platform::wait_stream(lane.first, lane.second, s);
  }
}

Status LocalCopier::complete_gpu(const std::vector<platform::GpuLane>& used, uint64_t size, Done finish) {
  if (size <= kCompleteInline) {
    // A small copy finishes within microseconds: waiting for it here costs
    // less than handing its completion to another thread, and asking the
    // stream saves recording an event.
    std::vector<platform::GpuCopyLanes::Mark> streams;  // each stream asked, no event
    {
      platform::MutexLock lock(mu_);
      for (const platform::GpuLane& lane : used) streams.push_back({lane, lanes_.stream_if_made(lane), nullptr});
    }
    auto until = std::chrono::steady_clock::now() + kInlineWait;
    Status st;
    bool ready = false;
    while (!ready && std::chrono::steady_clock::now() < until) {
      ready = true;
      for (const platform::GpuCopyLanes::Mark& m : streams) {
        Result<bool> idle = platform::GpuCopyLanes::reached(m);
        if (idle.ok() && !idle.value()) {
          ready = false;
        } else if (!idle.ok() && st.ok()) {
          st = idle.status();
        }
      }
    }
    if (ready) {
      finish(st);
      return Status();
    }
  }
  // Completion by an event on each stream used, polled by the progress worker.
  InFlight f;
  f.done = std::move(finish);
  Status recorded;
  {
    platform::MutexLock lock(mu_);
    for (const platform::GpuLane& lane : used) {
      Result<platform::GpuCopyLanes::Mark> m = lanes_.mark(lane);
      recorded = m.status();
      if (!recorded.ok()) break;
      f.marks.push_back(m.value());
    }
    if (recorded.ok()) {
      inflight_.push_back(std::move(f));
      inflight_count_.store(inflight_.size(), std::memory_order_release);
    } else {
      for (const platform::GpuCopyLanes::Mark& m : f.marks) lanes_.recycle(m);
    }
  }
  if (!recorded.ok()) {
    sync_streams(used);
    return recorded;
  }
  return Status();
}

}  // namespace ferry::local
