// LocalConnection: a Connection to a peer engine on the same host.
//
// Control messages travel through a ShmChannel; bytes move in one copy by a
// LocalCopier on whichever side can address both ends (the sender or the
// initiator when it can, else the peer): send/recv use a rendezvous in which
// the receiver's buffer is described to the sender (CTS), which copies once;
// write/read open the peer's export once (key checked by its owner) and then
// copy directly. No data is staged. The TCP control stream of the handshake
// stays open only to notice the peer's death (the kernel closes it).
//
// Threads: ferry-c<id>-local, the progress thread (local_progress.cc), reads the channel, polls
// GPU copy events and runs the handlers. It busy-polls while copies are in
// flight or for kSpinWindow after the last message (a futex wake-up costs
// tens of microseconds, a local copy a few), then sleeps on the channel.
// Application threads post operations and may start copies themselves.
//
// Failure: a peer that exits (control stream EOF), stops beating for
// peer_timeout, or sends garbage fails every pending transfer with the
// reason; close() and the destructor join the progress thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "core/engine_context.h"
#include "core/notification_queue.h"
#include "core/segments.h"
#include "core/transfer_state.h"
#include "platform/socket.h"
#include "transport/connection_base.h"
#include "transport/local/local_copier.h"
#include "transport/local/shm_channel.h"
#include "wire/frame.h"

namespace ferry::local {

struct LocalPeer {
  uint64_t engine_id = 0;
  pid_t pid = 0;
  std::string address;  // the control stream's remote end, for messages
};

class LocalConnection final : public ConnectionBase, public std::enable_shared_from_this<LocalConnection> {
 public:
  // How long the progress thread keeps polling after the last message.
  static constexpr std::chrono::microseconds kSpinWindow{200};
  // ... and, while operations of this connection wait on the peer, for this
  // long: the answer usually comes within a copy's time (a futex wake-up on a
  // virtual machine costs tens of microseconds).
  static constexpr std::chrono::milliseconds kPendingSpinWindow{20};
  // How long Transfer::wait() polls before it sleeps (Options::wait_spin 0).
  static constexpr std::chrono::microseconds kWaitSpin{10000};
  // Messages up to this size are copied by the receiver when it can (match()).
  static constexpr uint64_t kPullMax = 64ull << 20;

  LocalConnection(std::shared_ptr<core::EngineContext> ctx, uint64_t id, LocalPeer peer, platform::Socket control,
                  ShmChannel channel);
  ~LocalConnection() override;
  // Starts the progress thread; kResourceExhausted if the kernel refuses it
  // (the connection is then unusable and is dropped).
  Status start();

  Transfer send_async(const void* data, size_t size) override;
  Transfer sendv_async(std::span<const ConstBuffer> parts) override;
  Transfer recv_async(void* data, size_t capacity) override;
  Transfer recvv_async(std::span<const MutableBuffer> parts) override;
  Result<uint64_t> probe(Deadline deadline) override;
  Transfer write_async(const void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
                       std::string_view notification) override;
  Transfer writev_async(std::span<const WriteItem> items, std::string_view notification) override;
  Transfer read_async(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset) override;
  Transfer readv_async(std::span<const ReadItem> items) override;
  Transfer notify_async(std::string_view message) override;
  Result<std::string> wait_notification(Deadline deadline) override;
  std::optional<std::string> poll_notification() override;
  void set_notification_listener(std::function<void()> listener) override {
    notes_.set_listener(std::move(listener));
  }
  void close() override;
  Status health() const override;
  uint64_t id() const override { return id_; }
  uint64_t peer_engine_id() const override { return peer_.engine_id; }
  std::string peer_address() const override { return peer_.address; }
  std::string_view transport_name() const override { return "local"; }
  void tick(Clock::time_point now) override;
  void region_retired(uint64_t region_id) override;

  void fail(const Status& why) override;

 private:
  using Completion = std::function<void(const Status&)>;
  struct PostedRecv {
    std::shared_ptr<TransferState> state;
    core::SegmentList dest;
  };
  struct Unexpected {
    uint64_t op = 0;
    uint64_t size = 0;
    bool eager = false;
    std::string bytes;               // eager: the message
    std::vector<SharedSpan> source;  // rendezvous: the sender's bytes
  };
  struct ExportInfo {
    uint64_t key = 0;
    uint64_t length = 0;
    std::vector<SharedSpan> spans;
  };
  // One item of a write or read, resolved locally.
  struct Item {
    core::SegmentList local;
    RemoteDescriptor remote;
    uint64_t offset = 0;
  };

  std::string where() const;
  Transfer failed(const Status& s);
  std::shared_ptr<TransferState> new_state(int parts = 1);
  Status usable() const;
  uint64_t next_id();

  // Posting messages. post() never blocks the progress thread: what does not
  // fit in the ring now waits in outbox_ (order kept); a message that could
  // never fit fails the connection, so callers check what can grow first:
  // fits() names the operation in its error.
  Status fits(std::string_view payload, const char* what) const;
  void post(const wire::FrameHeader& h, std::string_view aux = {}, std::string_view payload = {});
  bool flush_outbox();
  void expect(uint64_t id, Completion c);  // runs c on LOCAL_DONE/ACK for `id`
  void answer(uint64_t id, const Status& s);

  // Describing local memory to the peer (records what was shared per region).
  Status describe(const core::SegmentList& list, uint64_t size, std::vector<SharedSpan>& out);
  Status describe_span(const core::MemorySpan& span, std::vector<SharedSpan>& out);

  // Operations.
  Transfer post_send(core::SegmentList source);
  Transfer post_recv(core::SegmentList dest);
  void match(PostedRecv recv, Unexpected msg);
  // A message arrived: matches the oldest posted receive, or waits for one
  // (kResourceExhausted if waiting would pass connection_memory_bytes).
  Status arrive(Unexpected msg);
  // What an unmatched message costs against the budget.
  static size_t held_cost(const Unexpected& msg);
  // Copies an eager message into a receive buffer of any memory kind.
  Status copy_into(const core::SegmentList& dest, const std::string& bytes);
  // Checks and resolves write or read items (`op` names them in errors).
  template <typename Access>
  Result<std::vector<Item>> resolve_items(std::span<const Access> items, const char* op);
  void start_item(const std::shared_ptr<TransferState>& state, Item item, bool is_write);
  void run_item(const std::shared_ptr<TransferState>& state, const Item& item, const ExportInfo& info, bool is_write);
  void with_export(const RemoteDescriptor& r, std::function<void(Result<const ExportInfo*>)> then);
  void send_note(uint64_t op, uint64_t seq, bool skip, std::string_view note);

  // Progress thread.
  void progress_loop();
  // The next message from the peer's ring; false if none, or if the ring held
  // garbage (the connection then fails).
  bool next_message(std::string& msg);
  Status handle(const std::string& msg);
  Status on_rts(const wire::FrameHeader& h, std::string_view payload);
  Status on_cts(const wire::FrameHeader& h, std::string_view payload);
  Status on_open(const wire::FrameHeader& h);
  Status on_export(const wire::FrameHeader& h, std::string_view aux, std::string_view payload);
  Status on_pull_or_push(const wire::FrameHeader& h, std::string_view payload);
  Status on_revoke(const wire::FrameHeader& h, std::string_view payload);
  bool peer_gone() const;
  // The peer's process has exited (its control stream ending says only that
  // it hung up).
  bool peer_process_gone() const;
  // Posts CLOSE unless this side already did.
  void send_close();
  // Both ends of an orderly close: fails what is pending (control stream
  // left open), waits for this side's copies and refuses new ones, then
  // sends CLOSE, which tells the peer this side copies no more.
  void stop_copying(const Status& why);
  // A dereg of `region_id` on a failed connection: waits for a close under
  // way to settle, and warns if the peer may still be copying.
  void settle_after_failure(uint64_t region_id);
  // fail() that leaves the control stream open when `shutdown_control` is
  // false: an orderly close shuts it only once copies have ended.
  void fail(const Status& why, bool shutdown_control);
  // Progress thread: handles what the dead peer left in the channel, then fails.
  void peer_exited();
  bool has_pending();

  const std::shared_ptr<core::EngineContext> ctx_;
  const uint64_t id_;
  const LocalPeer peer_;
  platform::Socket control_;
  ShmChannel channel_;
  LocalCopier copier_;
  std::thread progress_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> local_work_{false};  // set with a kick(): outbox or copies to poll
  std::atomic<bool> failed_{false};
  std::atomic<bool> closed_{false};
  // The peer has stopped copying into this side's memory: it closed in
  // order (its copies ended first), or its process exited.
  std::atomic<bool> peer_quiet_{false};
  // close() has done what it can to stop both sides' copies.
  std::atomic<bool> close_settled_{false};
  std::atomic<bool> close_sent_{false};      // CLOSE goes once: a close, or the answer to the peer's
  std::atomic<bool> closed_by_peer_{false};  // the peer's CLOSE arrived: its end is orderly
  // post() found the outbox past connection_memory_bytes; the progress
  // thread fails the connection.
  std::atomic<bool> outbox_over_budget_{false};
  mutable std::mutex health_mu_;
  Status health_;                          // guarded by health_mu_
  bool channel_broken_ = false;            // progress thread (or its closer) only
  uint64_t last_peer_beats_ = 0;           // heartbeat thread only
  Clock::time_point last_peer_beat_at_{};  // heartbeat thread only

  std::mutex out_mu_;
  std::deque<std::string> outbox_;  // guarded by out_mu_: encoded messages not yet in the ring
  // outbox_.size(), read without out_mu_ by the progress thread on every
  // turn. Taking the lock there made an application thread's post wait for
  // it and then wake it (two-GPU host: an RTS took 1.75 us to post, 0.7 now).
  std::atomic<size_t> outbox_size_{0};

  // Shared while an export found in exports_ has its copy started; exclusive
  // while a revocation removes exports (see on_revoke).
  std::shared_mutex revoke_mu_;
  std::mutex mu_;
  uint64_t next_id_ = 1;                                             // guarded by mu_
  std::unordered_map<uint64_t, Completion> expected_;                // guarded by mu_: by local op id
  std::deque<PostedRecv> posted_;                                    // guarded by mu_
  std::deque<Unexpected> unexpected_;                                // guarded by mu_
  std::condition_variable arrived_;  // with mu_: a message joined unexpected_, or the connection failed
  std::unordered_map<uint64_t, core::SegmentList> pending_sources_;  // guarded by mu_: sends awaiting CTS
  std::map<std::pair<uint64_t, uint64_t>, ExportInfo> exports_;      // guarded by mu_: (export id, key) of the peer
  std::map<std::pair<uint64_t, uint64_t>, std::vector<std::function<void(Result<const ExportInfo*>)>>>
      opening_;                                           // guarded by mu_
  std::map<uint64_t, std::set<uint64_t>> shared_allocs_;  // guarded by mu_: region -> allocation bases
  std::map<uint64_t, uint64_t> shared_exports_;           // guarded by mu_: export id -> region
  std::set<uint64_t> shared_receives_;  // guarded by mu_: regions of receive buffers the peer was told to write
  uint64_t next_note_seq_ = 1;                            // guarded by mu_

  // What the peer can make this side hold (unmatched messages, control
  // messages it does not read, notifications not yet polled), against
  // Options::connection_memory_bytes.
  core::ByteBudget budget_;
  core::NotificationQueue notes_{&budget_, &ctx_->notifications};
};

}  // namespace ferry::local
