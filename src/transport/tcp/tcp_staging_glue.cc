// TcpTransport's glue to the staging copies: which pieces of a transfer
// are GPU memory that cannot meet a socket directly, the copiers for the
// path workers and for the control stream's small payloads.
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
  bool copied = false;
  for (const Piece& p : pieces) {
    uint8_t* mine = buffer;
    buffer += p.size;
    if (!p.staged) {
      std::memcpy(to_buffer ? mine : p.data, to_buffer ? p.data : mine, p.size);
      continue;
    }
    Status s = control_copier_->copy(p.device, to_buffer ? mine : p.data, to_buffer ? p.data : mine, p.size);
    if (!s.ok()) {
      // The pieces queued before this one use the caller's region and buffer.
      if (copied) control_copier_->wait_all();
      return s;
    }
    copied = true;
  }
  if (!copied) return Status();
  auto t = control_copier_->fence();
  if (!t.ok()) {
    (void)control_copier_->sync();  // the copies use the caller's region and buffer
    return t.status();
  }
  return control_copier_->wait(t.value());
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
