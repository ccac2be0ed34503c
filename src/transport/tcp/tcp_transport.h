// TcpTransport: a connection's transport over one control stream and N data
// streams (paths) to one peer engine (transport.h says what a transport
// does for its ConnectionCore).
//
// Files: tcp_transport.cc (threads, liveness, failure), tcp_posting.cc
// (outbound operations), tcp_control.cc (the control stream, both ways, and
// its frames), tcp_landing.cc (inbound chunks into registered memory, and
// dedupe of resent ones), tcp_path_reader.cc (each path's receive loop, a
// chunk's bytes received in place or staged), tcp_path_workers.cc (path
// workers, NIC choice, CPU pinning), tcp_staging_glue.cc (GPU memory through
// the staging copies).
//
// Threads: none of its own. Its streams are served by the engine's data
// plane (io_pool.h): fixed workers per NIC and direction, each running many
// streams' loops as fibers (platform/fiber_worker.h) over one epoll set, so
// that an engine's threads do not grow with its peers. Per connection:
//   control reader   (an rx worker of path 0's NIC) reads the control
//                    stream: matching, acks, inline data
//   path k reader    (an rx worker of path k's NIC) lands incoming chunks
//                    straight into registered memory
//   control writer   (a tx worker of path 0's NIC) writes the frames queued
//                    by other threads (replies, heartbeats)
//   path k writer    (a tx worker of path k's NIC) claims chunks from the
//                    ChunkQueue and sends them
// A fiber never blocks its worker on a socket: a read that finds nothing, or
// a write that finds no room, parks the fiber until epoll says the socket is
// ready, and a fiber that moved a quantum of bytes (kTurnQuantum) yields to
// the worker's other streams: one connection's gigabyte does not hold up
// another's four kilobytes. Its place in a frame (a header half read, a
// payload half landed) is its own stack.
// The control writer exists so that no reader ever blocks on a write (two
// engines reading and writing each other cannot deadlock); a fiber that
// finds the control stream taken by an application thread parks until it
// is free, never holding its worker.
// Application threads post operations and write their own control frames
// (eager sends, requests) directly, in posting order: a send_async of an
// inline message blocks while the control stream's socket drains.
//
// GPU memory: a path's reader and writer stage chunks of device memory through their
// own pinned slots (staging_pipeline.h), created on the first such chunk and
// freed when the loop ends (no thread of their own), with copies run by a small kernel
// (staging_kernel.h) or the copy engines (Options::staging_copy): the
// transmit worker copies chunks device->host ahead of the socket, claiming
// the next once its oldest chunk's copy is done; the receive worker reads
// into slots and copies on to the device, and counts (and confirms) a chunk
// as landed only once that copy finished. Small GPU payloads on the control
// stream are copied synchronously through the connection's control copier.
// Host memory keeps the zero-copy path.
//
// Failure: the first error on any stream, a CLOSE from the peer, or heartbeat
// silence fails the connection (ConnectionCore::fail, then failed() here):
// every socket is shut down (which wakes every blocked thread and parked
// fiber), and every pending transfer finishes with the reason. The last
// stream loop to end closes the sockets and gives the connection's admission
// back (a failed connection the application still holds keeps neither
// threads, fibers nor descriptors). close() waits for them all.
//
// What the peer makes it hold: messages nobody posted a receive for,
// notifications not yet taken, replies the peer does not read and state of
// incoming chunks count against Options::connection_memory_bytes; past it
// the connection fails with kResourceExhausted. While the replies alone pass
// a quarter of it (the peer is not reading), the readers stop reading more
// requests (their fibers park; epoll is not asked for the socket again until
// room returns); if the peer reads nothing for peer_timeout, the connection
// fails.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
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
#include "gpu/gpu_kit.h"
#include "platform/fiber_worker.h"
#include "platform/mutex.h"
#include "platform/socket.h"
#include "transport/connection_core.h"
#include "transport/tcp/chunk_arrivals.h"
#include "transport/tcp/chunk_queue.h"
#include "transport/tcp/staging_pipeline.h"
#include "transport/transport.h"
#include "wire/frame.h"
#include "wire/messages.h"

namespace ferry::tcp {

struct PeerInfo {
  uint64_t engine_id = 0;
  std::string host_id;
  std::string address;                                 // "ip:port" of the control stream's remote end
  uint16_t protocol_version = wire::kProtocolVersion;  // the one the handshake chose
};

// What a data stream connects, for logs and CPU binding.
struct PathInfo {
  std::string nic;   // local interface ("" when unknown)
  std::string name;  // "eth1 10.0.0.1 -> 10.0.0.2:7000"
};

class TcpTransport final : public transport::Transport {
 public:
  // `ticket`: the connection's admission, given back once it no longer holds
  // threads or descriptors (may be null).
  TcpTransport(transport::ConnectionHost& core, PeerInfo peer, platform::Socket control,
               std::vector<platform::Socket> data, std::vector<PathInfo> paths,
               std::unique_ptr<core::Admission::Ticket> ticket = nullptr);
  ~TcpTransport() override;

  // A connection over a new TcpTransport, not started yet (its start()
  // staffs it; on failure the caller refuses the peer, then closes it).
  static std::shared_ptr<transport::ConnectionCore> connection(const std::shared_ptr<core::EngineContext>& ctx,
                                                               uint64_t id, PeerInfo peer, platform::Socket control,
                                                               std::vector<platform::Socket> data,
                                                               std::vector<PathInfo> paths,
                                                               std::unique_ptr<core::Admission::Ticket> ticket);
  // "connection 3 to 1.2.3.4:5 (engine 9f..)".
  static std::string describe(uint64_t id, const PeerInfo& peer);

  // ---- transport.h --------------------------------------------------------
  std::string_view name() const override { return "tcp"; }
  Status start() override;
  std::chrono::microseconds wait_spin() const override { return TransferState::kSpinBeforeSleep; }
  bool notes_ride_with_writes() const override { return true; }
  void start_send(const std::shared_ptr<TransferState>& state, core::SegmentList source) override;
  void start_write_batch(const std::shared_ptr<TransferState>& state, transport::WriteBatch batch,
                         std::string_view note, uint64_t note_seq) override;
  bool start_pool_blocks(const std::shared_ptr<TransferState>& state, const transport::PreparedPools& pools,
                         std::span<const Block> blocks, uint64_t bytes, std::string_view note,
                         uint64_t note_seq) override;
  void start_write(const std::shared_ptr<TransferState>& state, transport::RemoteItem item, std::string_view note,
                   uint64_t note_seq) override;
  void start_read(const std::shared_ptr<TransferState>& state, transport::RemoteItem item) override;
  void send_note(const std::shared_ptr<TransferState>& state, uint64_t seq, std::string_view note,
                 bool caller_thread) override;
  void skip_note(uint64_t seq, std::string_view note) override;
  bool stop_write(const std::shared_ptr<TransferState>& state) override;
  bool stop_landing(const std::shared_ptr<TransferState>& state) override;
  Status before_stream_wait() override;
  void match(transport::PostedRecv recv, transport::ArrivedMessage msg) override;
  void refuse(const transport::ArrivedMessage& msg, const Status& why) override;
  // Declares the peer lost after peer_timeout of silence, or after
  // peer_timeout in which the peer engine moved nothing of what it owes
  // (heartbeats prove it alive, not that an operation moves); shuts a data
  // path whose frame stalled mid-way for peer_timeout; queues a heartbeat
  // after heartbeat_interval without control traffic. With a peer of
  // protocol 6 or later, silence counts and heartbeats go only while this
  // side waits on the peer (waits_on_peer); a quiet connection costs no
  // frames, and the kernel's keepalive watches it.
  void tick(Clock::time_point now) override;
  void failed(const Status& why) override;
  void close() override;

 private:
  // Where DATA frames for a token land (a matched receive, or a read).
  struct Landing {
    Landing(std::shared_ptr<TransferState> s, core::SegmentList d, uint64_t n, uint64_t reply, int64_t owed)
        : state(std::move(s)), dest(std::move(d)), size(n), reply_op(reply), owed_since_ns(owed), arrivals(n) {}
    const std::shared_ptr<TransferState> state;
    const core::SegmentList dest;
    const uint64_t size;
    const uint64_t reply_op;  // receive: the sender's op to acknowledge; 0 for a read
    // A receive: when the peer engine began to owe its data (the CTS); 0
    // for a read, which pending_ follows.
    const int64_t owed_since_ns;
    platform::Mutex mu;
    ChunkArrivals arrivals GUARDED_BY(mu);
    Status error GUARDED_BY(mu);
    // The connection failed while chunks were still being written into
    // `dest`; the last of them finishes the operation.
    bool orphaned GUARDED_BY(mu) = false;
    // This side's application stopped it (stop_landing): a receive's sender
    // is told with `error`.
    bool stopped_here GUARDED_BY(mu) = false;
    size_t charged GUARDED_BY(mu) = 0;  // budget its chunks' records hold
  };
  // A write arriving from the peer, counted until all its bytes landed.
  struct IncomingWrite {
    ChunkArrivals arrivals;  // by export offset
    std::string notification;
    uint64_t note_seq = 0;  // its place among the notifications (0: none)
    Status error;
    size_t charged = 0;  // budget it holds
  };
  // A frame queued for the control writer.
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
    explicit Held(std::shared_ptr<core::ByteBudget> b) : budget(std::move(b)), reply_cap(budget->limit() / 4) {}
    bool take_reply(size_t n);
    void give_reply(size_t n);
    const std::shared_ptr<core::ByteBudget> budget;  // the connection's
    const size_t reply_cap;
    std::atomic<size_t> replies{0};
    platform::Mutex mu;            // orders a paused reader's check before a wake-up
    std::condition_variable room;  // replies fell to reply_cap, or the connection failed
    platform::WaitList parked;     // readers' fibers waiting for the same
    // Wakes every paused reader, thread or fiber.
    void wake() {
      {
        platform::MutexLock lock(mu);
        room.notify_all();
      }
      parked.wake_all();
    }
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

  const std::string& where() const { return core_.where(); }
  // Fails the connection with `why` and returns it (for a reader whose loop
  // would take any other error for its stream's end). Never under send_mu_ or receive_mu_.
  Status fail_with(const Status& why);
  // What a reader checks before each frame: blocks it while the replies
  // queued for the peer are over their cap (reading more requests would only
  // queue more); kResourceExhausted once they stayed over it for
  // peer_timeout; the connection's failure once it failed (nothing more is
  // taken from the peer).
  Status await_reply_room();
  // A worker thread (or start()) is done with the sockets; the last one,
  // once the connection failed, closes them.
  void worker_done();
  // Closes every socket and gives the admission back; idempotent. Only when
  // no worker is left to use the sockets.
  void release_sockets();
  // Records `state` as waiting for the peer's answer to `op` (and `cts` as
  // waiting for its clear-to-send, `landing` for its data); `owed`: the
  // peer engine owes the answer from now (PendingOp). False, recording
  // nothing, once the connection failed.
  bool await_answer(uint64_t op, const std::shared_ptr<TransferState>& state, bool owed,
                    std::shared_ptr<OutOp> cts = nullptr, std::shared_ptr<Landing> landing = nullptr);
  // Something of this connection's waits on the peer: a posted receive, an
  // operation awaiting its answer, data awaited.
  bool waits_on_peer() EXCLUDES(send_mu_, receive_mu_);
  // A peer waiting on this side asked for a heartbeat: one, unless one was
  // sent for it in the last half heartbeat_interval (a peer asking faster
  // gets no more).
  void answer_heartbeat();
  // What tick checks of the peer engine's progress: a failure once an
  // operation it owes moved nothing for peer_timeout, else OK.
  Status check_owed(int64_t now_ns);
  // After `op`'s frame was written with result `s`: a local failure (not
  // the connection's) ends `state` (`whole`) or its part.
  void written_or_failed(uint64_t op, const Status& s, const std::shared_ptr<TransferState>& state, bool whole);
  // Lists write `op` as sending and hands its chunks to the paths; fails
  // one part of its state if the queue stopped.
  void queue_chunks(uint64_t op, std::shared_ptr<OutOp> out);

  // Takes control_write_mu_: in a worker's fiber, parks until it is free
  // (an application thread may hold it while its own write waits for the
  // peer to read); elsewhere, blocks.
  void lock_control() ACQUIRE(control_write_mu_);
  // Releases it and wakes the fibers parked for it.
  void unlock_control() RELEASE(control_write_mu_);
  // Takes control_write_mu_ if it comes free within 100 ms (tried once a
  // millisecond: ThreadSanitizer does not follow the clock-based lock behind
  // std::timed_mutex and reports each of its unlocks as an error).
  bool try_lock_control_stream() TRY_ACQUIRE(true, control_write_mu_);

  // Writing on the control stream: the header, `aux`, then `prefix` and
  // `payload` as the frame's payload.
  Status write_control(const wire::FrameHeader& h, std::string_view aux, const core::SegmentList* payload,
                       std::string_view prefix = {});
  void queue_control(Outgoing out);
  void ack(uint64_t op, const Status& s);

  // Runs `loop` in a fiber on `worker`, counted among the workers that may
  // use the sockets. kResourceExhausted when its stack cannot be had.
  Status spawn(platform::FiberWorker& worker, std::function<void()> loop);
  // Waits until every fiber of this connection ended, but the caller's own
  // when it is one (then false); runs the worker's other fibers meanwhile
  // when called on a worker.
  bool await_fibers();

  // Stream loops.
  void control_rx_loop();
  void control_tx_loop();
  void path_tx_loop(int path);
  void path_rx_loop(int path);
  // A claimed chunk on its way out of a path: staged (its copies queued) or
  // not, or aborted (its memory vanished or could not be staged).
  struct TxEntry {
    Chunk chunk;
    std::shared_ptr<core::ChunkAccess> access;  // held until sent
    bool staging = false;
    TxStager::Staged staged;
    Status abort;              // not OK: send an aborted frame and fail the transfer
    std::string table;         // a batched write's chunk: its block table
    core::SegmentList source;  // a chunk of a batch over pools: its local bytes
  };
  void prepare_chunk(TxEntry& e, std::unique_ptr<TxStager>& stager);
  // Whether `stager` has a slot for the next chunk of `path`, after the
  // peer's confirmations so far; with `wait`, blocks for the confirmation
  // that frees one (false once stopped or once the path failed).
  bool slot_free(int path, TxStager& stager, bool wait);
  // Waits for a staged chunk's copies (a failure aborts the chunk).
  void await_staging(TxEntry& e, TxStager* stager);
  // Sends a chunk (staged: after await_staging).
  Status transmit_chunk(int fd, TxEntry& e, TxStager* stager);

  // Frame handlers; `fd` is the stream the frame's payload follows on.
  // The control stream's frames (bulk ones inline among them go to land_frame).
  Status handle_control_frame(int fd, const wire::FrameHeader& h, std::string& aux);
  // DATA and WRITE, from data path `path` or (-1) the control stream; any
  // other frame there is a protocol violation.
  Status land_frame(int fd, int path, const wire::FrameHeader& h, std::string& aux);
  Status land_data(int fd, int path, const wire::DataChunk& m);
  // Records `op` among the recently finished writes.
  void remember_finished_write(uint64_t op) REQUIRES(receive_mu_);
  // What this side answers a write its initiator aborted, once none of it lands.
  Status aborted_by_initiator(uint64_t op);
  // A WRITE chunk (its notification is `note`, which this takes).
  Status land_write(int fd, int path, const wire::WriteChunk& m, std::string& note);
  // What the write's records say of a chunk, and what they now hold.
  struct WriteAdmission {
    bool land = false;          // its bytes go into the memory
    int stalled_path = -1;      // a path still bringing this chunk, which the peer gave up
    bool over = false;          // its records would pass connection_memory_bytes
    Status refused;             // the write is refused at its first chunk: drained and answered
    Status violation;           // the peer contradicts itself: the connection fails
    bool answer_abort = false;  // aborted and none of it lands any more: answer it
    uint64_t aborted_seq = 0;   // ... and tell its notification (this number) as not delivered
    std::string aborted_note;
  };
  WriteAdmission admit_write_chunk(const wire::WriteChunk& m, const std::string& note, const Status& resolved, int path)
      EXCLUDES(send_mu_, receive_mu_);
  // Where a landed chunk of a write was, for its accounting.
  struct WriteChunkLanded {
    uint64_t offset = 0;
    uint64_t note_seq = 0;
    uint64_t bytes = 0;
  };
  // Receives an admitted chunk's `bytes` into `dest` (or drains them when
  // `resolved` failed) and accounts it once they are in place.
  Status land_write_bytes(int fd, int path, const wire::WriteChunk& m, uint64_t bytes, std::string note,
                          core::SegmentList dest, const Status& resolved);
  // A chunk's bytes are in place (or `landed` says why not): the write ends
  // with its last chunk.
  Status account_write_chunk(uint64_t op, const WriteChunkLanded& chunk, int path, std::string note,
                             const Status& landed) EXCLUDES(send_mu_, receive_mu_);
  // A batched write's chunk: reads and checks the block table that opens
  // its payload into rx_scratch(path); its bytes follow.
  // kDataLoss for a malformed table (a protocol violation).
  Status receive_block_table(int fd, int path, const wire::WriteChunk& m);
  // The memory that table names, into `dest`; the first block refused (a
  // wrong key, past an export's end, deregistered) is its status.
  Status resolve_blocks(int path, core::SegmentList& dest);
  // A chunk of a landing or a write that began arriving on `path` and was
  // never accounted (its path broke off): it no longer holds the operation.
  // `conn` is null once the connection is being destroyed: the landing then
  // finishes without it.
  static void landing_chunk_abandoned(TcpTransport* conn, uint64_t token, const std::shared_ptr<Landing>& l,
                                      uint64_t offset, int path);
  void write_chunk_abandoned(uint64_t op, uint64_t offset, int path);
  // Queues a finished write's notification and acknowledges it.
  Status complete_write(uint64_t op, IncomingWrite& done);
  // The peer resent the chunk at `offset` on `path` while `stalled` was still
  // bringing it: the peer gave `stalled` up, and so does this side.
  void give_up_stalled_path(int stalled, int path, uint64_t offset);
  // How a frame's bytes are accounted once they are in place (or failed to
  // land), when that happens later (behind GPU copies).
  using Landed = std::function<Status(const Status& landed)>;
  // What receive_direct did with a frame's payload.
  enum class Direct {
    kInPlace,  // read straight into host memory
    kGone,     // the memory was deregistered: drained
    kStaged,   // GPU memory (or staging forced): nothing read, receive_staged's turn
  };
  // Reads [offset, offset+size) of `dest` from `fd` straight into place when
  // it is host memory, with no allocation (the path's scratch); an error
  // when the stream broke.
  Result<Direct> receive_direct(int fd, int path, const core::SegmentList& dest, uint64_t offset, uint64_t size);
  // The same for GPU memory: through the path's staging (or synchronously
  // on the control stream, path < 0), then `landed`, in order with the
  // path's earlier frames; `dest` is held until then. `gone` words the
  // error when the memory was deregistered meanwhile.
  Status receive_staged(int fd, int path, core::SegmentList dest, uint64_t offset, uint64_t size, Landed landed,
                        const std::function<std::string()>& gone);
  // `account` as a Landed that runs `abandon` instead if it is dropped unrun
  // (its path broke off, its stager was dropped): the chunk then stops
  // holding its operation.
  template <typename Account, typename Abandon>
  static Landed guarded(Account account, Abandon abandon);
  // Runs account(landed) now, or behind the path's running copies.
  template <typename Account, typename Abandon>
  Status account_in_order(int path, Account account, Abandon abandon, const Status& landed);
  // GPU copies of earlier frames of `path` are still running.
  bool copies_pending(int path) const;
  // Runs `fn` now, or behind the path's frames still being copied.
  Status after_earlier(int path, std::function<Status()> fn);
  // Counts a frame landed on `path` and confirms it when asked (CHUNK_ACK).
  Status count_landed(int path, bool ack_request);

  // ---- staging ----
  // The pieces of [offset, offset+size) of `list`, marked staged where they
  // cannot meet a socket directly.
  void pieces_of(const core::SegmentList& list, uint64_t offset, uint64_t size, std::vector<Piece>& out) const;
  bool stages(const core::SegmentList& list) const;
  // A batched write of `table`'s blocks (from `source`, unless the table is
  // over pools): whole on the control stream when small, else in chunks.
  void start_blocks(const std::shared_ptr<TransferState>& state, std::shared_ptr<const BlockTable> table,
                    core::SegmentList source, std::string_view note, uint64_t note_seq);
  // Chunk size for an operation on `list` over the paths in the mask `paths`
  // (0: every path); 0 means the queue's default.
  uint64_t chunk_for(const core::SegmentList& list, uint64_t paths) const;
  // The same for `bytes` in all, `staged` or not, `per_path` chunks a path
  // (staged_chunk_bytes).
  uint64_t chunk_for(bool staged, uint64_t bytes, uint64_t paths, int per_path = 2) const;
  // A copier for staging through pinned slots: the test hooks' if set, else
  // CUDA's with the copy kernel.
  std::unique_ptr<Copier> new_copier() const;
  // What this connection's copiers may take from its kit: a stream and its
  // fences for each copier, and the staging rings of every path.
  platform::GpuKitSize gpu_kit_size() const;
  // The copier of exchange(), which may be handed ordinary (pageable)
  // memory: the copy engines only, since the kernel can reach pinned memory
  // alone.
  std::unique_ptr<Copier> new_control_copier() const;
  // Copies every piece to (`to_buffer`) or from `buffer`, which holds their
  // bytes back to back, and waits: the control stream's GPU payloads.
  Status exchange(std::span<const Piece> pieces, uint8_t* buffer, bool to_buffer);
  // copy_in that understands GPU memory.
  Status copy_in(const core::SegmentList& dest, const uint8_t* src, uint64_t size);
  Status handle_eager(int fd, const wire::Eager& m);
  Status handle_rts(const wire::Rts& m);
  Status handle_cts(const wire::Cts& m);
  Status handle_ack(const wire::Ack& m);
  // A path released the last chunk of `op`, whose ACK was held for it.
  void finish_acknowledged(const OutOp& op);
  Status handle_read_req(const wire::ReadReq& m);
  Status drain(int fd, uint64_t n);
  // The paths a bulk transfer of `source` may use (Options::nic_policy).
  uint64_t paths_for(const core::SegmentList& source) const;
  // A data path failed: its unconfirmed chunks move to the others; the
  // connection fails only when no path is left. `orderly`: the peer closed
  // it between frames (it is closing or exiting).
  void path_failed(int path, const Status& why, bool orderly = false);

  // Matching a message with a receive.
  void match_rendezvous(transport::PostedRecv recv, uint64_t op, uint64_t size);
  void finish_landing(uint64_t token, const std::shared_ptr<Landing>& l);
  void complete_recv_now(transport::PostedRecv& recv, uint64_t op, uint64_t size, const std::string& bytes);

  transport::ConnectionHost& core_;
  core::EngineContext* const ctx_;
  const PeerInfo peer_;
  platform::Socket control_;
  std::vector<platform::Socket> data_;
  const std::vector<PathInfo> paths_;
  std::vector<std::shared_ptr<core::NicMeter>> path_meters_;  // each path's NIC's (empty with metrics off)
  std::vector<int> path_nodes_;                               // NUMA node of each path's NIC (-1 unknown)
  std::unique_ptr<std::atomic<bool>[]> path_dead_;
  ChunkQueue chunks_;

  platform::Mutex fibers_mu_;
  std::condition_variable fibers_cv_;                                // a fiber ended
  std::vector<platform::FiberTask*> fibers_ GUARDED_BY(fibers_mu_);  // alive
  // Workers that may still use the sockets, plus start() until it returns.
  std::atomic<int> workers_{1};
  // Serialises shutting sockets down with closing them: a descriptor number
  // closed here may be reused at once by anything else in the process.
  platform::Mutex sockets_mu_;
  // Also held with control_write_mu_ (which a writer of the control stream
  // holds) when it is set: a writer that holds either sees it.
  bool sockets_closed_ GUARDED_BY(sockets_mu_) = false;
  std::unique_ptr<core::Admission::Ticket> ticket_;
  // Every data path was closed in order by the peer at this time (0: not):
  // the control stream gets kControlGraceNs to deliver what precedes its end.
  std::atomic<int64_t> paths_closed_ns_{0};
  platform::Mutex paths_down_mu_;
  Status all_paths_down_ GUARDED_BY(paths_down_mu_);  // why, once no path is left
  static constexpr int64_t kControlGraceNs = 500'000'000;

  std::atomic<int64_t> last_rx_ns_{0};
  std::atomic<int64_t> last_tx_ns_{0};
  // The last time an operation the peer engine owes moved: an ACK, a CTS, a
  // chunk confirmed, landed or sent (a write is owed once its bytes are
  // out). Heartbeats do not count.
  std::atomic<int64_t> last_progress_ns_{0};
  // Quiet mode: since when something waits on the peer (0: nothing); the
  // silence is counted from then at the earliest.
  std::atomic<int64_t> waiting_since_ns_{0};
  std::atomic<int64_t> last_answer_ns_{0};  // the last heartbeat sent because the peer asked
  // Per data path (the control stream's last, unused): when the frame it is
  // reading began to arrive, 0 between frames (tick cuts off a stalled one).
  std::unique_ptr<std::atomic<int64_t>[]> frame_since_ns_;

  platform::Mutex control_write_mu_;   // serialises frames on the control stream
  platform::WaitList control_parked_;  // fibers waiting for it

  platform::Mutex out_mu_;
  std::condition_variable out_cv_;
  std::deque<Outgoing> out_ GUARDED_BY(out_mu_);
  bool out_stopped_ GUARDED_BY(out_mu_) = false;
  bool out_writing_ GUARDED_BY(out_mu_) = false;  // the control writer holds a frame
  std::condition_variable out_drained_cv_;        // out_ empty and nothing being written
  platform::WaitList out_parked_;                 // the control writer's fiber, waiting for out_

  // The sender's tables: operations waiting on the peer. Taken before
  // receive_mu_ where both are held (failing the connection, an answer that
  // ends a read's landing too); a section holding receive_mu_ alone never
  // takes it.
  platform::Mutex send_mu_ ACQUIRED_BEFORE(receive_mu_);
  struct PendingOp {
    std::shared_ptr<TransferState> state;
    // When the peer engine began to owe the answer without its
    // application's help (a write or read sent, a send's data after CTS);
    // 0 while the answer may wait on the peer application (an eager send,
    // a send before CTS, a notification).
    int64_t owed_since_ns = 0;
  };
  std::unordered_map<uint64_t, PendingOp> pending_ GUARDED_BY(send_mu_);  // awaiting ACK
  std::unordered_map<uint64_t, std::shared_ptr<OutOp>> awaiting_cts_ GUARDED_BY(send_mu_);
  // Bulk sends (after CTS) and writes on their way, by op: an ACK that
  // claims bytes this side has not sent yet is a protocol violation, and one
  // that comes while a path still sends a chunk of it completes the op only
  // once that path is done (ChunkQueue::acknowledge).
  std::unordered_map<uint64_t, std::weak_ptr<OutOp>> sending_ GUARDED_BY(send_mu_);
  // The receiver's tables: what lands from the peer (receives and reads,
  // incoming writes and the finished-writes window).
  platform::Mutex receive_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Landing>> landings_ GUARDED_BY(receive_mu_);
  std::unordered_map<uint64_t, IncomingWrite> incoming_ GUARDED_BY(receive_mu_);
  // Writes finished recently, so a chunk resent after a path died is dropped
  // instead of landing again over newer data.
  std::unordered_set<uint64_t> finished_writes_ GUARDED_BY(receive_mu_);  // aborted ones too
  // Notification numbers of writes this side aborted whose aborted chunk
  // carried the notification: the peer tells it (skip_note sends nothing).
  std::unordered_set<uint64_t> peer_tells_note_ GUARDED_BY(send_mu_);
  std::deque<uint64_t> finished_order_ GUARDED_BY(receive_mu_);
  std::vector<uint64_t> landed_chunks_;  // per path; only its reader (fiber)

  const StagingHooks hooks_;
  // The streams, events and pinned blocks of this connection's copiers,
  // filled before a stream waits on it (gpu/gpu_kit.h).
  const std::shared_ptr<platform::GpuKit> gpu_kit_;
  std::vector<std::unique_ptr<RxStager>> rx_stage_;  // per path; only its reader (fiber)
  // What a reader needs per frame, kept between frames: per path and, last,
  // the control stream's; only that stream's reader.
  struct RxScratch {
    std::vector<Piece> pieces;
    std::vector<struct iovec> iov;
    std::vector<uint8_t> table;       // a batched write's chunk: its block table as received
    std::vector<RemoteBlock> blocks;  // and decoded
  };
  // The scratch of data path `path`, or of the control stream (-1).
  RxScratch& rx_scratch(int path) { return rx_scratch_[path < 0 ? data_.size() : static_cast<size_t>(path)]; }
  std::vector<RxScratch> rx_scratch_;
  platform::Mutex control_copy_mu_;                                      // serialises the control copier
  std::unique_ptr<Copier> control_copier_ GUARDED_BY(control_copy_mu_);  // made on first use
  // exchange()'s pinned bounce (inline_max bytes, at most kMaxControlBounce),
  // allocated on first use; declared after the copier that frees it.
  static constexpr size_t kMaxControlBounce = 1 << 20;
  size_t control_bounce_bytes() const { return std::clamp<size_t>(ctx_->options.inline_max, 4096, kMaxControlBounce); }
  std::unique_ptr<StagingRing> control_bounce_ GUARDED_BY(control_copy_mu_);
  bool bounce_refused_ GUARDED_BY(control_copy_mu_) = false;  // warned once that it could not be had

  const std::shared_ptr<Held> held_;
};

}  // namespace ferry::tcp
