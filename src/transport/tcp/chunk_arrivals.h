// ChunkArrivals: the chunks of one incoming operation (a receive, a read's
// reply, a write from the peer) that have landed and those still arriving.
//
// A sender that gives up a path resends that path's unconfirmed chunks on
// the others. The path it gave up may only be stalled: bytes of the chunk it
// carried can still arrive, and they go straight into the operation's memory.
// If they landed after the operation completed, they would overwrite what
// the application put there since. So:
//   - a chunk that has landed already is drained, not written again;
//   - a chunk that arrives while the same chunk is still arriving on another
//     path names that path as stalled (the caller shuts it, which ends the
//     bytes from it);
//   - the operation completes (or, aborted by the sender, fails) only once
//     no chunk is still being written into its memory.
//
// Not thread-safe: its owner's mutex guards it.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_set>

#include "ferry/status.h"

namespace ferry::tcp {

class ChunkArrivals {
 public:
  struct Begin {
    bool land = true;       // false: the chunk landed already, or the operation is over; drain its bytes
    int stalled_path = -1;  // >= 0: that path was still bringing this chunk (whether or not this copy lands)
  };

  explicit ChunkArrivals(uint64_t total = 0) : total_(total) {}

  // A chunk at `offset` starts arriving on `path`. With `land`, the caller
  // must later call end() for it, whatever happens to its bytes.
  Begin begin(uint64_t offset, int path);
  // The chunk begun at `offset` on `path` is over: its `size` bytes landed
  // (`landed`), or it broke off. Returns true once: when all `total` bytes
  // landed and no chunk is being written any more. kDataLoss if more bytes
  // landed than the operation holds.
  Result<bool> end(uint64_t offset, int path, uint64_t size, bool landed);
  // The sender aborted the operation; its aborted frame for the chunk at
  // `offset` came on `path`. Unless the operation had completed, no chunk
  // lands from now on. `over`: it just ended, nothing being written into
  // its memory (otherwise the end() of the last chunk still arriving
  // returns true). `stalled_path` >= 0: that path was still bringing the
  // chunk at `offset`, which the sender has moved off it.
  struct Abort {
    bool over = false;
    int stalled_path = -1;
  };
  Abort abort(uint64_t offset, int path);

  // The connection failed: no chunk lands from now on, and the end() of the
  // last chunk still arriving returns true.
  void stop() {
    if (!completed_) aborted_ = true;
  }

  bool aborted() const { return aborted_; }
  bool arriving() const { return !arriving_.empty(); }

  uint64_t total() const { return total_; }
  uint64_t received() const { return received_; }
  bool complete() const { return completed_; }

 private:
  // A path other than `path` that is bringing the chunk at `offset`, or -1.
  int arriving_elsewhere(uint64_t offset, int path) const;

  uint64_t total_;
  uint64_t received_ = 0;
  bool completed_ = false;
  bool aborted_ = false;
  std::unordered_set<uint64_t> landed_;    // offsets of chunks that landed
  std::multimap<uint64_t, int> arriving_;  // offset -> path, chunks being written
};

}  // namespace ferry::tcp
