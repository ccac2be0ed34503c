// LocalTransport: a connection's transport to a peer engine on the same
// host (transport.h says what a transport does for its ConnectionCore).
//
// Control messages travel through a ShmChannel; bytes move in one copy by a
// LocalCopier on whichever side can address both ends (the sender or the
// initiator when it can, else the peer): send/recv use a rendezvous in which
// the receiver's buffer is described to the sender (CTS), which copies once;
// write/read open the peer's export once (key checked by its owner) and then
// copy directly. No data is staged. The TCP control stream of the handshake
// stays open only to notice the peer's death (the kernel closes it).
//
// Files: local_transport.cc (construction, liveness, failure),
// local_posting.cc (control messages, send and receive, notifications),
// local_one_sided.cc (writes and reads), local_progress.cc (a progress turn
// and the message handlers).
//
// Threads: none of its own. The engine's progress workers (progress_pool.h,
// one per engine by default, shared by every local connection) take turns
// serving it: a turn reads the channel, polls GPU copy events and runs the
// handlers. A turn keeps the connection "hot" (polled on every round, no
// sleep) while copies are in flight or for kSpinWindow after the last
// message (a futex or eventfd wake-up costs tens of microseconds, a local
// copy a few); after that the worker arms the channel and the peer rings
// the control stream with its next message. Large host copies go to the
// engine's copy helpers (copy_pool.h). Application threads post operations
// and may start copies themselves.
//
// Failure: a peer that exits (control stream EOF), stops beating for
// peer_timeout, or sends garbage fails every pending transfer with the
// reason; close() and the destructor take the connection out of the
// workers' hands (waiting for a turn under way). close() (the engine's
// heartbeat runs it as soon as the connection failed) also stops the
// copier (running host copies end at their next piece), closes the control
// stream and unmaps the channel, although the application may still hold
// the connection and post on it from any thread: every call that touches
// the channel holds it for its span (ShmChannel), so close() waits for
// those inside (kChannelUsersWait at most) and later ones touch nothing.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/engine_context.h"
#include "core/notification_queue.h"
#include "core/segments.h"
#include "core/transfer_state.h"
#include "gpu/gpu_kit.h"
#include "platform/mutex.h"
#include "platform/socket.h"
#include "transport/connection_core.h"
#include "transport/transport.h"
#include "transport/local/local_copier.h"
#include "transport/local/progress_pool.h"
#include "transport/local/shm_channel.h"
#include "wire/frame.h"
#include "wire/local_messages.h"
#include "wire/messages.h"

namespace ferry::local {

struct LocalPeer {
  uint64_t engine_id = 0;
  pid_t pid = 0;
  std::string address;  // the control stream's remote end, for messages
};

class LocalTransport final : public transport::Transport, private ProgressPool::Client {
 public:
  // How long the progress worker keeps polling the connection after the
  // last message: the next one usually comes within a round trip, and the
  // wake-up that sleeping would cost (tens of microseconds on a virtual
  // machine) is more than a small transfer takes.
  static constexpr std::chrono::microseconds kSpinWindow{200};
  // ... and, while operations of this connection wait on the peer, for this
  // long: the answer usually comes within a copy's time.
  static constexpr std::chrono::milliseconds kPendingSpinWindow{20};
  // A turn reads at most this many messages, and stops after kTurnBudget:
  // the other connections of the worker wait a turn, not a backlog.
  static constexpr int kTurnMessages = 64;
  static constexpr std::chrono::microseconds kTurnBudget{100};
  // How long Transfer::wait() polls before it sleeps (Options::wait_spin 0).
  static constexpr std::chrono::microseconds kWaitSpin{10000};
  // Messages up to this size are copied by the receiver when it can (match()).
  static constexpr uint64_t kPullMax = 64ull << 20;
  // How long close() waits for application threads inside a call on the
  // channel (each a copy into the ring or a wake-up: microseconds) before it
  // leaves the mapping to the destructor.
  static constexpr std::chrono::milliseconds kChannelUsersWait{1000};

  LocalTransport(transport::ConnectionHost& core, LocalPeer peer, platform::Socket control, ShmChannel channel);
  ~LocalTransport() override;

  // A started connection over a new LocalTransport (the handshake's last
  // step); kResourceExhausted if no progress worker can serve it.
  static Result<std::shared_ptr<transport::ConnectionCore>> connection(const std::shared_ptr<core::EngineContext>& ctx,
                                                                       uint64_t id, LocalPeer peer,
                                                                       platform::Socket control, ShmChannel channel);
  // "local connection 3 to 1.2.3.4:5 (engine 9f.., pid 42)".
  static std::string describe(uint64_t id, const LocalPeer& peer);

  // ---- transport.h --------------------------------------------------------
  std::string_view name() const override { return "local"; }
  // Hands the connection to the engine's progress workers (starting them
  // with the first connection); kResourceExhausted if none can start.
  Status start() override;
  // The progress worker polls while copies run, so a waiter polling too
  // costs little, and it does not oversleep a long GPU copy.
  std::chrono::microseconds wait_spin() const override { return kWaitSpin; }
  bool notes_ride_with_writes() const override { return false; }
  void start_send(const std::shared_ptr<TransferState>& state, core::SegmentList source) override;
  void start_write_batch(const std::shared_ptr<TransferState>& state, transport::WriteBatch batch,
                         std::string_view note, uint64_t note_seq) override;
  void start_write(const std::shared_ptr<TransferState>& state, transport::RemoteItem item, std::string_view note,
                   uint64_t note_seq) override;
  // GPU blocks into the peer's GPU pools, each pool one allocation the peer
  // has shown this side before: one gather launch, with no per-block walk
  // through spans (LocalCopier::start_blocks).
  bool start_pool_blocks(const std::shared_ptr<TransferState>& state, const transport::PreparedPools& pools,
                         std::span<const Block> blocks, uint64_t bytes, std::string_view note,
                         uint64_t note_seq) override;
  void start_read(const std::shared_ptr<TransferState>& state, transport::RemoteItem item) override;
  void send_note(const std::shared_ptr<TransferState>& state, uint64_t seq, std::string_view note,
                 bool caller_thread) override;
  void skip_note(uint64_t seq, std::string_view note) override;
  bool stop_write(const std::shared_ptr<TransferState>& state) override;
  Status before_stream_wait() override;
  void match(transport::PostedRecv recv, transport::ArrivedMessage msg) override;
  void refuse(const transport::ArrivedMessage& msg, const Status& why) override;
  void tick(Clock::time_point now) override;
  void region_retired(uint64_t region_id) override;
  void failed(const Status& why) override;
  void close() override;

 private:
  using Completion = std::function<void(const Status&)>;
  // A rendezvous message's bytes: the sender's memory, described.
  struct SpansSource final : transport::MessageSource {
    std::vector<SharedSpan> spans;
    size_t held_bytes() const override { return spans.size() * sizeof(SharedSpan); }
  };
  struct ExportInfo {
    uint64_t key = 0;
    uint64_t length = 0;
    std::vector<SharedSpan> spans;
  };
  using Item = transport::RemoteItem;

  const std::string& where() const { return core_.where(); }
  // A batch into one export, once the peer opened it: one copy of every
  // item (or each on its own where this side cannot copy it).
  void run_batch(const std::shared_ptr<TransferState>& state, const std::shared_ptr<transport::WriteBatch>& batch,
                 const ExportInfo& info);
  // A batch item by item; finishes one part of `state` with the last.
  void start_each(const std::shared_ptr<TransferState>& state, transport::WriteBatch batch);

  // Posting messages. post() never blocks the progress worker: what does not
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
  // Copies an eager message into a receive buffer of any memory kind.
  Status copy_into(const core::SegmentList& dest, const std::string& bytes);
  // `stop_from`: the transfer whose cancel stops the copy (null: `state`'s).
  void start_item(const std::shared_ptr<TransferState>& state, Item item, bool is_write,
                  std::shared_ptr<TransferState> stop_from = nullptr);
  void run_item(const std::shared_ptr<TransferState>& state, const Item& item, const ExportInfo& info, bool is_write,
                const std::shared_ptr<TransferState>& stop_from);
  // What a copy for `transfer` asks before it goes on: whether it was cancelled.
  static LocalCopier::StopCheck stop_check(std::shared_ptr<TransferState> transfer);
  void with_export(const RemoteDescriptor& r, std::function<void(Result<const ExportInfo*>)> then);
  // Posts notification `seq` (`op` 0: the peer confirms nothing).
  void post_note(uint64_t op, uint64_t seq, bool skip, std::string_view note);

  // Progress (ProgressPool::Client, on the engine's progress worker).
  Turn turn(bool woken, bool hung_up) override;
  bool arm() override { return channel_.arm(); }
  void disarm() override { channel_.disarm(); }
  // Asks the progress worker for a turn of this connection (outbox, copies
  // to poll, a failure to act on). Any thread.
  void kick();
  // Wakes the peer's reader after a post that found the channel armed: a
  // byte on the control stream. Never blocks.
  void ring_peer() EXCLUDES(control_mu_);
  // Reads the peer's rings off the control stream; true if it ended.
  bool drain_doorbell() EXCLUDES(control_mu_);
  // Large host copies started on a progress worker go to the copy helpers:
  // the worker must stay free for every connection's acks and notifications.
  static LocalCopier::HostCopyBy copy_by() {
    return ProgressPool::on_worker() ? LocalCopier::HostCopyBy::kHelpers : LocalCopier::HostCopyBy::kCallerAndHelpers;
  }
  // The next message from the peer's ring; false if none, or if the ring held
  // garbage (the connection then fails).
  bool next_message(std::string& msg);
  Status handle(const std::string& msg);
  Status on_rts(const wire::LocalRts& m);
  Status on_cts(const wire::LocalCts& m);
  // LOCAL_DONE, or ACK (a notification's confirmation): `id` ended with `code`.
  Status on_done(uint64_t id, uint32_t code, std::string_view reason);
  Status on_open(const wire::LocalOpen& m);
  Status on_export(const wire::LocalExport& m);
  // LOCAL_PULL (`pull`) or LOCAL_PUSH.
  Status on_copy(bool pull, const wire::LocalCopy& m);
  Status on_revoke(const wire::LocalRevoke& m);
  // Carries the oldest revocation as far as it can without blocking the
  // worker (its other connections wait meanwhile): its exports go once no
  // application thread is starting a copy from one, and the answer once
  // this side's copies ended. True once none is left; until then the turn
  // reads no further message (the peer's order is kept).
  bool finish_revokes();
  bool peer_gone() const EXCLUDES(control_mu_);
  // Shuts the control stream (both directions); its descriptor stays until close().
  void shut_control() EXCLUDES(control_mu_);
  // The peer's process has exited (its control stream ending says only that
  // it hung up).
  bool peer_process_gone() const;
  // Posts CLOSE unless this side already did.
  void send_close();
  // close(), once no progress turn can run: unmaps the channel and
  // closes its descriptor, and drops the outbox.
  void let_go_of_channel();
  // Both ends of an orderly close: fails what is pending (control stream
  // left open), waits for this side's copies and refuses new ones, then
  // sends CLOSE, which tells the peer this side copies no more.
  void stop_copying(const Status& why);
  // A dereg of `region_id` on a failed connection: waits for a close under
  // way to settle, and warns if the peer may still be copying.
  void settle_after_failure(uint64_t region_id);
  // Progress worker: handles what the dead peer left in the channel, then fails.
  void peer_exited();
  bool has_pending();

  transport::ConnectionHost& core_;
  core::EngineContext* const ctx_;
  const LocalPeer peer_;
  // The heartbeat thread shuts the control stream when it fails the
  // connection while close() may be letting go of its descriptor.
  mutable platform::Mutex control_mu_;
  platform::Socket control_ GUARDED_BY(control_mu_);
  ShmChannel channel_;  // any thread; closed by close() (what touches it then touches nothing)
  // The copier's streams, events and pinned lists, filled before a stream
  // waits on this connection (gpu/gpu_kit.h).
  const std::shared_ptr<platform::GpuKit> gpu_kit_;
  LocalCopier copier_;
  ProgressPool& progress_;                      // the engine's workers
  std::shared_ptr<ProgressPool::Entry> entry_;  // set by start() before a turn can run; constant after
  // The connection's failure leaves the control stream open: an orderly
  // close shuts it only once copies have ended (stop_copying).
  std::atomic<bool> keep_control_open_{false};
  // The peer has stopped copying into this side's memory: it closed in
  // order (its copies ended first), or its process exited.
  std::atomic<bool> peer_quiet_{false};
  // close() has done what it can to stop both sides' copies.
  std::atomic<bool> close_settled_{false};
  std::atomic<bool> close_sent_{false};  // CLOSE goes once: a close, or the answer to the peer's
  // post() found the outbox past connection_memory_bytes; the progress
  // worker fails the connection.
  std::atomic<bool> outbox_over_budget_{false};
  bool channel_broken_ = false;            // progress turns (or the closer) only
  Clock::time_point last_activity_{};      // progress turns only
  struct Revocation {
    uint64_t id = 0;                // the peer's message, answered once done
    std::vector<uint64_t> exports;  // the peer's exports to forget...
    std::vector<uint64_t> allocs;   // ...and GPU allocations to close
    bool exports_gone = false;
  };
  std::deque<Revocation> revocations_;  // progress turns only
  uint64_t last_peer_beats_ = 0;           // heartbeat thread only
  Clock::time_point last_peer_beat_at_{};  // heartbeat thread only

  platform::Mutex out_mu_;
  std::deque<std::string> outbox_ GUARDED_BY(out_mu_);  // encoded messages not yet in the ring
  // outbox_.size(), read without out_mu_ by the progress worker on every
  // turn. Taking the lock there made an application thread's post wait for
  // it and then wake it (two-GPU host: an RTS took 1.75 us to post, 0.7 now).
  std::atomic<size_t> outbox_size_{0};

  // Shared while an export found in exports_ has its copy started; exclusive
  // while a revocation removes exports (see on_revoke).
  platform::SharedMutex revoke_mu_;
  platform::Mutex mu_;
  std::unordered_map<uint64_t, Completion> expected_ GUARDED_BY(mu_);                // by local op id
  std::unordered_map<uint64_t, core::SegmentList> pending_sources_ GUARDED_BY(mu_);  // sends awaiting CTS
  std::map<std::pair<uint64_t, uint64_t>, ExportInfo> exports_ GUARDED_BY(mu_);      // (export id, key) of the peer
  std::map<std::pair<uint64_t, uint64_t>, std::vector<std::function<void(Result<const ExportInfo*>)>>>
      opening_ GUARDED_BY(mu_);
  std::map<uint64_t, std::set<uint64_t>> shared_allocs_ GUARDED_BY(mu_);  // region -> allocation bases
  std::map<uint64_t, uint64_t> shared_exports_ GUARDED_BY(mu_);           // export id -> region
  std::set<uint64_t> shared_receives_ GUARDED_BY(mu_);  // regions of receive buffers the peer was told to write
};

}  // namespace ferry::local
