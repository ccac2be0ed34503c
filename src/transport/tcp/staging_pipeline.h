// Staging pipelines: how a path moves chunks whose memory cannot meet a
// socket directly (GPU memory) through its StagingRing.
//
// Transmit (TxStager): the path's worker stages the chunks it claims ahead of
// the socket — each chunk's device pieces are copied into a slot on the
// copier's stream — and sends the oldest once its copies are done, so
// device->host copies run while earlier chunks are on the wire. Sending may
// lend the slot's pages to the socket instead of copying them (the slot is
// then refilled only once the peer confirmed its chunk).
//
// Receive (RxStager): staged pieces are read from the socket into slots and
// copied on to the device as they arrive. Each frame is an entry in a FIFO
// with a completion (count the chunk as landed, confirm it, finish the
// transfer); completions run in arrival order and only once the frame's
// copies are done, so a chunk counts as landed only when its bytes are in
// device memory. Entries without copies (host memory, dropped frames) queue
// behind staged ones, which keeps the path's landed count in order.
//
// Host pieces of a chunk are never staged: they go between socket and memory
// directly, as on the host-only path.
//
// Threading: each stager belongs to one path worker thread.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/metrics.h"
#include "ferry/status.h"
#include "platform/page_lender.h"
#include "transport/tcp/staging_copier.h"
#include "transport/tcp/staging_ring.h"

namespace ferry::tcp {

// Contiguous bytes of a chunk in one region.
struct Piece {
  uint8_t* data = nullptr;
  size_t size = 0;
  int device = -1;      // GPU ordinal of device memory (-1: host)
  bool staged = false;  // goes through a slot (device memory, or host memory standing in for it in tests)
};

// Bytes of `pieces` that go through slots.
size_t staged_bytes(std::span<const Piece> pieces);

// The chunk size of a staged transfer of `total` bytes over `paths` paths
// with slots of `slot_bytes`: a slot, unless that would leave paths idle or
// with a single chunk. A path moves its chunks one after another (copy to
// the slot, send, copy out), so 1 MiB over four paths in one 1 MiB chunk took
// 650 us against 220 us for host memory in four chunks. Smaller chunks give
// every path two, down to kMinStagedChunk, in whole 4 KiB pages.
//
// `per_path` chunks a path instead of two: a batch of blocks takes one. Each
// of its chunks pays for its block table and a gather launch on either side,
// which a second chunk a path did not win back: on the two-H200 host over 16
// paths, 256 x 16 KiB GPU blocks took 0.95-0.96 of the time of one
// contiguous 4 MiB in one chunk a path, 0.83-0.84 in two (1,024 x 4 KiB:
// 0.88-0.90 against 0.77-0.80).
inline constexpr uint64_t kMinStagedChunk = 64 * 1024;
uint64_t staged_chunk_bytes(uint64_t total, int paths, uint64_t slot_bytes, int per_path = 2);

class TxStager {
 public:
  // A staged chunk: the bytes to send, in order (host pieces in place, staged
  // ones in the slot), and the fence of the copies into the slot.
  struct Staged {
    StagingRing::Slot* slot = nullptr;
    uint64_t ticket = 0;
    size_t in_slot = 0;  // staged bytes, at the slot's start
    int64_t queued_ns = 0;  // when its copies were queued (metrics)
    std::vector<struct iovec> iov;
  };

  // `lend`: send() lends the pages of a slot that its chunk fills to the
  // socket (page_lender.h), so that slot stays held until the peer confirms
  // the chunk (confirmed()); the ring then has 2 x depth slots. Without a
  // pipe for it (no file descriptor left) the stager copies instead.
  //
  // Only full slots are lent: a lent chunk asks the peer to confirm it, and
  // a transfer cut into chunks smaller than a slot (one short enough to give
  // each path a chunk or two) finishes behind those confirmations. On the
  // two-H200 host over 16 paths (one run of two rounds), lending every chunk
  // made 16 MiB (512 KiB chunks) 2-18 % slower, 4 MiB (128 KiB) 12-18 % and a
  // 1 MiB message 8-29 %; 64 MiB and up (1 MiB chunks: full slots) moved
  // -3 to +10 %, and 16 MiB over 8 paths (1 MiB chunks) +12 to +29 %. With
  // only full slots lent, 4 MiB and 1 MiB read as without lending; 16 MiB
  // over 16 paths, whose chunks are now copied, still read lower in one of
  // two runs (docs/benchmarks/2026-11-28.md).
  //
  // `metrics` (null: none) counts each chunk's copies once wait() saw them
  // done (core::TransferMetrics::staged).
  TxStager(std::unique_ptr<Copier> copier, size_t slot_bytes, int depth, bool lend = false,
           core::TransferMetrics* metrics = nullptr);
  // Waits for the copies it queued, then frees its slots.
  ~TxStager();

  // Queues the copies of `pieces`' staged bytes into the next slot and fills
  // `out`. Non-blocking. kInternal if they exceed a slot or every slot is
  // held (callers keep at most depth() chunks staged and unreleased).
  Status stage(std::span<const Piece> pieces, Staged& out);
  // Blocks until `s`'s copies are done; then its iov may be sent.
  Status wait(const Staged& s);
  // Blocks until every copy queued so far has ended (before the regions they
  // read are let go).
  void drain();
  // The chunk will not be sent (aborted, or its staging failed): its slot
  // may be reused.
  void release(Staged& s);
  // Sends `head` (a frame's header, copied; `head` and `s.iov` may be
  // modified) and then `s`'s bytes on `fd` (after wait(s)): the slot's lent
  // when lends(s), everything else copied. A lent slot is held until the peer
  // confirmed `seq` chunks of the path, whether or not the send succeeded
  // (the socket may hold its pages); otherwise it is released. Blocks.
  // Errors: kPeerLost.
  Status send(int fd, std::vector<struct iovec>& head, Staged& s, uint64_t seq);
  // The peer confirmed `landed` chunks of the path: slots lent to chunks up
  // to that one may be reused.
  void confirmed(uint64_t landed);
  // 0 if stage() has a slot now; else how many chunks the peer must confirm
  // before it has one (the oldest lent chunk's number).
  uint64_t slot_after() const;

  // Whether send() lends `s`'s slot (it fills the slot, and a lender is open).
  bool lends(const Staged& s) const {
    return lender_.has_value() && s.slot != nullptr && s.in_slot == ring_.slot_bytes();
  }
  int depth() const { return ring_.depth(); }
  const StagingRing& ring() const { return ring_; }

 private:
  std::unique_ptr<Copier> copier_;
  core::TransferMetrics* const metrics_;
  std::optional<platform::PageLender> lender_;
  StagingRing ring_;
  uint64_t last_ticket_ = 0;
  std::vector<Copier::Op> ops_;  // stage()'s copies, kept between calls
  // Slots whose pages a socket may still refer to, oldest first, with the
  // number of the chunk they carried.
  std::deque<std::pair<StagingRing::Slot*, uint64_t>> lent_;
};

class RxStager {
 public:
  // A frame's completion; an error fails the connection.
  using Done = std::function<Status()>;

  // `metrics` (null: none) counts each frame's copies once retired.
  RxStager(std::unique_ptr<Copier> copier, size_t slot_bytes, int depth, core::TransferMetrics* metrics = nullptr);
  // Waits for the copies in flight, drops completions that never ran (the
  // path or connection is gone) and frees the slots.
  ~RxStager();

  // Reads the bytes of `pieces` from `fd` in order, host pieces straight into
  // place, staged ones through slots (a piece larger than a slot takes several
  // turns) and on to their memory; queues `done` to run once those copies are
  // done. Blocks on `fd`, and on a slot's earlier copies when the ring is full.
  Status receive(int fd, std::span<const Piece> pieces, Done done);
  // Queues `done` behind the entries in flight, or runs it now if there are none.
  Status then(Done done);
  // Runs, in order, the completions of entries whose copies are done; with
  // `all`, first waits for every entry. Returns the first error.
  Status retire(bool all);
  // Call before blocking on `fd`: retires what is done and, while entries
  // remain and `fd` has nothing to read, waits for them all — a completion
  // (and the confirmation the peer's window waits for) never waits for the
  // peer's next frame.
  Status before_read(int fd);

  bool idle() const { return fifo_.empty(); }
  size_t entries() const { return fifo_.size(); }
  const StagingRing& ring() const { return ring_; }

 private:
  struct Entry {
    uint64_t ticket = 0;  // 0: no copies
    Done done;
    uint64_t staged = 0;    // bytes its copies move
    int64_t queued_ns = 0;  // when the first of them was queued
  };

  std::unique_ptr<Copier> copier_;
  core::TransferMetrics* const metrics_;
  StagingRing ring_;
  std::deque<Entry> fifo_;
  uint64_t last_ticket_ = 0;
  std::vector<Copier::Op> ops_;  // receive()'s copies of one slot, kept between calls
};

}  // namespace ferry::tcp
