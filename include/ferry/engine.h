// Engine and Connection: the whole C++ API of ferry.
//
// Vocabulary (used everywhere in ferry, no synonyms):
//   Engine     one per process; owns the registry of memory regions, listens
//              for peers and serves every NIC and GPU of the host.
//   Transport  how bytes move to a peer: tcp (streams over NICs) or local.
//   Connection a peer engine, reachable in both directions.
//   Path       one data stream of a connection.
//   Transfer   one operation (send, recv, write, read, notify) and its handle.
//   Chunk      the piece of a transfer that travels on one path at a time.
//
// Completion rules (the contract):
//   * send / write / notify finish when the peer has the data in place (a
//     write's bytes are in the target region; a send's bytes are in the
//     matching receive buffer).
//   * recv / read finish when the data is in the local buffer.
//   * A write's notification is delivered to the target only after the
//     write's data is in place.
//   * Receives match sends in FIFO order per connection. A receive buffer
//     smaller than the message fails both sides with kBufferTooSmall.
//   * Every wait takes a deadline. A peer that dies, closes or stays silent
//     past Options::peer_timeout fails every pending transfer of its
//     connection with kPeerLost; the engine keeps serving other peers.
//
// Example:
//   auto engine = ferry::Engine::create({}).value();
//   auto region = engine->reg(buf, len).value();
//   auto conn = engine->connect("10.0.0.2:7000", ferry::after(5s)).value();
//   ferry::Status s = conn->send(buf, len, ferry::after(5s));
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/directory.h"
#include "ferry/memory.h"
#include "ferry/metrics.h"
#include "ferry/options.h"
#include "ferry/status.h"
#include "ferry/transfer.h"

namespace ferry {

namespace transport {
class ConnectionCore;
}

// A notification as Connection::wait_note gives it: the message, and what
// became of the write that carried it.
struct Note {
  std::string message;
  // False: the write (or batch of blocks) that carried `message` as its
  // notification failed or was cancelled, and no byte of it lands in this
  // engine's memory from now on: its blocks may be used again. Which of its
  // bytes landed before is unspecified.
  bool delivered = true;
};

class StreamOrdered;

// A bidirectional link to one peer engine. Thread-safe: any thread may post
// operations; operations posted from one thread keep their order.
//
// Every pointer passed to an operation must lie inside memory registered with
// the local engine (kNotFound otherwise, kOutOfRange if it runs past the
// region). Buffers must stay valid until the transfer finishes.
class Connection {
 public:
  virtual ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // ---- two-sided ---------------------------------------------------------
  // Sends `size` bytes as one message. Finishes when the peer's matching
  // receive holds them. Does not wait for the peer; a message of up to
  // Options::inline_max bytes is written to the stream by the calling
  // thread, which may block while the socket drains.
  Transfer send_async(const void* data, size_t size);
  // Sends the concatenation of `parts` as one message; as send_async.
  Transfer sendv_async(std::span<const ConstBuffer> parts);
  // Receives the next message into up to `capacity` bytes at `data`;
  // bytes() of the finished transfer is the message size. Non-blocking.
  Transfer recv_async(void* data, size_t capacity);
  // Receives the next message scattered over `parts`, in order. Non-blocking.
  Transfer recvv_async(std::span<const MutableBuffer> parts);
  // Waits until a message that no posted receive took has arrived, and
  // returns its size without taking it: the next receive gets it. (A receive
  // whose buffer is too small fails both ends with kBufferTooSmall and the
  // message is gone; probe first to size the buffer.) kDeadlineExceeded, or
  // the connection's failure. A receive posted meanwhile takes the message.
  Result<uint64_t> probe(Deadline deadline);

  // ---- one-sided ---------------------------------------------------------
  // Writes local bytes into the peer's exported memory at `remote_offset`.
  // A non-empty `notification` (at most kMaxNotification bytes) is delivered
  // to the peer after the data is in place. Non-blocking.
  Transfer write_async(const void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
                               std::string_view notification = {});
  // All items, then the notification once every item's data is in place.
  // The items go as one operation (a KV cache's hundreds of scattered
  // blocks cost about what their bytes in one piece do); items that continue
  // each other, locally and in one export, travel as one.
  Transfer writev_async(std::span<const WriteItem> items, std::string_view notification = {});
  // Checks `local` (regions of this engine) and `remote` (exports of the
  // peer) once for write_blocks_async. kInvalidArgument for another
  // engine's descriptor or no pools; kNotFound for a region not registered.
  Result<BlockPools> prepare_blocks(std::span<const Region> local, std::span<const RemoteDescriptor> remote);
  // Writes `blocks` between the prepared pools as one operation, as
  // writev_async does, then the notification. Each block is checked against
  // its pools: kInvalidArgument (a pool index past the pools, pools of
  // another connection), kOutOfRange (past a pool's end); nothing is posted
  // then.
  Transfer write_blocks_async(const BlockPools& pools, std::span<const Block> blocks,
                              std::string_view notification = {});
  // Reads the peer's exported memory into local memory. Non-blocking.
  Transfer read_async(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset);
  Transfer readv_async(std::span<const ReadItem> items);

  // ---- notifications ----------------------------------------------------
  // Sends a standalone notification; finishes when the peer has queued it.
  Transfer notify_async(std::string_view message);
  // Blocks until a notification from this peer arrives or `deadline` passes
  // (kDeadlineExceeded). Notifications arrive in the order they were sent.
  Result<std::string> wait_notification(Deadline deadline);
  // Non-blocking: the next notification, if one is queued.
  std::optional<std::string> poll_notification();
  // As wait_notification and poll_notification, and also the messages of
  // writes aimed here that failed or were cancelled (Note::delivered
  // false), in the order their writes were posted. wait_notification and
  // poll_notification drop those: use these where blocks are reused.
  Result<Note> wait_note(Deadline deadline);
  std::optional<Note> poll_note();
  // Calls `listener` each time a notification is queued, and once when the
  // connection fails or closes, on the ferry thread that does it: it must
  // not block (an event loop's wake-up: write to an eventfd). Replaces the
  // previous listener; an empty one removes it.
  void set_notification_listener(std::function<void()> listener);

  // ---- CUDA stream order --------------------------------------------------
  // GPU buffers are often still being produced by kernels queued on a CUDA
  // stream when they are handed over. The operations posted through the
  // returned view run after the work queued on each of `cuda_streams`
  // (CUstream or cudaStream_t values; CU_STREAM_LEGACY and
  // CU_STREAM_PER_THREAD allowed) at the time of each call: a source is read
  // only after it, a destination written only after it (a fill queued before
  // a receive never overwrites what lands). The posting thread never waits
  // for the GPU: the operation is held and posted by a ferry thread once the
  // streams get there. Operations on this connection posted after a held one
  // wait behind it, so operations from one thread keep their order. A held
  // operation counts as not moving data: cancel() and a deadline withdraw
  // it. A stream the driver refuses (another context's, or one being
  // captured into a graph) fails the transfer with kInvalidArgument; without
  // a CUDA driver, kUnimplemented. Streams must outlive the call only.
  // Default-stream handles name the calling thread's current context's.
  StreamOrdered after_streams(std::span<void* const> cuda_streams);
  // The same, each stream with the device whose primary context a
  // default-stream handle names (CudaStreamRef): what a caller holding
  // buffers on several devices, or not the current one, passes.
  StreamOrdered after_streams(std::span<const CudaStreamRef> cuda_streams);
  // Makes `cuda_stream` wait, on the GPU, until `transfer` finishes
  // (successfully or not: check its status before trusting the bytes), so a
  // kernel that consumes a receive can be queued without a host round trip.
  // OK at once if it has finished. kUnimplemented without a CUDA driver,
  // where it lacks stream memory operations, or when the process runs with
  // CUDA_DEVICE_MAX_CONNECTIONS=1 (every stream then shares one hardware
  // queue, and the waiting stream would hold ferry's own copies): then wait
  // on the host.
  Status stream_wait(const Transfer& transfer, void* cuda_stream);
  Status stream_wait(const Transfer& transfer, const CudaStreamRef& cuda_stream);

  // ---- blocking wrappers (post, then wait) -------------------------------
  // Past `deadline`, a receive, write or read that has not started moving
  // data is cancelled and kDeadlineExceeded returned; one already moving data
  // is stopped (over TCP; a receive first gets half of peer_timeout to finish,
  // then its sender is told) and kDeadlineExceeded returned once none of it
  // lands any more, at most peer_timeout (a receive: 1.5 times) past the
  // deadline; on the local transport it runs to its end and returns its own
  // result. So these never return while the engine still uses the buffer,
  // and a peer cannot stretch the deadline. A send returns kDeadlineExceeded at
  // the deadline and goes on (its message will still be delivered: do not
  // send it again): a message once posted is not withdrawn, since
  // the peer may be receiving it (send_async gives a handle to follow it);
  // notify likewise. Each is Transfer::wait_or_cancel: kCancelOrFinish for
  // recv, recvv, write and read, kLeave for send, sendv and notify.
  Status send(const void* data, size_t size, Deadline deadline = kNoDeadline);
  Status sendv(std::span<const ConstBuffer> parts, Deadline deadline = kNoDeadline);
  // Returns the message size.
  Result<size_t> recv(void* data, size_t capacity, Deadline deadline = kNoDeadline);
  Result<size_t> recvv(std::span<const MutableBuffer> parts, Deadline deadline = kNoDeadline);
  Status write(const void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
               std::string_view notification = {}, Deadline deadline = kNoDeadline);
  Status read(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
              Deadline deadline = kNoDeadline);
  Status notify(std::string_view message, Deadline deadline = kNoDeadline);

  // ---- lifecycle ---------------------------------------------------------
  // Fails pending transfers with kCancelled, tells the peer, releases the
  // streams and joins the connection's threads. Idempotent. Blocks briefly.
  void close();
  // OK while usable; afterwards the reason (kPeerLost, kCancelled, ...).
  Status health() const;
  // Engine-unique id of this connection.
  uint64_t id() const;
  // The peer's engine id and address, for messages and logs.
  uint64_t peer_engine_id() const;
  std::string peer_address() const;
  // "tcp" or "local".
  std::string_view transport_name() const;

  static constexpr size_t kMaxNotification = 60 * 1024;

 private:
  // The one implementation is the engine's (ConnectionCore); connections
  // come from Engine::connect and Engine::accept.
  friend class transport::ConnectionCore;
  Connection() = default;
};

// Connection's operations, each ordered after the work queued on CUDA
// streams at its call (Connection::after_streams). The same operations and
// rules as Connection's; a cheap value, valid while its connection is.
class StreamOrdered {
 public:
  Transfer send_async(const void* data, size_t size);
  Transfer sendv_async(std::span<const ConstBuffer> parts);
  Transfer recv_async(void* data, size_t capacity);
  Transfer recvv_async(std::span<const MutableBuffer> parts);
  Transfer write_async(const void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
                       std::string_view notification = {});
  Transfer writev_async(std::span<const WriteItem> items, std::string_view notification = {});
  Transfer write_blocks_async(const BlockPools& pools, std::span<const Block> blocks,
                              std::string_view notification = {});
  Transfer read_async(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset);
  Transfer readv_async(std::span<const ReadItem> items);

 private:
  friend class Connection;
  StreamOrdered(Connection* connection, std::span<const CudaStreamRef> streams)
      : connection_(connection), streams_(streams.begin(), streams.end()) {}
  Connection* connection_;
  std::vector<CudaStreamRef> streams_;
};

// A notification as the engine-wide stream gives it: who sent it, and what.
struct Notification {
  uint64_t connection_id = 0;    // Connection::id() of the connection it came on
  uint64_t peer_engine_id = 0;   // the sender's engine
  std::string peer_address;      // the sender's end of that connection
  std::string message;
};

// The process's transfer engine. Thread-safe.
class Engine {
 public:
  // Creates an engine with `options` overridden by FERRY_* variables, starts
  // listening and its background threads. Allocates nothing on any GPU.
  // Returns kInvalidArgument for bad options, kUnavailable if it cannot listen.
  static Result<std::unique_ptr<Engine>> create(Options options);

  // Closes every connection (pending transfers fail with kCancelled), stops
  // listening and joins every thread.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Random 64-bit id, fresh for each engine.
  uint64_t id() const;
  // "host:port" peers can connect to.
  std::string address() const;
  // A byte string with everything a peer needs to connect (engine id, host
  // identity, addresses); Engine::connect accepts it in place of an address.
  std::string metadata() const;
  // The options in force (after the environment).
  const Options& options() const;

  // ---- memory --------------------------------------------------------------
  // Registers [data, data+size). Detects host, pinned host or CUDA memory.
  // Registering the same range again returns the same region (counted).
  // kInvalidArgument for a null pointer or zero size.
  Result<Region> reg(void* data, size_t size);
  // Drops one registration of `region`; on the last one, revokes every export
  // of it. Waits for chunks landing in it at that instant, then no byte lands
  // there any more. kNotFound if not registered.
  Status dereg(const Region& region);
  // Exports [offset, offset+length) of `region` to peers (length 0: to the end).
  // kNotFound if not registered, kOutOfRange if the slice leaves the region.
  Result<RemoteDescriptor> export_region(const Region& region, uint64_t offset = 0, uint64_t length = 0);

  // ---- the directory (Options::directory, docs/directory.md) --------------
  // The name this engine publishes ("" without a directory).
  std::string name() const;
  // This start's incarnation in the directory: higher than any earlier
  // start's under the same name (0 without a directory).
  uint64_t incarnation() const;
  // The directory client, for watches; nullptr without a directory. Owned
  // by the engine.
  Directory* directory() const;
  // directory()->lookup(name) and ->list(); kInvalidArgument without a
  // directory. Block at most until `deadline`.
  Result<DirectoryEntry> lookup(std::string_view name, Deadline deadline);
  Result<DirectoryListing> list(Deadline deadline);

  // ---- connections -----------------------------------------------------
  // Connects to `peer` by `deadline`: "host:port", a metadata() blob, or the
  // name of an engine in the directory (no ':' in it). kUnavailable if
  // nobody answers, kUnauthenticated if the shared secret differs,
  // kDeadlineExceeded if the deadline passes first; for a name also
  // kNotFound (no such entry), kUnavailable (the directory cannot be reached,
  // or the engine answering at the entry's address is not the one it names)
  // and kDataLoss (a malformed entry). A connection made by name fails with
  // kPeerLost as soon as the directory shows the name restarted (a newer
  // incarnation), even while the old engine is silent rather than gone.
  Result<std::shared_ptr<Connection>> connect(std::string_view peer, Deadline deadline);
  // Waits for the next peer that connected to this engine (kDeadlineExceeded).
  Result<std::shared_ptr<Connection>> accept(Deadline deadline);

  // ---- notifications from every connection ---------------------------------
  // One stream for a server with many peers: blocks until any connection
  // has a notification (kDeadlineExceeded; kCancelled once the engine
  // closes). Each connection's notifications keep their order; one is taken
  // once, by this or by that connection's own wait/poll. Connections are
  // served in turn, so a busy peer does not starve the others.
  Result<Notification> wait_notification(Deadline deadline);
  // Non-blocking: a notification from any connection, if one is queued.
  std::optional<Notification> poll_notification();
  // Calls `listener` each time any connection queues a notification, and
  // when the engine closes, on the ferry thread that does it: it must not
  // block (an event loop's wake-up). Replaces the previous one; empty: none.
  void set_notification_listener(std::function<void()> listener);

  // ---- what the engine has done (ferry/metrics.h) --------------------------
  // Its transfers by operation and transport, their bytes and times,
  // failures by code, and its connections; empty with Options::metrics off.
  MetricsSnapshot metrics() const;
  // "host:port" where Prometheus scrapes metrics() (Options::metrics_listen),
  // or empty when nothing listens.
  std::string metrics_address() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
