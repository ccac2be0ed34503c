// StagingRing: the pinned host slots one path stages GPU memory through, in
// one direction.
//
// Slots are handed out in turn (round robin) and allocated on first use, so a
// path that never moves GPU memory holds none, and a path that does holds at
// most `depth` slots of `slot_bytes` each. A slot's life:
//   idle -> acquired (copies into or out of it queued; `ticket` fences them)
//        -> released (the sender sent it, or the peer confirmed it when its
//           pages were lent to the socket; the receiver queued its copy out)
//        -> acquired again once its last copies are done.
// Every byte a ring allocates is counted process-wide, so tests can check that
// a closed or failed connection leaves nothing behind.
//
// Threading: one thread uses a ring (the path worker that owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/status.h"
#include "transport/tcp/staging_copier.h"

namespace ferry::tcp {

class StagingRing {
 public:
  struct Slot {
    uint8_t* data = nullptr;
    uint64_t ticket = 0;  // fences the last copies into or out of the slot (0: none)
    bool held = false;    // acquired and not yet released
  };

  // REQUIRES: `copier` outlives the ring; slot_bytes > 0; depth >= 1.
  // `lendable`: slots whose pages a sender lends to its socket
  // (Copier::alloc_lendable).
  StagingRing(Copier& copier, size_t slot_bytes, int depth, bool lendable = false);
  // Frees every slot. REQUIRES: no copy touching a slot is still running.
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // The next slot in turn: allocated now if new (pinned near `device`),
  // waiting for its last copies if it had any. kInternal if that
  // slot is still held (more than `depth` slots in use: a caller bug);
  // kResourceExhausted if it cannot be allocated.
  Result<Slot*> acquire(int device);
  // The slot may be handed out again (once `slot->ticket` is done).
  void release(Slot* slot);

  size_t slot_bytes() const { return slot_bytes_; }
  int depth() const { return static_cast<int>(slots_.size()); }
  // Whether the slot acquire() hands out next is still held.
  bool next_held() const { return slots_[next_].held; }
  // Slots allocated so far (<= depth) and slots held now.
  int allocated() const;
  int held() const;

 private:
  Copier& copier_;
  const size_t slot_bytes_;
  const bool lendable_;
  std::vector<Slot> slots_;
  size_t next_ = 0;
};

// Pinned staging bytes and slots currently allocated by every ring of the process.
size_t staging_bytes_allocated();
size_t staging_slots_allocated();

}  // namespace ferry::tcp
