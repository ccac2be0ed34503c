// TcpConnection: a Connection over one control stream and N data streams
// (paths) to one peer engine.
//
// Threads, all named after the connection (c<id>):
//   ferry-c<id>-ctl-rx   reads the control stream: matching, acks, inline data
//   ferry-c<id>-ctl-tx   writes replies and heartbeats queued by other threads,
//                        so that no reader ever blocks on a write (two engines
//                        reading and writing each other cannot deadlock)
//   ferry-c<id>-p<k>-tx  claims chunks from the ChunkQueue and sends them
//   ferry-c<id>-p<k>-rx  lands incoming chunks straight into registered memory
// Application threads post operations and write their own control frames
// (eager sends, requests) directly, in posting order.
//
// GPU memory: a path's workers stage chunks of device memory through their
// own pinned slots (staging_pipeline.h), created on the first such chunk and
// freed when the worker ends, with copies run by a small kernel
// (staging_kernel.h) or the copy engines (Options::staging_copy): the
// transmit worker copies chunks device->host ahead of the socket, claiming
// the next once its oldest chunk's copy is done; the receive worker reads
// into slots and copies on to the device, and counts (and confirms) a chunk
// as landed only once that copy finished. Small GPU payloads on the control
// stream are copied synchronously through the connection's control copier.
// Host memory keeps the zero-copy path.
//
// Failure: the first error on any stream, a CLOSE from the peer, or heartbeat
// silence calls fail(): every socket is shut down (which wakes every blocked
// thread), and every pending transfer finishes with the reason. The last
// worker to end closes the sockets and gives the connection's admission back
// (a failed connection the application still holds keeps neither threads nor
// descriptors). close() and the destructor join the threads.
//
// What the peer makes it hold: messages nobody posted a receive for,
// notifications not yet taken, replies the peer does not read and state of
// incoming chunks count against Options::connection_memory_bytes; past it
// the connection fails with kResourceExhausted. While the replies alone pass
// a quarter of it (the peer is not reading), the reader threads stop reading
// more requests; if the peer reads nothing for peer_timeout, the connection
// fails.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/engine_context.h"
#include "core/notification_queue.h"
#include "core/segments.h"
#include "core/transfer_state.h"
#include "ferry/engine.h"
#include "platform/socket.h"
#include "transport/connection_base.h"
#include "transport/tcp/chunk_arrivals.h"
#include "transport/tcp/chunk_queue.h"
#include "transport/tcp/staging_pipeline.h"
#include "wire/frame.h"

namespace ferry::tcp {

struct PeerInfo {
  uint64_t engine_id = 0;
  std::string host_id;
  std::string address;  // "ip:port" of the control stream's remote end
};

// What a data stream connects, for logs and CPU binding.
struct PathInfo {
  std::string nic;   // local interface ("" when unknown)
  std::string name;  // "eth1 10.0.0.1 -> 10.0.0.2:7000"
};

class TcpConnection final : public ConnectionBase, public std::enable_shared_from_this<TcpConnection> {
 public:
  // `ticket`: the connection's admission, given back once it no longer holds
  // threads or descriptors (may be null).
  TcpConnection(std::shared_ptr<core::EngineContext> ctx, uint64_t id, PeerInfo peer, platform::Socket control,
                std::vector<platform::Socket> data, std::vector<PathInfo> paths,
                std::unique_ptr<core::Admission::Ticket> ticket = nullptr);
  ~TcpConnection() override;

  // Starts the worker threads. Called once, right after construction.
  // kResourceExhausted, naming the thread, if one could not start; the
  // caller then close()s the connection, which ends those that did.
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
  std::string_view transport_name() const override { return "tcp"; }

  // Heartbeat duty, called periodically by the engine: declares the peer lost
  // after peer_timeout of silence, queues a heartbeat after heartbeat_interval
  // without control traffic.
  void tick(Clock::time_point now) override;

  // Fails the connection with `why` (first call wins). Any thread.
  void fail(const Status& why) override;

  // Data paths still carrying traffic.
  int live_paths() const { return chunks_.live_paths(); }

 private:
  // A receive waiting for its message.
  struct PostedRecv {
    std::shared_ptr<TransferState> state;
    core::SegmentList dest;
  };
  // A message that arrived before its receive was posted.
  struct Unexpected {
    uint64_t op = 0;
    uint64_t size = 0;
    bool rendezvous = false;  // RTS: data still at the sender
    std::string bytes;        // eager: the message
  };
  // Where DATA frames for a token land (a matched receive, or a read).
  struct Landing {
    std::shared_ptr<TransferState> state;
    core::SegmentList dest;
    uint64_t size = 0;
    uint64_t reply_op = 0;  // receive: the sender's op to acknowledge; 0 for a read
    std::mutex mu;
    ChunkArrivals arrivals;  // guarded by mu
    Status error;            // guarded by mu
    // Guarded by mu: the connection failed while chunks were still being
    // written into `dest`; the last of them finishes the operation.
    bool orphaned = false;
    size_t charged = 0;  // guarded by mu: budget its chunks' records hold
  };
  // A write arriving from the peer, counted until all its bytes landed.
  struct IncomingWrite {
    ChunkArrivals arrivals;  // by export offset
    std::string notification;
    uint64_t note_seq = 0;  // its place among the notifications (0: none)
    Status error;
    size_t charged = 0;  // budget it holds
  };
  // A frame queued for the control-transmit thread.
  struct Outgoing {
    wire::FrameHeader header;
    std::string aux;
    std::shared_ptr<OutOp> payload_op;  // payload = all of this op's source bytes
    size_t charged = 0;                 // budget it holds while queued
  };
  // What the connection holds on its peer's behalf, and the part of it held
  // by replies waiting to go out. Shared with the read replies in the chunk
  // queue, which give their part back when they go. Thread-safe.
  struct Held {
    explicit Held(size_t limit) : budget(limit), reply_cap(limit / 4) {}
    bool take_reply(size_t n);
    void give_reply(size_t n);
    core::ByteBudget budget;
    const size_t reply_cap;
    std::atomic<size_t> replies{0};
    std::mutex mu;                 // orders a paused reader's check before a wake-up
    std::condition_variable room;  // replies fell to reply_cap, or the connection failed
  };
  // One read reply's part of Held, given back when the reply goes.
  class ReplyHold {
   public:
    ReplyHold(std::shared_ptr<Held> held, size_t bytes) : held_(std::move(held)), bytes_(bytes) {}
    ReplyHold(const ReplyHold&) = delete;
    ReplyHold& operator=(const ReplyHold&) = delete;
    ~ReplyHold() { held_->give_reply(bytes_); }

   private:
    const std::shared_ptr<Held> held_;
    const size_t bytes_;
  };

  std::string where() const;  // "connection 3 to 1.2.3.4:5 (engine 9f..)"
  // kResourceExhausted: `what` would pass connection_memory_bytes.
  Status exhausted(const std::string& what) const;
  // Fails the connection with `why` and returns it (for a reader whose loop
  // would take any other error for its stream's end). Never under mu_.
  Status fail_with(const Status& why);
  // Blocks a reader while the replies queued for the peer are over their cap
  // (reading more requests would only queue more); kResourceExhausted once
  // they stayed over it for peer_timeout.
  Status await_reply_room();
  // A worker thread (or start()) is done with the sockets; the last one,
  // once the connection failed, closes them.
  void worker_done();
  // Closes every socket and gives the admission back; idempotent. Only when
  // no worker is left to use the sockets.
  void release_sockets();
  Transfer failed(const Status& s);
  std::shared_ptr<TransferState> new_state(int parts = 1);
  Status usable() const;

  // Posting helpers.
  Transfer post_send(core::SegmentList source);
  Transfer post_recv(core::SegmentList dest);
  Status check_remote(const RemoteDescriptor& r, uint64_t offset, uint64_t size, const char* op) const;
  // `note_seq`: the notification's sequence number (0: none with this item).
  void post_write(const std::shared_ptr<TransferState>& state, core::SegmentList source, const RemoteDescriptor& remote,
                  uint64_t offset, std::string notification, uint64_t note_seq);
  void post_read(const std::shared_ptr<TransferState>& state, core::SegmentList dest, const RemoteDescriptor& remote,
                 uint64_t offset);

  // Writing on the control stream.
  Status write_control(const wire::FrameHeader& h, std::string_view aux, const core::SegmentList* payload);
  void queue_control(Outgoing out);
  void ack(uint64_t op, const Status& s, uint8_t flags = 0);

  // Threads.
  void control_rx_loop();
  void control_tx_loop();
  void path_tx_loop(int path);
  // Pins the calling worker of `path` to its NIC's CPUs and logs expected and
  // actual CPU sets.
  void pin_worker(int path, const char* role, const std::string& thread);
  void path_rx_loop(int path);
  // A claimed chunk on its way out of a path: staged (its copies queued) or
  // not, or aborted (its memory vanished or could not be staged).
  struct TxEntry {
    Chunk chunk;
    std::shared_ptr<core::ChunkAccess> access;  // held until sent
    bool staging = false;
    TxStager::Staged staged;
    Status abort;  // not OK: send an aborted frame and fail the transfer
  };
  void prepare_chunk(TxEntry& e, std::unique_ptr<TxStager>& stager);
  // Waits for a staged chunk's copies (a failure aborts the chunk).
  void await_staging(TxEntry& e, TxStager* stager);
  // Sends a chunk (staged: after await_staging).
  Status transmit_chunk(int fd, TxEntry& e, TxStager* stager);

  // Frame handlers; `fd` is the stream the frame's payload follows on.
  Status handle_frame(int fd, int path, const wire::FrameHeader& h, std::string& aux);
  Status land_data(int fd, int path, const wire::FrameHeader& h);
  // Records `op` among the recently finished writes (caller holds mu_).
  void remember_finished_write(uint64_t op);
  Status land_write(int fd, int path, const wire::FrameHeader& h, std::string& aux);
  // A chunk of a landing or a write that began arriving on `path` and was
  // never accounted (its path broke off): it no longer holds the operation.
  // `conn` is null once the connection is being destroyed: the landing then
  // finishes without it.
  static void landing_chunk_abandoned(TcpConnection* conn, uint64_t token, const std::shared_ptr<Landing>& l,
                                      uint64_t offset, int path);
  void write_chunk_abandoned(uint64_t op, uint64_t offset, int path);
  // Queues a finished write's notification and acknowledges it.
  Status complete_write(uint64_t op, IncomingWrite& done);
  // The peer resent the chunk at `offset` on `path` while `stalled` was still
  // bringing it: the peer gave `stalled` up, and so does this side.
  void give_up_stalled_path(int stalled, int path, uint64_t offset);
  // How a frame's bytes are accounted once they are in place (or failed to land).
  using Landed = std::function<Status(const Status& landed)>;
  // Reads [offset, offset+size) of `dest` from `fd` into place — host memory
  // directly, GPU memory through the path's staging (or synchronously on the
  // control stream, path < 0) — then runs `landed`, in order with the path's
  // earlier frames. `gone` is the message when the memory was deregistered.
  Status receive_payload(int fd, int path, const core::SegmentList& dest, uint64_t offset, uint64_t size,
                         const std::string& gone, Landed landed);
  // Runs `fn` now, or behind the path's frames still being copied.
  Status after_earlier(int path, std::function<Status()> fn);
  // Counts a frame landed on `path` and confirms it when asked (CHUNK_ACK).
  Status count_landed(int path, bool ack_request);

  // ---- staging ----
  // The pieces of [offset, offset+size) of `list`, marked staged where they
  // cannot meet a socket directly.
  void pieces_of(const core::SegmentList& list, uint64_t offset, uint64_t size, std::vector<Piece>& out) const;
  bool stages(const core::SegmentList& list) const;
  // Chunk size for an operation on `list` over the paths in the mask `paths`
  // (0: every path); 0 means the queue's default.
  uint64_t chunk_for(const core::SegmentList& list, uint64_t paths) const;
  // A copier for staging through pinned slots: the test hooks' if set, else
  // CUDA's with the copy kernel.
  std::unique_ptr<Copier> new_copier() const;
  // The copier of exchange(), whose buffers are ordinary (pageable) memory:
  // the copy engines only, since the kernel can reach pinned memory alone.
  std::unique_ptr<Copier> new_control_copier() const;
  // Copies every piece to (`to_buffer`) or from `buffer`, which holds their
  // bytes back to back, and waits: the control stream's GPU payloads.
  Status exchange(std::span<const Piece> pieces, uint8_t* buffer, bool to_buffer);
  // copy_in that understands GPU memory.
  Status copy_in(const core::SegmentList& dest, const uint8_t* src, uint64_t size);
  Status handle_eager(int fd, const wire::FrameHeader& h);
  Status handle_rts(const wire::FrameHeader& h);
  Status handle_cts(const wire::FrameHeader& h);
  Status handle_ack(const wire::FrameHeader& h, std::string& aux);
  // A path released the last chunk of `op`, whose ACK was held for it.
  void finish_acknowledged(const OutOp& op);
  Status handle_read_req(const wire::FrameHeader& h);
  Status handle_notify(const wire::FrameHeader& h, std::string& aux);
  Status drain(int fd, uint64_t n);
  // The paths a bulk transfer of `source` may use (Options::nic_policy).
  uint64_t paths_for(const core::SegmentList& source) const;
  // A data path failed: its unconfirmed chunks move to the others; the
  // connection fails only when no path is left.
  void path_failed(int path, const Status& why);

  // Matching a message with a receive.
  void match_rendezvous(PostedRecv recv, uint64_t op, uint64_t size);
  void finish_landing(uint64_t token, const std::shared_ptr<Landing>& l);
  void complete_recv_now(PostedRecv& recv, uint64_t op, uint64_t size, const std::string& bytes);
  // Notifications keep posting order: each takes a sequence number when
  // posted (a write's with the write); the receiver queues them in that
  // order (notes_.push_numbered); a write that fails sends a skip for its number.
  uint64_t next_note_seq();
  void skip_note(uint64_t seq);

  const std::shared_ptr<core::EngineContext> ctx_;
  const uint64_t id_;
  const PeerInfo peer_;
  platform::Socket control_;
  std::vector<platform::Socket> data_;
  const std::vector<PathInfo> paths_;
  std::vector<int> path_nodes_;  // NUMA node of each path's NIC (-1 unknown)
  std::unique_ptr<std::atomic<bool>[]> path_dead_;
  ChunkQueue chunks_;

  std::vector<std::thread> threads_;
  // Workers that may still use the sockets, plus start() until it returns.
  std::atomic<int> workers_{1};
  // Serialises shutting sockets down with closing them: a descriptor number
  // closed here may be reused at once by anything else in the process.
  std::mutex sockets_mu_;
  bool sockets_closed_ = false;  // guarded by sockets_mu_ (and control_write_mu_ for the control stream)
  std::unique_ptr<core::Admission::Ticket> ticket_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> closed_{false};
  std::atomic<bool> closed_by_peer_{false};  // an orderly CLOSE arrived: not worth a warning
  mutable std::mutex health_mu_;
  Status health_;  // guarded by health_mu_
  // Every data path was closed in order by the peer at this time (0: not):
  // the control stream gets kControlGraceNs to deliver what precedes its end.
  std::atomic<int64_t> paths_closed_ns_{0};
  Status all_paths_down_;  // guarded by health_mu_; why, once no path is left
  static constexpr int64_t kControlGraceNs = 500'000'000;

  std::atomic<int64_t> last_rx_ns_{0};
  std::atomic<int64_t> last_tx_ns_{0};

  std::mutex control_write_mu_;  // serialises frames on the control stream

  std::mutex out_mu_;
  std::condition_variable out_cv_;
  std::deque<Outgoing> out_;                // guarded by out_mu_
  bool out_stopped_ = false;                // guarded by out_mu_
  bool out_writing_ = false;                // guarded by out_mu_: the control-transmit thread holds a frame
  std::condition_variable out_drained_cv_;  // out_ empty and nothing being written

  // Operations and matching state.
  std::mutex mu_;
  uint64_t next_op_ = 1;                                                  // guarded by mu_
  std::unordered_map<uint64_t, std::shared_ptr<TransferState>> pending_;  // guarded by mu_: awaiting ACK
  std::unordered_map<uint64_t, std::shared_ptr<OutOp>> awaiting_cts_;     // guarded by mu_
  // Bulk sends (after CTS) and writes on their way, by op: an ACK that
  // claims bytes this side has not sent yet is a protocol violation, and one
  // that comes while a path still sends a chunk of it completes the op only
  // once that path is done (ChunkQueue::acknowledge).
  std::unordered_map<uint64_t, std::weak_ptr<OutOp>> sending_;       // guarded by mu_
  std::deque<PostedRecv> posted_;                                    // guarded by mu_
  std::deque<Unexpected> unexpected_;                                // guarded by mu_
  std::condition_variable arrived_;  // with mu_: a message joined unexpected_, or the connection failed
  std::unordered_map<uint64_t, std::shared_ptr<Landing>> landings_;  // guarded by mu_
  std::unordered_map<uint64_t, IncomingWrite> incoming_;             // guarded by mu_
  // Writes finished recently, so a chunk resent after a path died is dropped
  // instead of landing again over newer data.
  std::unordered_set<uint64_t> finished_writes_;  // guarded by mu_ (aborted ones too)
  std::deque<uint64_t> finished_order_;           // guarded by mu_
  std::vector<uint64_t> landed_chunks_;           // per path; only its rx thread

  const StagingHooks hooks_;
  const std::shared_ptr<StagingKernels> kernels_;    // the copy kernel (null: copy engines only)
  std::vector<std::unique_ptr<RxStager>> rx_stage_;  // per path; only its rx thread
  std::mutex control_copy_mu_;                       // serialises the control copier
  std::unique_ptr<Copier> control_copier_;           // guarded by control_copy_mu_; made on first use

  const std::shared_ptr<Held> held_;
  core::NotificationQueue notes_;  // counts against held_->budget
  uint64_t next_note_seq_ = 1;     // guarded by mu_
};

}  // namespace ferry::tcp
