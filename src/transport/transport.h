// Transport: what one connection's transport does for its ConnectionCore.
//
// The core (connection_core.h) keeps every promise the public Connection
// makes: argument, descriptor and bounds checks; receive matching and its
// cancel; notification numbering and order; the health latch; the budget of
// what the peer makes the connection hold. A transport moves the bytes and
// nothing else; it implements this interface and none of the public API, so
// a new one (RDMA, device-memory TCP) fits without touching the core.
// Today: tcp/ (control stream plus N data streams) and local/ (a shared
// channel and one-copy moves between processes of one host).
//
// Threads named below:
//   caller    an application thread posting an operation;
//   inbound   one of the transport's own threads reading the peer;
//   heartbeat the engine's heartbeat thread;
//   any       any of these.
// Ownership: the core owns its transport and outlives it; the transport
// keeps a reference to the core, through ConnectionHost (below): what a
// transport may ask of the core is that interface and nothing else.
// Operations reach the transport already checked and resolved; the transport
// finishes the TransferState (or the part of it) it was handed exactly once,
// and never under its own locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine_context.h"
#include "core/notification_queue.h"
#include "core/segments.h"
#include "core/transfer_state.h"
#include "ferry/memory.h"
#include "ferry/status.h"
#include "ferry/transfer.h"

namespace ferry::transport {

// A receive the application posted, waiting for a message.
struct PostedRecv {
  std::shared_ptr<TransferState> state;
  core::SegmentList dest;
};

// Where a rendezvous message's bytes are, in the transport's own terms (the
// local transport: the sender's memory described to this process).
struct MessageSource {
  virtual ~MessageSource() = default;
  // What it holds in memory, counted against the connection's budget.
  virtual size_t held_bytes() const = 0;
};

// A message from the peer on its way to a receive.
struct ArrivedMessage {
  uint64_t op = 0;    // the sender's operation, to answer
  uint64_t size = 0;  // the message's size
  bool eager = false;                     // `bytes` holds the whole message
  std::string bytes;                      // eager: the message
  std::unique_ptr<MessageSource> source;  // rendezvous: where its bytes are (may be null)
};

// One item of a write or read, checked against the peer's descriptor and
// resolved to local memory.
struct RemoteItem {
  core::SegmentList local;
  RemoteDescriptor remote;
  uint64_t offset = 0;  // into the peer's export
};

// Many writes posted as one operation (a KV cache's blocks): every item's
// local bytes as one stream, and where each item's part of it goes, in
// order (the sizes add up to source.total()). Checked by the core.
struct WriteBatch {
  struct Target {
    RemoteDescriptor remote;
    uint64_t offset = 0;  // into the peer's export
    uint64_t size = 0;
  };
  core::SegmentList source;
  std::vector<Target> targets;
};

// What a transport may ask of the connection it serves (ConnectionCore is
// the one implementation). Thread-safe.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  // "connection N to ADDRESS (engine ID)", for messages.
  virtual const std::string& where() const = 0;
  // The engine the connection belongs to (outlives it).
  virtual core::EngineContext& context() const = 0;

  // ---- the health latch ---------------------------------------------------
  // Fails the connection with `why`; the first call wins (kCancelled once
  // close() began). Any thread, under no lock of the transport's that its
  // failed() takes.
  virtual void fail(const Status& why) = 0;
  // The latch is set (acquire: the reason is in place).
  virtual bool failed() const = 0;
  // close() began.
  virtual bool closing() const = 0;
  // OK while usable, else the reason it failed.
  virtual Status usable() const = 0;
  virtual Status health() const = 0;
  // The peer said goodbye in order: its end is not worth a warning.
  virtual void set_closed_by_peer() = 0;
  // A status the peer reported (`code`, `message`) as this side's, or OK.
  virtual Status peer_status(uint32_t code, std::string_view message) const = 0;

  // ---- numbering and what the peer makes the connection hold --------------
  // A fresh operation number, unique within the connection.
  virtual uint64_t next_op() = 0;
  // connection_memory_bytes, shared with the transport.
  virtual core::ByteBudget& budget() const = 0;
  virtual const std::shared_ptr<core::ByteBudget>& shared_budget() const = 0;
  // kResourceExhausted: `what` would pass connection_memory_bytes.
  virtual Status exhausted(const std::string& what) const = 0;
  // The notifications the application waits for.
  virtual core::NotificationQueue& notes() = 0;

  // ---- receive matching (inbound) -------------------------------------------
  // The oldest posted receive, taken off the queue (its cancel disarmed).
  virtual std::optional<PostedRecv> take_posted() = 0;
  // Receives are posted and waiting.
  virtual bool has_posted() = 0;
  // Hands a receive its message (Transport::match), or refuses one that does
  // not fit (Transport::refuse): a transport that took the receive itself and
  // cannot land the message straight away hands both back here.
  virtual void deliver(PostedRecv recv, ArrivedMessage msg) = 0;
  // Hands `msg` to the oldest posted receive or keeps it for the next one;
  // kResourceExhausted, keeping nothing, past connection_memory_bytes.
  virtual Status arrive(ArrivedMessage msg) = 0;

  // A handle that says whether the connection (and so its transport) still
  // lives, for completions that may run after it is gone.
  virtual std::weak_ptr<ConnectionHost> weak_host() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // "tcp" or "local". Any thread.
  virtual std::string_view name() const = 0;
  // Starts the transport's threads; once, before any operation. Caller
  // (the handshake). kResourceExhausted naming the thread that could not
  // start; the core is then closed, which ends those that did.
  virtual Status start() = 0;
  // How long a Transfer::wait polls before it sleeps, unless
  // Options::wait_spin says otherwise. Any thread.
  virtual std::chrono::microseconds wait_spin() const = 0;
  // Whether a write of one item carries its notification with its data.
  // When false the core sends a write's notification after the write
  // finished, with send_note.
  virtual bool notes_ride_with_writes() const = 0;

  // ---- outbound operations: caller thread; never wait on the peer -------
  // (They may block briefly while a stream takes an inline message.)
  // Sends `source` as one message. Finishes `state` once the peer's receive
  // holds it, or with the reason it cannot.
  virtual void start_send(const std::shared_ptr<TransferState>& state, core::SegmentList source) = 0;
  // Writes `item` into the peer's export; finishes one part of `state`.
  // `note` (with its number `note_seq`) is empty unless
  // notes_ride_with_writes() and the write has one item.
  virtual void start_write(const std::shared_ptr<TransferState>& state, RemoteItem item, std::string_view note,
                           uint64_t note_seq) = 0;
  // Writes `batch` (two or more items) into the peer's exports as one
  // operation; finishes one part of `state` once every item is in place, or
  // with the first failure. `note` (number `note_seq`) is empty unless
  // notes_ride_with_writes(); it is delivered after every item is in place.
  virtual void start_write_batch(const std::shared_ptr<TransferState>& state, WriteBatch batch, std::string_view note,
                                 uint64_t note_seq) = 0;
  // Writes a batch of blocks between prepared pools straight from the
  // application's list (a KV cache's blocks), where the transport has a way
  // that needs no WriteBatch; the core checked every block against the
  // pools' descriptors, and `bytes` is their sum. `note` and `note_seq` as
  // for start_write_batch. True if the transport took it: it then finishes
  // one part of `state` as start_write_batch does.
  // False, with nothing started: the core builds a WriteBatch.
  virtual bool start_pool_blocks(const std::shared_ptr<TransferState>& /*state*/, const struct PreparedPools& /*pools*/,
                                 std::span<const Block> /*blocks*/, uint64_t /*bytes*/, std::string_view /*note*/,
                                 uint64_t /*note_seq*/) {
    return false;
  }
  // Reads the peer's export into `item.local`; finishes one part of `state`.
  virtual void start_read(const std::shared_ptr<TransferState>& state, RemoteItem item) = 0;
  // Sends notification number `seq`; finishes `state` once the peer queued
  // it. `caller_thread`: called by the application (notify), which may
  // write to the stream itself; otherwise by a ferry thread finishing a
  // write, which must only queue it.
  virtual void send_note(const std::shared_ptr<TransferState>& state, uint64_t seq, std::string_view note,
                         bool caller_thread) = 0;
  // Gives number `seq` up (its write failed or was cancelled), so that the
  // peer delivers the later ones without it, and tells the peer's
  // application the write's `note` (its tag) as not delivered (Note). Sent
  // only once no byte of the write will land any more. Any thread; must not
  // block.
  virtual void skip_note(uint64_t seq, std::string_view note) = 0;
  // Stops the write or batch started on `state` (start_write,
  // start_write_batch) and returns once none of its bytes will land in the
  // peer's memory any more: true if it stopped it (`state` finished
  // kCancelled), false if it ended otherwise. The application's thread
  // (Transfer::cancel); blocks, up to Options::peer_timeout, past which the
  // connection fails.
  virtual bool stop_write(const std::shared_ptr<TransferState>& state) = 0;
  // Stops the receive or read on `state` that is moving data into this
  // side's memory and returns once none of it lands any more: true if it
  // stopped it (`state` finished kCancelled; a receive's sender is told),
  // false if it was not landing here or ended otherwise. The application's
  // thread (Transfer::cancel); blocks while a chunk of it is mid-landing,
  // which a stalled peer can hold for at most Options::peer_timeout (its
  // path then fails). A transport whose landings the peer cannot stall
  // keeps the default.
  virtual bool stop_landing(const std::shared_ptr<TransferState>& /*state*/) { return false; }
  // On the application's thread, before a CUDA stream is made to wait for a
  // transfer of this connection: makes what the transport's threads will
  // need to end it, so that they make no driver object while it waits
  // (gpu/gpu_kit.h).
  virtual Status before_stream_wait() { return Status(); }

  // ---- receiving ---------------------------------------------------------
  // A receive met its message (caller thread from a receive, inbound thread
  // from an arrival): move the message into `recv.dest`, finish
  // `recv.state` and answer the sender. Must not block on the peer. The
  // message fits `recv.dest`: the core refuses one that does not (refuse).
  virtual void match(PostedRecv recv, ArrivedMessage msg) = 0;
  // The receive that met `msg` ends with `why` (the core finishes it):
  // answer the sender so that its send ends with `why` too, and drop what
  // the transport holds of the message. Same threads as match; must not
  // block on the peer.
  virtual void refuse(const ArrivedMessage& msg, const Status& why) = 0;

  // ---- liveness and teardown ---------------------------------------------
  // Heartbeat thread, periodically while the connection is up: declare the
  // peer lost after peer_timeout of silence, send a heartbeat when idle.
  // Must not block.
  virtual void tick(Clock::time_point now) = 0;
  // A local region was deregistered (caller thread, from dereg): make the
  // peer forget what was shared of it. Returns once the peer can no longer
  // touch it (at most peer_timeout).
  virtual void region_retired(uint64_t region_id) {}
  // The connection failed with `why` (the core's latch is set: this runs
  // once). Fail every operation the transport holds and wake its threads.
  // Any thread, never under the core's locks; must not block on the peer.
  virtual void failed(const Status& why) = 0;
  // close() from the application: an orderly goodbye, then the core's
  // fail() with kCancelled, then the transport's threads are joined.
  // Blocks briefly (at most peer_timeout).
  virtual void close() = 0;
};

}  // namespace ferry::transport
