// ShmChannel: the control channel of a local connection, two single-consumer
// message rings (one per direction) in a memfd that both processes map.
//
// Why shared memory and not the TCP control stream: a message costs a store
// and, only when the reader sleeps, a wake-up; a local copy takes a few
// microseconds, so a socket hop (tens of microseconds with the wake-up) would
// dominate small transfers. The reader (an engine's progress worker, which
// serves many channels) polls briefly after activity; before it stops
// polling it arms the channel (a flag in the shared page), and a producer
// that finds the flag set after posting rings the reader's doorbell: a byte
// on the connection's control stream, which the worker sleeps on with every
// other connection's (progress_pool.h). An idle connection costs nothing.
//
// Threading: try_post(), beat(), peer_beats(), give_up() and peer_gave_up()
// may run on any thread of this process (a mutex orders producers), also
// while another thread closes the channel; receive(), readable(), arm() and
// disarm() belong to one consumer per side (one thread at a time), close()
// to one thread.
//
// Closing: a side lets go of its mapping and descriptor with close() as soon
// as its connection is over, while threads of its application may still be
// about to post. Every call that touches the mapping from any thread holds
// the channel's UseGate for its span (microseconds: a copy into the ring, a
// wake-up); close() refuses new ones, waits for those inside, then unmaps.
// A call that comes after finds the channel closed and touches nothing (what
// each one then does is in its comment). The consumer's calls take no hold
// (they run on every turn of its loop): the consumer must have ended first.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"
#include "platform/mutex.h"
#include "platform/use_gate.h"

namespace ferry::local {

class ShmChannel {
 public:
  // The side that created the channel is side 0; it posts on ring 0.
  static Result<ShmChannel> create(size_t ring_bytes, uint64_t nonce);
  // Maps a channel from an fd (already this process's) and checks `nonce`.
  static Result<ShmChannel> attach(int fd, uint64_t nonce);

  ShmChannel() = default;
  // A channel moves only before anyone uses it (a fresh one is never
  // closed).
  ShmChannel(ShmChannel&& o) noexcept;
  ShmChannel& operator=(ShmChannel&& o) noexcept;
  ~ShmChannel();

  // The file's descriptor; -1 once closed.
  int fd() const { return fd_; }
  size_t max_message() const { return ring_bytes_ / 4; }

  // Whether a message of `bytes` is sure to be postable once the ring drains
  // (at most half the ring).
  bool fits(size_t bytes) const;
  // Appends one message made of `head` then `body` to the outgoing ring.
  // Returns false without posting when the ring lacks room (the caller
  // retries later) or the channel is closed; a message that does not fit()
  // never posts. Sets `*ring` (when given) if the peer's reader armed the
  // channel: the caller then rings the peer's doorbell.
  bool try_post(std::string_view head, std::string_view body, bool* ring = nullptr);
  // Takes the next incoming message into `out`; false if none. kDataLoss if
  // the peer's ring holds a length or marker that cannot be right (nothing is
  // read past what it published).
  Result<bool> receive(std::string& out);
  // True if an incoming message is waiting.
  bool readable() const;
  // Asks the peer to ring after its next message (the reader is about to
  // stop polling); false if a message is already waiting (the reader reads
  // it instead). Ordered against the peer's post: a message published before
  // the peer could see the request is found here, any later one rings.
  bool arm();
  // The reader polls again: the peer need not ring.
  void disarm();

  // Where ring `i`'s shared head and tail, and its bytes, lie in the file:
  // what a peer can write, for tests that play a hostile one.
  static size_t head_offset(int i);
  static size_t tail_offset(int i);
  size_t data_offset(int i) const;

  // Liveness: each side bumps its own counter; the other side reads it.
  // Once closed: no beat, and the peer's count reads 0.
  void beat();
  uint64_t peer_beats() const;

  // Each side records here, before it lets go of any memory it described to
  // the peer, that it gave up on the connection. A side that copied from or
  // into the peer's memory reads it once its copy has ended: bytes copied
  // after the peer gave up may be the peer's reused memory, not its message.
  // Once closed, give_up() records nothing (close() records it first) and
  // peer_gave_up() is true: nothing the peer records can be read any more,
  // so a copy that ends then is not trusted.
  void give_up();
  bool peer_gave_up() const;

  // Records that this side gave up, then unmaps the channel and closes its
  // descriptor once no call is inside one that touches them, waiting for
  // those at most until `deadline`. REQUIRES: this side's consumer thread
  // has ended. True once both are gone; false if a call was still inside at
  // the deadline (both then stay until the channel is destroyed; later calls
  // find it closed all the same). Blocks up to `deadline`; idempotent.
  bool close(std::chrono::steady_clock::time_point deadline);
  // close() began.
  bool closed() const { return users_.retired(); }

 private:
  struct Layout;
  struct Ring;
  Ring& ring(int i) const;
  uint8_t* data(int i) const;
  void release();

  int fd_ = -1;
  int side_ = 0;
  size_t ring_bytes_ = 0;
  size_t map_bytes_ = 0;
  uint8_t* base_ = nullptr;
  platform::Mutex post_mu_;  // producers of this process
  // The shared page is the peer's to write: each side keeps its own index
  // here, publishes it there, and only checks what it reads there.
  uint64_t head_ GUARDED_BY(post_mu_) = 0;  // bytes this side published
  std::atomic<uint64_t> tail_{0};           // the consumer thread's: bytes this side consumed (readable() reads it)
  std::atomic<bool> broken_{false};         // the peer's tail was garbage: set by a producer, reported by receive()
  // Held by every call of another thread than the consumer's that touches
  // the mapping; close() retires it before base_ and fd_ go. Not moved.
  mutable platform::UseGate users_;
};

}  // namespace ferry::local
