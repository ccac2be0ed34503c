// ChunkQueue: the scheduler of one TCP connection. Bulk operations wait here;
// each path's transmit worker claims the next chunk when its window has room.
//
// Pull scheduling spreads a transfer over the paths in proportion to how fast
// each drains, with no explicit weights. A path's window counts chunks it has
// sent that the peer has not yet confirmed landing (kChunkAck); the sender
// asks for a confirmation every max(1, window/8) chunks, so the window can
// never fill up with nothing left to confirm it.
//
// Which paths take new chunks is the PathGovernor's call: it adds paths
// while they add throughput (see path_governor.h). Its CPU readings (of
// /proc/stat) are taken outside the queue's lock.
//
// Failover: each path remembers the chunks it sent and the peer has not yet
// confirmed. When a path dies, those chunks go first in line for the paths
// still alive (the receiver lands each chunk once and shuts a path that was
// still bringing a resent chunk: chunk_arrivals.h), so a transfer survives
// losing any data path but the last.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/segments.h"
#include "core/transfer_state.h"
#include "ferry/status.h"
#include "platform/fiber_worker.h"
#include "platform/mutex.h"
#include "transport/tcp/block_table.h"
#include "transport/tcp/path_governor.h"
#include "wire/messages.h"

namespace ferry::tcp {

// A bulk operation on its way out: DATA to a token at the peer (a send after
// CTS, a read's reply) or WRITE into a peer's export.
struct OutOp {
  // What every chunk of it says (its offset, size and flags set per chunk):
  // DATA to a token, or a WRITE's op, place and notification number.
  std::variant<wire::DataChunk, wire::WriteChunk> frame;
  core::SegmentList source;  // local bytes, in order
  uint64_t remote_base = 0;  // WRITE: export offset of byte 0 (chunk c = base + offset)
  std::string first_aux;     // WRITE: the notification, carried by the first chunk
  // WRITE of many blocks: where each stream byte goes (else null); when it
  // is over pools, it also knows where each comes from, and `source` is empty.
  std::shared_ptr<const BlockTable> blocks;
  std::shared_ptr<TransferState> state;  // null for read replies
  uint64_t paths = 0;                    // bit p: path p may carry it; 0: any path
  uint64_t chunk_bytes = 0;              // chunk size of this op (GPU memory: the staging slot); 0: the queue's
  std::shared_ptr<void> hold;            // read replies: what it holds of its connection's budget, until it goes
  // Claim cursor and abort flag: guarded by the lock of the queue it is in.
  uint64_t next = 0;
  bool aborted = false;
  // Chunks of it that paths claimed and are not done with (they may still
  // read `source`), plus kAcked once the peer's ACK came: the operation
  // completes when both hold (ChunkQueue::acknowledge and release).
  std::atomic<uint64_t> on_paths{0};
  Status answer;  // the peer's ACK; written before kAcked is set
  // Why this side aborted it (a cancel, its memory gone), which the
  // operation ends with whatever the peer answers. Guarded by the owning
  // transport's send lock (TcpTransport::send_mu_).
  Status abort_reason;
  static constexpr uint64_t kAcked = uint64_t{1} << 63;

  bool is_write() const { return std::holds_alternative<wire::WriteChunk>(frame); }
  const wire::DataChunk& data() const { return std::get<wire::DataChunk>(frame); }
  const wire::WriteChunk& write() const { return std::get<wire::WriteChunk>(frame); }
  // A write's notification number (0: none, or not a write).
  uint64_t note_seq() const { return is_write() ? write().note_seq : 0; }
  // The block table when it also knows the local bytes (over pools), else null.
  const BlockTable* pool_blocks() const { return blocks != nullptr && blocks->over_pools() ? blocks.get() : nullptr; }
  uint64_t total() const { return pool_blocks() != nullptr ? blocks->total() : source.total(); }
};

struct Chunk {
  std::shared_ptr<OutOp> op;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t seq = 0;          // its number on the claiming path (1, 2, ...): landed once the peer confirms as many
  bool ack_request = false;  // ask the peer to confirm landing after this chunk
  bool counted = false;      // counts in op->on_paths until its path releases it
  bool resent = false;       // a dead path had sent it unconfirmed: this is its second trip
};

class ChunkQueue {
 public:
  // `adaptive`: the governor chooses how many paths carry new chunks,
  // starting on `governor_start`; otherwise every live path does.
  ChunkQueue(uint64_t chunk_bytes, int window, int paths, bool adaptive = false, int governor_start = 1);
  // With a governor in a given state (tests).
  ChunkQueue(uint64_t chunk_bytes, int window, int paths, PathGovernor governor);

  // Queues `op` behind the ones already waiting (FIFO: the oldest transfer
  // finishes first). Returns false once stopped.
  bool push(std::shared_ptr<OutOp> op);

  // Blocks until `path` may send a chunk, then returns it; nullopt once
  // stopped or once `path` failed.
  std::optional<Chunk> claim(int path);
  // Non-blocking claim (for tests and polling); nullopt if nothing may go now.
  std::optional<Chunk> try_claim(int path);

  // The peer confirmed `landed` chunks from `path` in all.
  void on_landed(int path, uint64_t landed);
  // Chunks of `path` the peer confirmed so far.
  uint64_t landed(int path) const;
  // Blocks until the peer confirmed `count` chunks of `path` (a sender
  // holding memory its socket still refers to); false once stopped or once
  // `path` failed.
  bool await_landed(int path, uint64_t count);

  // Marks `op` aborted: no further chunk of it is handed out. True for the
  // call that marked it (the op's failure is reported once).
  bool abort(const std::shared_ptr<OutOp>& op);
  // Whether `op` was aborted (chunks claimed before that must not carry data).
  bool aborted(const OutOp& op) const;
  // Aborts `op` for its sender's application (a cancelled write):
  //   kNothingSent   no chunk of it was handed out; it is off the queue;
  //   kAbortGoes     an empty chunk marked aborted goes first on the next
  //                  path free (the peer may hold every chunk already);
  //   kAbortedBefore it was aborted already (its aborted chunk went or goes).
  enum class Stop { kNothingSent, kAbortGoes, kAbortedBefore };
  Stop stop(const std::shared_ptr<OutOp>& op);
  // Whether every chunk of `op` was handed to a path (the peer may have all
  // of it only then).
  bool claimed_all(const OutOp& op) const;

  // The peer acknowledged `op` with `answer` (once per op; see
  // acknowledged()). True when no path still holds a chunk of it, so it may
  // complete now; otherwise the release() of its last chunk says so, and a
  // chunk of it that a dead path left behind is not sent again (the peer
  // has it). An honest peer acknowledges only once every byte landed, but
  // the path that sent the last ones, or one resending a chunk that landed
  // elsewhere, may still be in its send call; the application's memory is
  // its own again only once that call ended.
  static bool acknowledge(OutOp& op, Status answer);
  static bool acknowledged(const OutOp& op) {
    return (op.on_paths.load(std::memory_order_acquire) & OutOp::kAcked) != 0;
  }
  // Whether a path still holds a chunk of `op` (and may read its memory).
  static bool on_a_path(const OutOp& op) { return (op.on_paths.load(std::memory_order_acquire) & ~OutOp::kAcked) != 0; }
  // The claiming path is done with `c` (sent, failed or never sent): it no
  // longer reads the op's memory. True for the release that completes an
  // acknowledged op: the caller finishes it with op.answer.
  static bool release(const Chunk& c);

  // Which paths are still alive (for choosing paths of new transfers).
  std::vector<bool> alive() const;

  // Marks `path` dead and hands its unconfirmed chunks to the others.
  // Returns how many paths are still alive (0: the transfer cannot go on).
  int fail_path(int path);
  int live_paths() const;
  // How many live paths the governor lets take new chunks.
  int active_paths() const;

  // Wakes every claimer with nullopt and returns the ops never fully claimed.
  std::vector<std::shared_ptr<OutOp>> stop();

  uint64_t in_flight(int path) const;
  uint64_t chunk_bytes() const { return chunk_bytes_; }

  // The governor's throughput samples cover this much busy time.
  static constexpr int64_t kGovernorSampleNs = 10'000'000;

 private:
  std::optional<Chunk> claim_locked(int path) REQUIRES(mu_);
  int live_paths_locked() const REQUIRES(mu_);
  bool idle_locked() const REQUIRES(mu_);  // nothing queued, waiting for retry or in flight
  void wake_all();
  uint64_t live_mask_locked() const REQUIRES(mu_);
  // Feeds the governor a landing report of `bytes`; true if it let more
  // paths take new chunks.
  bool report_locked(uint64_t bytes, const std::optional<platform::CpuReading>& reading) REQUIRES(mu_);

  const uint64_t chunk_bytes_;
  const uint64_t window_;
  const uint64_t ack_every_;
  mutable platform::Mutex mu_;
  std::deque<std::shared_ptr<OutOp>> queue_ GUARDED_BY(mu_);
  std::vector<uint64_t> sent_ GUARDED_BY(mu_);               // chunks sent per path
  std::vector<uint64_t> landed_ GUARDED_BY(mu_);             // chunks confirmed per path
  std::vector<std::deque<Chunk>> inflight_ GUARDED_BY(mu_);  // per path: sent, unconfirmed, in order
  std::vector<bool> alive_ GUARDED_BY(mu_);
  std::deque<Chunk> retry_ GUARDED_BY(mu_);  // chunks of dead paths, sent first
  bool stopped_ GUARDED_BY(mu_) = false;
  // One per path: a confirmation wakes only the path whose window it opens,
  // not every transmit worker of the connection.
  std::vector<std::condition_variable> path_cv_;
  // The same for path workers that run as fibers on the engine's workers.
  std::vector<std::unique_ptr<platform::WaitList>> path_parked_;
  PathGovernor governor_ GUARDED_BY(mu_);
  int64_t busy_since_ns_ GUARDED_BY(mu_) = -1;        // when unreported busy time began, -1 while idle
  int64_t idle_since_ns_ GUARDED_BY(mu_);             // when the queue last went idle (or was made)
  std::vector<uint64_t> flush_sent_ GUARDED_BY(mu_);  // sent_ when the governor last changed its count
  bool flushing_ GUARDED_BY(mu_) = false;             // some of those chunks have not landed yet
  // The governor's CPU meter, read outside mu_ by one landing report at a
  // time: the one that set reading_cpu_ (the meter is not thread-safe).
  const PathGovernor::CpuMeter meter_;
  bool reading_cpu_ GUARDED_BY(mu_) = false;
};

}  // namespace ferry::tcp
