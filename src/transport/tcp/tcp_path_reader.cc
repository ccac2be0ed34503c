// TcpTransport's path readers: each data stream's receive loop (a fiber on
// an rx worker of its NIC, io_pool.h) reads frames for the landing
// (tcp_landing.cc); a chunk's bytes are received straight into registered
// memory or through the path's staging, and counted landed in order with
// the path's GPU copies still running.
#include "transport/tcp/tcp_internals.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {

using namespace internal;
using wire::FrameType;

void TcpTransport::path_rx_loop(int path) {
  int fd = data_[static_cast<size_t>(path)].fd();
  std::unique_ptr<RxStager>& stager = rx_stage_[static_cast<size_t>(path)];
  std::string aux;
  Status s;
  for (;;) {
    if (s = await_reply_room(); !s.ok()) {
      core_.fail(s);
      break;
    }
    if (stager) {
      s = stager->before_read(fd);
      if (!s.ok()) {
        core_.fail(s.with_context(where() + ": data stream " + std::to_string(path)));
        break;
      }
    }
    wire::HeaderBytes hb;
    platform::StreamEnd end;
    // The first byte alone, then the rest: from the first byte on, the
    // frame must arrive whole within peer_timeout (tick), whatever the
    // heartbeats on the control stream say.
    s = platform::recv_exact(fd, hb.data(), 1, &end);
    if (!s.ok()) {
      // Between frames, a peer closing in order (FIN) is closing or exiting.
      path_failed(path, s, end == platform::StreamEnd::kClosedInOrder);
      break;
    }
    frame_since_ns_[static_cast<size_t>(path)].store(now_ns(), std::memory_order_relaxed);
    s = platform::recv_exact(fd, hb.data() + 1, hb.size() - 1);
    if (!s.ok()) {
      path_failed(path, s);
      break;
    }
    last_rx_ns_.store(now_ns(), std::memory_order_relaxed);
    auto h = wire::decode_header(hb.data(), hb.size());
    if (!h.ok()) {
      core_.fail(h.status().with_context(where() + ": data stream " + std::to_string(path)));
      break;
    }
    aux.resize(h->aux_len);
    if (h->aux_len > 0) s = platform::recv_exact(fd, aux.data(), aux.size());
    // Counted before the payload lands: a write's last frame may answer the
    // writer from inside land_frame, and its bytes are counted by then.
    if (s.ok() && !path_meters_.empty() && (h->type == FrameType::kData || h->type == FrameType::kWrite)) {
      path_meters_[static_cast<size_t>(path)]->received.fetch_add(h->payload_len, std::memory_order_relaxed);
    }
    if (s.ok()) s = land_frame(fd, path, *h, aux);
    frame_since_ns_[static_cast<size_t>(path)].store(0, std::memory_order_relaxed);
    if (s.ok() && h->type == FrameType::kData) last_progress_ns_.store(now_ns(), std::memory_order_relaxed);
    if (s.ok()) {
      bool ack_request = (h->flags & wire::kFlagAckRequest) != 0;  // DATA or WRITE: its decoder checked the flags
      // Counted in order with the frames whose copies are still running.
      s = copies_pending(path)
              ? after_earlier(path, [this, path, ack_request] { return count_landed(path, ack_request); })
              : count_landed(path, ack_request);
    }
    if (!s.ok()) {
      if (s.code() == Code::kDataLoss) {
        core_.fail(s);
      } else {
        path_failed(path, s);
      }
      break;
    }
  }
  // Frames whose bytes fully arrived still count while the connection lives
  // (a path can die alone); then the slots go.
  if (stager && !core_.failed()) (void)stager->retire(/*all=*/true);
  stager.reset();
}

Status TcpTransport::drain(int fd, uint64_t n) {
  char scratch[16384];
  while (n > 0) {
    size_t k = n < sizeof(scratch) ? static_cast<size_t>(n) : sizeof(scratch);
    FERRY_RETURN_IF_ERROR(platform::recv_exact(fd, scratch, k));
    n -= k;
  }
  return Status();
}

Result<TcpTransport::Direct> TcpTransport::receive_direct(int fd, int path, const core::SegmentList& dest,
                                                          uint64_t offset, uint64_t size) {
  // GPU memory in the list (a chunk of it may still be all host memory,
  // which receive_staged reads in place as well).
  if (stages(dest)) return Direct::kStaged;
  RxScratch& scratch = rx_scratch(path);
  scratch.pieces.clear();
  // Holds the regions open until the bytes are in place.
  core::ChunkAccess access(dest, offset, size);
  if (!access.ok()) {
    FERRY_RETURN_IF_ERROR(drain(fd, size));
    return Direct::kGone;
  }
  pieces_of(dest, offset, size, scratch.pieces);
  scratch.iov.clear();
  for (const Piece& p : scratch.pieces) scratch.iov.push_back({p.data, p.size});
  FERRY_RETURN_IF_ERROR(platform::recv_all(fd, scratch.iov.data(), static_cast<int>(scratch.iov.size())));
  return Direct::kInPlace;
}

Status TcpTransport::receive_staged(int fd, int path, core::SegmentList dest, uint64_t offset, uint64_t size,
                                    Landed landed, const std::function<std::string()>& gone) {
  // Holds the regions open until the bytes are in place (until the copy to
  // the device finished), and the list that names them.
  struct Held {
    core::SegmentList list;
    std::optional<core::ChunkAccess> access;
  };
  auto held = std::make_shared<Held>();
  held->list = std::move(dest);
  held->access.emplace(held->list, offset, size);
  if (!held->access->ok()) {
    held.reset();
    FERRY_RETURN_IF_ERROR(drain(fd, size));
    Status why(Code::kNotFound, gone());
    return after_earlier(path, [landed = std::move(landed), why]() { return landed(why); });
  }
  std::vector<Piece> pieces;
  pieces_of(held->list, offset, size, pieces);
  if (path < 0) {
    // The control stream carries small payloads only: land them synchronously.
    std::string bytes(size, '\0');
    FERRY_RETURN_IF_ERROR(platform::recv_exact(fd, bytes.data(), bytes.size()));
    Status s = exchange(pieces, reinterpret_cast<uint8_t*>(bytes.data()), /*to_buffer=*/false);
    held.reset();
    return landed(s);
  }
  std::unique_ptr<RxStager>& stager = rx_stage_[static_cast<size_t>(path)];
  if (!stager) {
    stager = std::make_unique<RxStager>(new_copier(), ctx_->options.staging_chunk_bytes, ctx_->options.staging_depth,
                                        ctx_->metrics.get());
  }
  return stager->receive(fd, pieces, [held, landed = std::move(landed)]() mutable {
    held.reset();  // the bytes are in place: the regions may go
    return landed(Status());
  });
}

bool TcpTransport::copies_pending(int path) const {
  if (path < 0) return false;
  const std::unique_ptr<RxStager>& stager = rx_stage_[static_cast<size_t>(path)];
  return stager && !stager->idle();
}

Status TcpTransport::after_earlier(int path, std::function<Status()> fn) {
  if (copies_pending(path)) return rx_stage_[static_cast<size_t>(path)]->then(std::move(fn));
  return fn();
}

Status TcpTransport::count_landed(int path, bool ack_request) {
  uint64_t landed = ++landed_chunks_[static_cast<size_t>(path)];
  if (ack_request) {
    Outgoing o;
    o.header = wire::encode(wire::ChunkAck{static_cast<uint32_t>(path), landed});
    queue_control(std::move(o));
  }
  return Status();
}

}  // namespace ferry::tcp
