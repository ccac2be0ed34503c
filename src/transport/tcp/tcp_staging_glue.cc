// TcpTransport's glue to the staging copies: which pieces of a transfer
// are GPU memory that cannot meet a socket directly, the copiers for the
// path workers and for the control stream's small payloads.
#include <algorithm>
#include <bit>
#include <cstring>

#include "transport/tcp/staging_kernel.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {

std::unique_ptr<Copier> TcpTransport::new_copier() const {
  // Path copiers move between GPU memory and the pinned slots only.
  return hooks_.make ? hooks_.make() : make_cuda_copier(kernels_, ctx_->gather_kernels);
}

std::unique_ptr<Copier> TcpTransport::new_control_copier() const {
  // A kernel writing to or reading from pageable memory faults where the GPU
  // cannot address it (CUDA_ERROR_ILLEGAL_ADDRESS, which ends the context):
  // a 4 KiB send between GPUs did so on the two-H200 host.
  return hooks_.make ? hooks_.make() : make_cuda_copier(nullptr);
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
  if (!stages(list)) return 0;
  int n = paths != 0 ? std::popcount(paths) : static_cast<int>(data_.size());
  return staged_chunk_bytes(list.total(), n, ctx_->options.staging_chunk_bytes);
}

Status TcpTransport::exchange(std::span<const Piece> pieces, uint8_t* buffer, bool to_buffer) {
  platform::MutexLock lock(control_copy_mu_);
  if (!control_copier_) control_copier_ = new_control_copier();
  Copier& copier = *control_copier_;
  if (!control_bounce_) {
    const size_t bytes = std::clamp<size_t>(ctx_->options.inline_max, 4096, kMaxControlBounce);
    control_bounce_ = std::make_unique<StagingRing>(copier, bytes, 1);
  }
  StagingRing& bounce = *control_bounce_;
  // GPU bytes go between `buffer` (pageable) and the device through the
  // pinned bounce: copies to or from pageable memory make the driver stage
  // them through its own buffers, synchronously, which cost a 4 KiB GPU send
  // more than its socket did. A payload larger than the bounce takes turns.
  StagingRing::Slot* slot = nullptr;
  size_t filled = 0;
  struct Out {
    uint8_t* to;
    size_t from;  // offset in the bounce
    size_t n;
  };
  std::vector<Out> outs;  // to_buffer: bytes to take from the bounce once its copies end
  auto turn = [&]() -> Status {
    if (slot == nullptr) return Status();
    auto t = copier.fence();
    Status s = t.ok() ? copier.wait(t.value()) : t.status();
    if (!t.ok()) (void)copier.sync();  // the copies use the caller's region and the bounce
    if (s.ok()) {
      for (const Out& o : outs) std::memcpy(o.to, slot->data + o.from, o.n);
    }
    outs.clear();
    filled = 0;
    bounce.release(slot);
    slot = nullptr;
    return s;
  };
  for (const Piece& p : pieces) {
    uint8_t* mine = buffer;
    buffer += p.size;
    if (!p.staged) {
      std::memcpy(to_buffer ? mine : p.data, to_buffer ? p.data : mine, p.size);
      continue;
    }
    for (size_t off = 0; off < p.size;) {
      if (slot == nullptr) {
        auto acquired = bounce.acquire(p.device);
        if (!acquired.ok()) return acquired.status();
        slot = acquired.value();
      }
      const size_t n = std::min(bounce.slot_bytes() - filled, p.size - off);
      uint8_t* b = slot->data + filled;
      Status s;
      if (to_buffer) {
        s = copier.copy(p.device, b, p.data + off, n);
        outs.push_back({mine + off, filled, n});
      } else {
        std::memcpy(b, mine + off, n);
        s = copier.copy(p.device, p.data + off, b, n);
      }
      if (!s.ok()) {
        // The copies queued before this one use the caller's region and the bounce.
        copier.wait_all();
        bounce.release(slot);
        return s;
      }
      filled += n;
      off += n;
      if (filled == bounce.slot_bytes()) FERRY_RETURN_IF_ERROR(turn());
    }
  }
  return turn();
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
