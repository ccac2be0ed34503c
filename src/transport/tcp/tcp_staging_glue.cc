// TcpTransport's glue to the staging copies: which pieces of a transfer
// are GPU memory that cannot meet a socket directly, the copiers for the
// path workers and for the control stream's small payloads.
#include <algorithm>
#include <bit>
#include <cstring>

#include "gpu/gather_kernel.h"
#include "gpu/staging_kernel.h"
#include "platform/log.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {

std::unique_ptr<Copier> TcpTransport::new_copier() const {
  // Path copiers move between GPU memory and the pinned slots only.
  return hooks_.make ? hooks_.make() : make_cuda_copier(ctx_->staging_kernels, ctx_->gather_kernels, gpu_kit_);
}

std::unique_ptr<Copier> TcpTransport::new_control_copier() const {
  // A kernel writing to or reading from pageable memory faults where the GPU
  // cannot address it (CUDA_ERROR_ILLEGAL_ADDRESS, which ends the context):
  // a 4 KiB send between GPUs did so on the two-H200 host.
  return hooks_.make ? hooks_.make() : make_cuda_copier(nullptr, nullptr, gpu_kit_);
}

Status TcpTransport::before_stream_wait() {
  if (!gpu_kit_ || hooks_.make) return Status();
  return gpu_kit_->fill(gpu_kit_size());
}

platform::GpuKitSize TcpTransport::gpu_kit_size() const {
  const Options& o = ctx_->options;
  const int paths = static_cast<int>(data_.size());
  const int depth = std::max(o.staging_depth, 1);
  platform::GpuKitSize size;
  // A copier a path and direction, and the control stream's.
  size.streams = 2 * paths + 1;
  // A copier's fences in flight: one a slot, and one being recorded.
  size.events = size.streams * (2 * depth + 1);
  const size_t slot = o.staging_chunk_bytes;
  size.blocks[{platform::PinnedKind::kPlain, slot}] = paths * depth;  // receive rings
  // Send rings: twice as deep when their pages are lent to the socket.
  if (o.staging_lend_pages) {
    size.blocks[{platform::PinnedKind::kLendable, slot}] = paths * 2 * depth;
  } else {
    size.blocks[{platform::PinnedKind::kPlain, slot}] += paths * depth;
  }
  // The control stream's bounce for small GPU payloads.
  size.blocks[{platform::PinnedKind::kPlain, control_bounce_bytes()}] += 1;
  // The gather kernel's lists (cuda_copier.cc): four a path copier.
  size.blocks[{platform::PinnedKind::kPlain, platform::kGatherTableBytes}] += 2 * paths * 4;
  return size;
}

void TcpTransport::pieces_of(const core::SegmentList& list, uint64_t offset, uint64_t size,
                              std::vector<Piece>& out) const {
  std::vector<core::SpanPiece> spans;
  list.pieces(offset, size, spans);
  for (const core::SpanPiece& p : spans) {
    out.push_back(Piece{p.data, p.size, p.device, p.kind == MemoryKind::kCuda || hooks_.stage_host});
  }
}

bool TcpTransport::stages(const core::SegmentList& list) const {
  return !list.empty() && (hooks_.stage_host || list.has_gpu());
}

uint64_t TcpTransport::chunk_for(const core::SegmentList& list, uint64_t paths) const {
  return chunk_for(stages(list), list.total(), paths);
}

uint64_t TcpTransport::chunk_for(bool staged, uint64_t bytes, uint64_t paths, int per_path) const {
  if (!staged) return 0;
  int n = paths != 0 ? std::popcount(paths) : static_cast<int>(data_.size());
  return staged_chunk_bytes(bytes, n, ctx_->options.staging_chunk_bytes, per_path);
}

namespace {

// Walks `pieces`, laid out one after another in `buffer`: a host piece moves
// between its place and `buffer` by memcpy, and `staged(piece, mine)` runs
// for each staged one (`mine`: its place in `buffer`) until one fails.
template <class Staged>
Status each_piece(std::span<const Piece> pieces, uint8_t* buffer, bool to_buffer, Staged staged) {
  for (const Piece& p : pieces) {
    uint8_t* mine = buffer;
    buffer += p.size;
    if (!p.staged) {
      std::memcpy(to_buffer ? mine : p.data, to_buffer ? p.data : mine, p.size);
      continue;
    }
    FERRY_RETURN_IF_ERROR(staged(p, mine));
  }
  return Status();
}

// Copies every staged piece straight to or from `buffer` (pageable memory:
// the driver stages such copies itself, synchronously), then waits.
Status copy_direct(Copier& copier, std::span<const Piece> pieces, uint8_t* buffer, bool to_buffer) {
  bool copied = false;
  FERRY_RETURN_IF_ERROR(each_piece(pieces, buffer, to_buffer, [&](const Piece& p, uint8_t* mine) {
    Status s = copier.copy(p.device, to_buffer ? mine : p.data, to_buffer ? p.data : mine, p.size);
    if (!s.ok()) {
      // The pieces queued before this one use the caller's region and buffer.
      if (copied) copier.wait_all();
      return s;
    }
    copied = true;
    return Status();
  }));
  if (!copied) return Status();
  auto t = copier.fence();
  if (!t.ok()) {
    (void)copier.sync();  // the copies use the caller's region and buffer
    return t.status();
  }
  return copier.wait(t.value());
}

// The same through the pinned `slot` of `slot_bytes`, held for the whole
// exchange: copies between pinned memory and the GPU are queued at once, and
// a payload larger than the slot takes turns.
Status copy_bounced(Copier& copier, uint8_t* slot, size_t slot_bytes, std::span<const Piece> pieces, uint8_t* buffer,
                    bool to_buffer) {
  size_t filled = 0;
  struct Out {
    uint8_t* to;
    size_t from;  // offset in the slot
    size_t n;
  };
  std::vector<Out> outs;  // to_buffer: bytes to take from the slot once its copies end
  // Waits for the copies queued this turn, then empties the slot.
  auto turn = [&]() -> Status {
    if (filled == 0) return Status();
    auto t = copier.fence();
    Status s = t.ok() ? copier.wait(t.value()) : t.status();
    if (!t.ok()) (void)copier.sync();  // the copies use the caller's region and the slot
    if (s.ok()) {
      for (const Out& o : outs) std::memcpy(o.to, slot + o.from, o.n);
    }
    outs.clear();
    filled = 0;
    return s;
  };
  FERRY_RETURN_IF_ERROR(each_piece(pieces, buffer, to_buffer, [&](const Piece& p, uint8_t* mine) -> Status {
    for (size_t off = 0; off < p.size;) {
      const size_t n = std::min(slot_bytes - filled, p.size - off);
      uint8_t* b = slot + filled;
      Status s;
      if (to_buffer) {
        s = copier.copy(p.device, b, p.data + off, n);
        outs.push_back({mine + off, filled, n});
      } else {
        std::memcpy(b, mine + off, n);
        s = copier.copy(p.device, p.data + off, b, n);
      }
      if (!s.ok()) {
        // The copies queued before this one use the caller's region and the slot.
        copier.wait_all();
        return s;
      }
      filled += n;
      off += n;
      if (filled == slot_bytes) FERRY_RETURN_IF_ERROR(turn());
    }
    return Status();
  }));
  return turn();
}

}  // namespace

Status TcpTransport::exchange(std::span<const Piece> pieces, uint8_t* buffer, bool to_buffer) {
  platform::MutexLock lock(control_copy_mu_);
  if (!control_copier_) control_copier_ = new_control_copier();
  Copier& copier = *control_copier_;
  auto staged = std::find_if(pieces.begin(), pieces.end(), [](const Piece& p) { return p.staged; });
  if (staged == pieces.end()) return copy_direct(copier, pieces, buffer, to_buffer);
  // GPU bytes go between `buffer` (pageable) and the device through a pinned
  // bounce: copies to or from pageable memory make the driver stage them
  // through its own buffers, synchronously, which cost a 4 KiB GPU send more
  // than its socket did. Without pinned memory to be had they still go, the
  // slow way.
  if (!control_bounce_) {
    control_bounce_ = std::make_unique<StagingRing>(copier, control_bounce_bytes(), 1);
  }
  auto slot = control_bounce_->acquire(staged->device);
  if (!slot.ok()) {
    if (!bounce_refused_) {
      FERRY_ENGINE_LOG(kWarn, "tcp", ctx_->engine_id,
                       "%s: no pinned bounce for small GPU payloads (%s); copying them unpinned", where().c_str(),
                       slot.status().to_string().c_str());
    }
    bounce_refused_ = true;
    return copy_direct(copier, pieces, buffer, to_buffer);
  }
  Status s = copy_bounced(copier, slot.value()->data, control_bounce_->slot_bytes(), pieces, buffer, to_buffer);
  control_bounce_->release(slot.value());  // every copy through it has ended
  return s;
}

Status TcpTransport::copy_in(const core::SegmentList& dest, const uint8_t* src, uint64_t size) {
  std::vector<Piece> pieces;
  pieces_of(dest, 0, size, pieces);
  if (staged_bytes(pieces) == 0) {
    dest.copy_in(0, src, size);
    return Status();
  }
  return exchange(pieces, const_cast<uint8_t*>(src), /*to_buffer=*/false);
}

}  // namespace ferry::tcp
