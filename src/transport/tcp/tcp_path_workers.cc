// TcpTransport's path writers: each data stream's transmit loop (a fiber on
// a tx worker of its NIC, io_pool.h) claims chunks and sends them (staging
// GPU memory ahead of the socket); and the choice of paths (NICs) for a
// transfer.
#include <optional>

#include "platform/log.h"
#include "platform/memory_node.h"
#include "platform/page_lender.h"
#include "platform/thread.h"
#include "transport/tcp/path_choice.h"
#include "transport/tcp/tcp_internals.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {

using namespace internal;
using wire::FrameHeader;
using wire::FrameType;

uint64_t TcpTransport::paths_for(const core::SegmentList& source) const {
  if (source.empty() || ctx_->options.nic_policy != NicPolicy::kNearest) return 0;
  const Region& region = source.spans().front().region->region;
  if (region.kind != MemoryKind::kCuda) {
    return choose_paths(path_nodes_, chunks_.alive(), platform::memory_node(source.spans().front().data), true);
  }
  // GPU memory: the NICs behind the GPU's own PCI switch first, then its NUMA node.
  const platform::Topology& topo = ctx_->topology;
  std::string pci = platform::gpu_pci_address(region.device);
  const platform::GpuInfo* gpu = nullptr;
  for (const auto& g : topo.gpus) {
    if (g.pci_address == pci) gpu = &g;
  }
  if (gpu == nullptr) return 0;
  std::vector<int> distance;
  for (const PathInfo& p : paths_) {
    const platform::NicInfo* nic = topo.find_nic(p.nic);
    distance.push_back(nic == nullptr ? -1 : pci_distance(gpu->pci_path, nic->pci_path));
  }
  uint64_t mask = closest_paths(distance, chunks_.alive());
  return mask != 0 ? mask : choose_paths(path_nodes_, chunks_.alive(), gpu->numa_node, true);
}

void TcpTransport::path_tx_loop(int path) {
  // Staged chunks may go out as pages lent to the socket: a splice into a
  // socket the peer reset raises SIGPIPE in the thread that runs it. The
  // fiber's signal mask is its own (saved and restored with its context).
  platform::block_sigpipe_in_this_thread();
  int fd = data_[static_cast<size_t>(path)].fd();
  const size_t depth = static_cast<size_t>(ctx_->options.staging_depth);
  std::unique_ptr<TxStager> stager;  // made on the first chunk of GPU memory
  std::deque<TxEntry> pipe;          // claimed, not yet sent, in claim order
  auto take = [&](Chunk c) {
    pipe.emplace_back();
    pipe.back().chunk = std::move(c);
    prepare_chunk(pipe.back(), stager);
  };
  for (;;) {
    if (pipe.empty()) {
      // Every held slot was lent to a chunk sent with a confirmation asked
      // for: the oldest comes free once the peer confirms it.
      if (stager && !slot_free(path, *stager, true)) break;  // stopped, or the path failed
      std::optional<Chunk> c = chunks_.claim(path);
      if (!c) break;  // stopped, or the path failed
      take(std::move(*c));
    }
    // Host chunks go out one at a time as they are claimed. A staged chunk
    // goes once its copies are done; only then does the worker claim ahead
    // (without blocking), so that up to depth - 1 copies run while it is on
    // the wire. Claiming ahead earlier would put this path's second copy
    // beside every path's first one, and the device shares its copy
    // bandwidth among all of them: each first chunk would be ready later.
    await_staging(pipe.front(), stager.get());
    while (pipe.back().staging && pipe.size() < depth && slot_free(path, *stager, false)) {
      std::optional<Chunk> c = chunks_.try_claim(path);
      if (!c) break;
      take(std::move(*c));
    }
    Status s = transmit_chunk(fd, pipe.front(), stager.get());
    // A chunk that went out is progress: the peer owes a write's answer only
    // once it has the bytes, and a slow sender is not a stalled peer.
    if (s.ok()) last_progress_ns_.store(now_ns(), std::memory_order_relaxed);
    if (s.ok() && !path_meters_.empty()) {
      path_meters_[static_cast<size_t>(path)]->sent.fetch_add(pipe.front().chunk.size, std::memory_order_relaxed);
    }
    if (s.ok() && pipe.front().chunk.resent && ctx_->metrics)
      ctx_->metrics->chunk_resent("tcp", pipe.front().chunk.size);
    if (ChunkQueue::release(pipe.front().chunk)) finish_acknowledged(*pipe.front().chunk.op);
    pipe.pop_front();
    if (!s.ok()) {
      path_failed(path, s);
      break;
    }
  }
  // Unsent chunks stay with the queue (moved to other paths when this one
  // failed). Their copies end first: each entry holds its source region
  // open (dereg waits for it), and the copies read that region and write
  // the slots.
  if (stager) stager->drain();
  for (TxEntry& e : pipe) {
    e.access.reset();
    if (ChunkQueue::release(e.chunk)) finish_acknowledged(*e.chunk.op);
  }
  pipe.clear();
  stager.reset();
}

void TcpTransport::prepare_chunk(TxEntry& e, std::unique_ptr<TxStager>& stager) {
  const Chunk& c = e.chunk;
  if (chunks_.aborted(*c.op)) {
    e.abort = Status(Code::kCancelled, "transfer aborted (" + where() + ")");
    return;
  }
  // A batch over pools: this chunk's local bytes are worked out here, on its path.
  const BlockTable* own = c.op->pool_blocks();
  if (own != nullptr) own->sources(c.offset, c.size, e.source);
  const core::SegmentList& source = own != nullptr ? e.source : c.op->source;
  const uint64_t offset = own != nullptr ? 0 : c.offset;
  e.access = std::make_shared<core::ChunkAccess>(source, offset, c.size);
  if (!e.access->ok()) {
    e.access.reset();
    e.abort = Status(Code::kNotFound, "source memory was deregistered during the transfer (" + where() + ")");
    return;
  }
  if (!stages(source)) return;
  std::vector<Piece> pieces;
  pieces_of(source, offset, c.size, pieces);
  if (staged_bytes(pieces) == 0) return;
  if (!stager) {
    stager = std::make_unique<TxStager>(new_copier(), ctx_->options.staging_chunk_bytes, ctx_->options.staging_depth,
                                        ctx_->options.staging_lend_pages, ctx_->metrics.get());
  }
  Status s = stager->stage(pieces, e.staged);
  if (!s.ok()) {
    e.access.reset();
    e.abort = s.with_context("staging GPU memory for " + where());
    return;
  }
  e.staging = true;
}

bool TcpTransport::slot_free(int path, TxStager& stager, bool wait) {
  stager.confirmed(chunks_.landed(path));
  uint64_t after = stager.slot_after();
  if (after == 0) return true;
  if (!wait || !chunks_.await_landed(path, after)) return false;
  stager.confirmed(after);
  return true;
}

void TcpTransport::await_staging(TxEntry& e, TxStager* stager) {
  if (!e.staging || !e.abort.ok()) return;
  Status s = stager->wait(e.staged);
  if (!s.ok()) e.abort = s.with_context("staging GPU memory for " + where());
}

Status TcpTransport::transmit_chunk(int fd, TxEntry& e, TxStager* stager) {
  const Chunk& c = e.chunk;
  OutOp& op = *c.op;
  // A chunk on lent pages holds its slot until the peer confirms it.
  const bool lends = e.staging && e.abort.ok() && stager->lends(e.staged);
  const bool ack_request = c.ack_request || lends;
  std::optional<wire::DataChunk> data;
  std::optional<wire::WriteChunk> write;
  if (op.is_write()) {
    write = op.write();
    write->offset = op.remote_base + c.offset;
    write->size = static_cast<uint32_t>(c.size);
    write->ack_request = ack_request;
    if (c.offset == 0) write->note = op.first_aux;
  } else {
    data = op.data();
    data->offset = c.offset;
    data->size = static_cast<uint32_t>(c.size);
    data->ack_request = ack_request;
  }
  e.table.clear();
  if (e.abort.ok() && chunks_.aborted(op)) {
    // An earlier chunk of this op was aborted after this one was claimed.
    e.abort = Status(Code::kCancelled, "transfer aborted (" + where() + ")");
  }
  if (op.blocks && e.abort.ok()) {
    // c is the chunk's place in the batch's stream; the table says where it lands.
    write->block_entries = static_cast<uint32_t>(op.blocks->encode(c.offset, c.size, e.table));
    write->size = static_cast<uint32_t>(e.table.size() + c.size);
  }
  wire::HeaderBytes hb;
  std::vector<struct iovec> iov;
  if (!e.abort.ok()) {
    // The chunk still travels, empty and marked aborted, so the peer stops
    // waiting and the window stays honest.
    if (e.staging) stager->release(e.staged);
    e.access.reset();
    bool first = chunks_.abort(c.op);
    const uint32_t code = static_cast<uint32_t>(e.abort.code());
    // A write's aborted chunk carries its notification: the peer, once none
    // of the write's chunks is landing any more, tells its application the
    // write's tag as not delivered (this side sends no skip for it).
    std::string_view note;
    if (write) {
      note = write->note_seq != 0 ? std::string_view(op.first_aux) : std::string_view();
      write->size = 0;
      write->aborted = true;
      write->code = code;
      write->note = note;
      encode_header(wire::encode(*write), hb);
    } else {
      data->size = 0;
      data->aborted = true;
      data->code = code;
      encode_header(wire::encode(*data), hb);
    }
    iov.push_back({hb.data(), hb.size()});
    if (!note.empty()) iov.push_back({const_cast<char*>(note.data()), note.size()});
    if (op.state && first && write) {
      // The peer answers an aborted write once none of its chunks lands any
      // more; the write ends then, with this reason.
      platform::MutexLock lock(send_mu_);
      if (op.abort_reason.ok()) op.abort_reason = e.abort;
      if (!note.empty() && !ChunkQueue::acknowledged(op)) peer_tells_note_.insert(write->note_seq);
    } else if (op.state && first) {
      bool was_pending;
      {
        platform::MutexLock lock(send_mu_);
        uint64_t id = op.state->id();
        was_pending = pending_.erase(id) > 0;
        sending_.erase(id);
      }
      // One item of a vector operation: the others still move their bytes,
      // and the operation ends when they have. An item the peer already
      // acknowledged (a resent chunk aborting late) was counted then.
      if (was_pending) op.state->finish_part(e.abort);
    }
    return platform::send_all(fd, iov.data(), static_cast<int>(iov.size()));
  }
  std::string_view aux = write ? write->note : std::string_view();
  encode_header(write ? wire::encode(*write) : wire::encode(*data), hb);
  iov.push_back({hb.data(), hb.size()});
  if (!aux.empty()) iov.push_back({const_cast<char*>(aux.data()), aux.size()});
  if (!e.table.empty()) iov.push_back({e.table.data(), e.table.size()});
  Status s;
  if (e.staging) {
    s = stager->send(fd, iov, e.staged, c.seq);
  } else {
    if (op.pool_blocks() != nullptr) {
      e.source.slice(0, c.size, iov);  // prepare_chunk worked it out
    } else {
      op.source.slice(c.offset, c.size, iov);
    }
    s = platform::send_all(fd, iov.data(), static_cast<int>(iov.size()));
  }
  e.access.reset();
  return s;
}

}  // namespace ferry::tcp
