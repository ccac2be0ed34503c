// ConnectionCore: the one implementation of Connection.
//
// Everything every connection guarantees lives here, once: the checks on
// what the application passes (registered memory, descriptors and their
// bounds, notification sizes), receive matching in FIFO order with its
// cancel, notification numbers and their order, the health latch (the
// first failure wins and every pending transfer ends with it), and the
// budget of what the peer makes the connection hold. Bytes move through a
// Transport (transport.h), which the core owns.
//
// Thread-safe. Locks: health_mu_ (the latch's reason), mu_ (the posted
// receives and the messages waiting for one); neither is held while the
// transport is called or a transfer finishes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/engine_context.h"
#include "core/notification_queue.h"
#include "core/stream_order.h"
#include "ferry/engine.h"
#include "platform/mutex.h"
#include "transport/transport.h"

namespace ferry::transport {

// Who the connection leads to.
struct PeerIdentity {
  uint64_t engine_id = 0;
  std::string address;  // the control stream's remote end, "ip:port"
  // How messages name the connection ("connection 3 to 1.2.3.4:5 (engine 9f..)").
  std::string where;
};

// BlockPools' checked state: the pools as resolved for one connection.
struct PreparedPools {
  const void* engine = nullptr;  // the EngineContext and connection it was checked for
  uint64_t connection = 0;
  std::vector<core::MemorySpan> local;  // each a whole region
  std::vector<RemoteDescriptor> remote;
};

class ConnectionCore final : public Connection,
                             public ConnectionHost,
                             public std::enable_shared_from_this<ConnectionCore> {
 public:
  // Makes the core and its transport (`make` builds it around the core).
  using MakeTransport = std::function<std::unique_ptr<Transport>(ConnectionCore&)>;
  static std::shared_ptr<ConnectionCore> create(std::shared_ptr<core::EngineContext> ctx, uint64_t id,
                                                PeerIdentity peer, const MakeTransport& make);
  ~ConnectionCore() override;
  ConnectionCore(const ConnectionCore&) = delete;
  ConnectionCore& operator=(const ConnectionCore&) = delete;

  // ---- the public operations (Connection forwards here) -----------------
  Transfer sendv_async(std::span<const ConstBuffer> parts);
  Transfer recvv_async(std::span<const MutableBuffer> parts);
  Result<uint64_t> probe(Deadline deadline);
  Transfer writev_async(std::span<const WriteItem> items, std::string_view notification);
  Result<BlockPools> prepare_blocks(std::span<const Region> local, std::span<const RemoteDescriptor> remote);
  Transfer write_blocks_async(const BlockPools& pools, std::span<const Block> blocks, std::string_view notification);
  Transfer readv_async(std::span<const ReadItem> items);
  Transfer notify_async(std::string_view message);
  Result<std::string> wait_notification(Deadline deadline);
  std::optional<std::string> poll_notification();
  Result<Note> wait_note(Deadline deadline);
  std::optional<Note> poll_note();
  void set_notification_listener(std::function<void()> listener) { notes_.set_listener(std::move(listener)); }
  Status stream_wait(const Transfer& transfer, const CudaStreamRef& cuda_stream);
  // Operations held until CUDA streams reach them (core/stream_order.h);
  // every public operation goes through it to keep posting order.
  core::OrderedPosts& ordered() { return *ordered_; }
  void close();
  Status health() const override;
  uint64_t id() const { return id_; }
  uint64_t peer_engine_id() const { return peer_.engine_id; }
  const std::string& peer_address() const { return peer_.address; }
  std::string_view transport_name() const { return transport_->name(); }

  // ---- for the engine ------------------------------------------------------
  // Starts the transport (see Transport::start).
  Status start() { return transport_->start(); }
  // Heartbeat duty (Transport::tick), nothing once failed.
  void tick(Clock::time_point now);
  // A local region was deregistered (Transport::region_retired).
  void region_retired(uint64_t region_id) { transport_->region_retired(region_id); }
  // Fails the connection with `why`; the first call wins. Once close()
  // began, the reason is kCancelled whatever happened next. Any thread,
  // under no lock of the connection.
  void fail(const Status& why) override;

  // ---- for the transport -----------------------------------------------------
  const std::string& where() const override { return peer_.where; }
  core::EngineContext& context() const override { return *ctx_; }
  // The latch is set (acquire: the reason is in place).
  bool failed() const override { return failed_.load(std::memory_order_acquire); }
  // close() began.
  bool closing() const override { return closed_.load(std::memory_order_acquire); }
  // OK while usable, else the reason it failed.
  Status usable() const override;
  // A fresh operation number, unique within the connection. Any thread.
  uint64_t next_op() override { return next_op_.fetch_add(1, std::memory_order_relaxed); }
  // A TransferState for a new operation of `parts` pieces; with `op`,
  // counted in the engine's metrics when it finishes.
  std::shared_ptr<TransferState> new_state(int parts = 1);
  std::shared_ptr<TransferState> new_state(core::MeteredOp op, int parts = 1);
  // A transfer that ended before it began.
  static Transfer failed_transfer(const Status& s);
  // What the connection holds on the peer's behalf (connection_memory_bytes).
  core::ByteBudget& budget() const override { return *budget_; }
  const std::shared_ptr<core::ByteBudget>& shared_budget() const override { return budget_; }
  // kResourceExhausted: `what` would pass connection_memory_bytes.
  Status exhausted(const std::string& what) const override;
  core::NotificationQueue& notes() override { return notes_; }
  // The peer said goodbye in order: its end is not worth a warning.
  void set_closed_by_peer() override { closed_by_peer_.store(true, std::memory_order_release); }
  bool closed_by_peer() const { return closed_by_peer_.load(std::memory_order_acquire); }

  // Receive matching, for the inbound thread. The oldest posted receive,
  // taken off the queue (its cancel disarmed), if any.
  std::optional<PostedRecv> take_posted() override;
  // Hands a receive its message (the transport's match), or refuses one that
  // does not fit: the one place of that rule. A transport that took the
  // receive itself (take_posted) and cannot land the message straight away
  // hands both back here.
  void deliver(PostedRecv recv, ArrivedMessage msg) override;
  // Hands `msg` to the oldest posted receive (Transport::match) or keeps it
  // for the next one; kResourceExhausted, keeping nothing, when keeping it
  // would pass connection_memory_bytes.
  Status arrive(ArrivedMessage msg) override;
  // Receives are posted and waiting.
  bool has_posted() override;

  // A status the peer reported (`code`, `message`) as this side's, or OK.
  Status peer_status(uint32_t code, std::string_view message) const override;
  std::weak_ptr<ConnectionHost> weak_host() override { return weak_from_this(); }

 private:
  // Lets Transfer::cancel of `shown` (the application's handle) stop the
  // write started on `started` while it moves data (Transport::stop_write).
  void let_stop(const std::shared_ptr<TransferState>& shown, const std::shared_ptr<TransferState>& started);
  // Lets Transfer::cancel stop a receive or read on `state` while its data
  // lands (Transport::stop_landing).
  void let_stop_landing(const std::shared_ptr<TransferState>& state);
  Result<Note> wait_note(Deadline deadline, bool delivered_only);
  ConnectionCore(std::shared_ptr<core::EngineContext> ctx, uint64_t id, PeerIdentity peer);
  // What a message kept for a later receive counts against the budget.
  static size_t held_cost(const ArrivedMessage& msg);

  Result<std::vector<RemoteItem>> resolve_items(std::span<const ReadItem> items, const char* op) const;
  Status check_remote(const RemoteDescriptor& r, uint64_t offset, uint64_t size, const char* op) const;
  // Starts checked writes on `state` with the note (and its number) that
  // rides with them; runs once, on the posting thread, before post_writes
  // returns.
  using StartWrites =
      std::function<void(const std::shared_ptr<TransferState>& state, std::string_view note, uint64_t seq)>;
  // Checked writes of `bytes` in all and their notification, posted.
  Transfer post_writes(uint64_t bytes, std::string_view notification, const StartWrites& start,
                       core::MeteredOp op = core::MeteredOp::kWrite);
  // A checked batch of writes (one item or more) and its notification, posted.
  Transfer post_writes(WriteBatch batch, std::string_view notification);
  // Hands `batch` to the transport: one item as a write, more as a batch.
  void start_writes(const std::shared_ptr<TransferState>& state, WriteBatch batch, std::string_view note,
                    uint64_t seq);
  // The writes first, their notification once they all landed.
  Transfer writes_with_trailing_note(uint64_t bytes, const StartWrites& start, std::string_view note, uint64_t seq,
                                     core::MeteredOp op);

  const std::shared_ptr<core::EngineContext> ctx_;
  const uint64_t id_;
  const PeerIdentity peer_;
  // This connection's per-peer counts (null with metrics off).
  const std::shared_ptr<core::PeerMeter> peer_meter_;
  std::unique_ptr<Transport> transport_;
  std::atomic<uint64_t> next_op_{1};
  std::atomic<uint64_t> next_note_seq_{1};

  std::atomic<bool> failed_{false};
  std::atomic<bool> closed_{false};
  std::atomic<bool> closed_by_peer_{false};
  mutable platform::Mutex health_mu_;
  Status health_ GUARDED_BY(health_mu_);

  // What the peer can make this side hold (unmatched messages,
  // notifications not yet taken, and the transport's own holdings).
  const std::shared_ptr<core::ByteBudget> budget_;
  // Declared before what it outlives: once the messages and notes below are
  // freed, gives their pages back to the system if the peer ever made this
  // connection hold kHeapReturnBytes or more.
  struct HeapReturn {
    static constexpr size_t kHeapReturnBytes = size_t{4} << 20;
    const core::ByteBudget& budget;
    ~HeapReturn();
  };
  const HeapReturn heap_return_{*budget_};

  platform::Mutex mu_;
  std::deque<PostedRecv> posted_ GUARDED_BY(mu_);
  std::deque<ArrivedMessage> unexpected_ GUARDED_BY(mu_);
  std::condition_variable arrived_;  // with mu_: a message joined unexpected_, or the connection failed

  core::NotificationQueue notes_;
  const std::shared_ptr<core::OrderedPosts> ordered_;
};

}  // namespace ferry::transport
