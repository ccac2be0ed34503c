// TcpConnection: posting operations, the control and path workers, frame
// handling and failure.
#include "transport/tcp/tcp_connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "core/log.h"
#include "platform/memory_node.h"
#include "platform/thread.h"
#include "transport/tcp/path_choice.h"
#include "transport/tcp/staging_kernel.h"

namespace ferry::tcp {
namespace {

using wire::FrameHeader;
using wire::FrameType;

// How many finished writes a connection remembers to drop late resent chunks.
constexpr size_t kFinishedWritesKept = 4096;

// What the budget (connection_memory_bytes) counts for each thing held on
// the peer's behalf, on top of its bytes: the bookkeeping around it.
constexpr size_t kUnexpectedBytes = 128;  // a message no receive was posted for
constexpr size_t kReplyBytes = 256;       // a reply waiting to go out (a queued frame, a read's reply op)
constexpr size_t kWriteBytes = 256;       // an incoming write
constexpr size_t kArrivalBytes = 64;      // one chunk of an incoming operation, landed or landing

// Frame flags (FrameHeader::flags) of the steady state.
constexpr uint8_t kFlagAckRequest = 1;  // DATA/WRITE chunk: confirm landing with CHUNK_ACK
constexpr uint8_t kFlagAborted = 2;     // DATA/WRITE chunk: this op's bytes will not come
constexpr uint8_t kFlagNoteSkip = 4;    // NOTIFY: the write carrying sequence number e failed

// Runs `abandon` when it goes, unless disarmed first: a chunk whose
// accounting never runs (its path broke off, its stager was dropped) still
// stops holding its operation. Shared by the copies of one completion.
class ArrivalGuard {
 public:
  explicit ArrivalGuard(std::function<void()> abandon) : abandon_(std::move(abandon)) {}
  ArrivalGuard(const ArrivalGuard&) = delete;
  ArrivalGuard& operator=(const ArrivalGuard&) = delete;
  ~ArrivalGuard() {
    if (abandon_) abandon_();
  }
  void disarm() { abandon_ = nullptr; }

 private:
  std::function<void()> abandon_;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

Status peer_status(uint32_t code, const std::string& message, const std::string& where) {
  if (code == 0) return Status();
  Code c = code <= static_cast<uint32_t>(Code::kInternal) ? static_cast<Code>(code) : Code::kInternal;
  return Status(c, "peer of " + where + " reports: " + message);
}

}  // namespace

bool TcpConnection::Held::take_reply(size_t n) {
  if (!budget.take(n)) return false;
  replies.fetch_add(n, std::memory_order_relaxed);
  return true;
}

void TcpConnection::Held::give_reply(size_t n) {
  budget.give(n);
  size_t before = replies.fetch_sub(n, std::memory_order_relaxed);
  if (before > reply_cap && before - n <= reply_cap) {
    std::lock_guard lock(mu);
    room.notify_all();
  }
}

TcpConnection::TcpConnection(std::shared_ptr<core::EngineContext> ctx, uint64_t id, PeerInfo peer,
                             platform::Socket control, std::vector<platform::Socket> data, std::vector<PathInfo> paths,
                             std::unique_ptr<core::Admission::Ticket> ticket)
    : ctx_(std::move(ctx)),
      id_(id),
      peer_(std::move(peer)),
      control_(std::move(control)),
      data_(std::move(data)),
      paths_(std::move(paths)),
      path_dead_(new std::atomic<bool>[data_.size()]),
      chunks_(ctx_->options.chunk_bytes, ctx_->options.window, static_cast<int>(data_.size()),
              ctx_->options.path_policy == "adaptive" &&
                  governor_engages(static_cast<int>(data_.size()), platform::usable_cpu_count()),
              governor_start(static_cast<int>(data_.size()), platform::usable_cpu_count())),
      ticket_(std::move(ticket)),
      landed_chunks_(data_.size(), 0),
      hooks_(staging_hooks()),
      kernels_(ctx_->options.staging_copy == "kernel" ? std::make_shared<StagingKernels>() : nullptr),
      rx_stage_(data_.size()),
      held_(std::make_shared<Held>(ctx_->options.connection_memory_bytes)),
      notes_(&held_->budget, &ctx_->notifications) {
  for (size_t p = 0; p < data_.size(); ++p) {
    path_dead_[p] = false;
    auto node = p < paths_.size() ? ctx_->nic_nodes.find(paths_[p].nic) : ctx_->nic_nodes.end();
    path_nodes_.push_back(node == ctx_->nic_nodes.end() ? -1 : node->second);
  }
  last_rx_ns_ = now_ns();
  last_tx_ns_ = now_ns();
}

TcpConnection::~TcpConnection() { close(); }

Status TcpConnection::start() {
  std::string base = "ferry-c" + std::to_string(id_);
  auto launch = [this](std::string name, std::function<void()> fn) -> Status {
    workers_.fetch_add(1, std::memory_order_relaxed);
    auto t = platform::try_start_thread(std::move(name), [this, fn = std::move(fn)] {
      fn();
      worker_done();
    });
    if (!t.ok()) {
      workers_.fetch_sub(1, std::memory_order_relaxed);
      return t.status().with_context(where());
    }
    threads_.push_back(std::move(t).value());
    return Status();
  };
  Status st = launch(base + "-ctl-rx", [this] { control_rx_loop(); });
  if (st.ok()) st = launch(base + "-ctl-tx", [this] { control_tx_loop(); });
  for (int p = 0; st.ok() && p < static_cast<int>(data_.size()); ++p) {
    std::string pb = base + "-p" + std::to_string(p);
    st = launch(pb + "-tx", [this, p, pb] {
      pin_worker(p, "tx", pb + "-tx");
      path_tx_loop(p);
    });
    if (st.ok()) {
      st = launch(pb + "-rx", [this, p, pb] {
        pin_worker(p, "rx", pb + "-rx");
        path_rx_loop(p);
      });
    }
  }
  worker_done();
  if (!st.ok()) {
    FERRY_LOG(kWarn, "tcp", "%s", st.to_string().c_str());
    return st;
  }
  FERRY_LOG(kInfo, "tcp", "%s up with %zu data streams", where().c_str(), data_.size());
  for (size_t p = 0; p < paths_.size(); ++p) {
    FERRY_LOG(kDebug, "tcp", "%s path %zu: %s", where().c_str(), p, paths_[p].name.c_str());
  }
  return Status();
}

void TcpConnection::worker_done() {
  // The control reader ends only with the connection, so the last one out
  // finds it failed unless a start failed; then close() releases.
  if (workers_.fetch_sub(1, std::memory_order_acq_rel) == 1 && failed_.load(std::memory_order_acquire)) {
    release_sockets();
  }
}

void TcpConnection::release_sockets() {
  {
    // An application thread may be writing a frame (fail() has shut the
    // stream down, so it returns soon); never the other order: fail() takes
    // sockets_mu_ to wake it.
    std::lock_guard write_lock(control_write_mu_);
    std::lock_guard lock(sockets_mu_);
    if (sockets_closed_) return;
    sockets_closed_ = true;
    control_.reset();
    for (auto& d : data_) d.reset();
  }
  if (ticket_) ticket_->release();
}

Status TcpConnection::exhausted(const std::string& what) const {
  return Status(Code::kResourceExhausted, where() + ": " + what + " would hold more than connection_memory_bytes (" +
                                              std::to_string(held_->budget.limit()) + " bytes) on the peer's behalf");
}

Status TcpConnection::fail_with(const Status& why) {
  fail(why);
  return why;
}

Status TcpConnection::await_reply_room() {
  if (held_->replies.load(std::memory_order_relaxed) <= held_->reply_cap) return Status();
  std::unique_lock lock(held_->mu);
  auto room = [&] {
    return failed_.load(std::memory_order_acquire) ||
           held_->replies.load(std::memory_order_relaxed) <= held_->reply_cap;
  };
  if (held_->room.wait_for(lock, ctx_->options.peer_timeout, room)) {
    last_rx_ns_.store(now_ns(), std::memory_order_relaxed);  // the pause was ours, not the peer's silence
    return Status();
  }
  return Status(Code::kResourceExhausted,
                where() + ": replies the peer does not read: " + std::to_string(held_->replies.load()) +
                    " bytes of them stayed queued past their cap (a quarter of connection_memory_bytes, " +
                    std::to_string(held_->reply_cap) + " bytes) for peer_timeout (" +
                    std::to_string(ctx_->options.peer_timeout.count()) + " ms)");
}

void TcpConnection::pin_worker(int path, const char* role, const std::string& thread) {
  const std::string& nic = static_cast<size_t>(path) < paths_.size() ? paths_[static_cast<size_t>(path)].nic : "";
  const core::WorkerCpus& w = ctx_->worker_cpus;
  const platform::NicBindings& b = std::string_view(role) == "tx" ? w.tx : w.rx;
  auto it = nic.empty() ? b.end() : b.find(nic);
  platform::CpuList expected = it == b.end() ? platform::CpuList{} : it->second;
  platform::CpuList actual = platform::pin_current_thread(expected);
  bool ok = expected.empty() || actual == expected;
  FERRY_LOG(kInfo, "tcp", "%s %s worker %s: expected %s actual %s %s", role, nic.empty() ? "-" : nic.c_str(),
            thread.c_str(), expected.empty() ? "any" : platform::format_cpu_list(expected).c_str(),
            platform::format_cpu_list(actual).c_str(), ok ? "ok" : "MISMATCH");
  if (!ok) {
    FERRY_LOG(kWarn, "tcp", "%s worker %s could not be pinned to %s (runs on %s)", role, thread.c_str(),
              platform::format_cpu_list(expected).c_str(), platform::format_cpu_list(actual).c_str());
  }
}

uint64_t TcpConnection::paths_for(const core::SegmentList& source) const {
  if (source.empty() || ctx_->options.nic_policy != "nearest") return 0;
  const Region& region = source.spans().front().region->region;
  if (region.kind != MemoryKind::kCuda) {
    return choose_paths(path_nodes_, chunks_.alive(), platform::memory_node(source.spans().front().data), true);
  }
  // GPU memory: the NICs behind the GPU's own PCI switch first, then its NUMA node.
  const platform::Topology& topo = ctx_->topology;
  std::string pci = platform::gpu_pci_address(region.device);
  const platform::GpuInfo* gpu = nullptr;
  for (const auto& g : topo.gpus) {
    if (g.pci_address == pci) gpu = &g;
  }
  if (gpu == nullptr) return 0;
  std::vector<int> distance;
  for (const PathInfo& p : paths_) {
    const platform::NicInfo* nic = topo.find_nic(p.nic);
    distance.push_back(nic == nullptr ? -1 : pci_distance(gpu->pci_path, nic->pci_path));
  }
  uint64_t mask = closest_paths(distance, chunks_.alive());
  return mask != 0 ? mask : choose_paths(path_nodes_, chunks_.alive(), gpu->numa_node, true);
}

std::string TcpConnection::where() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "connection %" PRIu64 " to %s (engine %016" PRIx64 ")", id_, peer_.address.c_str(),
                peer_.engine_id);
  return buf;
}

Status TcpConnection::health() const {
  std::lock_guard lock(health_mu_);
  return health_;
}

Result<uint64_t> TcpConnection::probe(Deadline deadline) {
  std::unique_lock lock(mu_);
  auto ready = [&] { return !unexpected_.empty() || failed_.load(std::memory_order_acquire); };
  if (deadline == kNoDeadline) {
    arrived_.wait(lock, ready);
  } else if (!arrived_.wait_until(lock, deadline, ready)) {
    return Status(Code::kDeadlineExceeded, where() + ": probe: no message arrived by the deadline");
  }
  if (!unexpected_.empty()) return unexpected_.front().size;
  lock.unlock();
  return usable();
}

Status TcpConnection::usable() const {
  if (!failed_.load(std::memory_order_acquire)) return Status();
  Status h = health();
  return h.ok() ? Status(Code::kPeerLost, where() + " is down") : h;
}

std::shared_ptr<TransferState> TcpConnection::new_state(int parts) {
  std::lock_guard lock(mu_);
  auto spin = ctx_->options.wait_spin.count() > 0 ? ctx_->options.wait_spin : TransferState::kSpinBeforeSleep;
  return std::make_shared<TransferState>(next_op_++, parts, spin);
}

Transfer TcpConnection::failed(const Status& s) {
  auto st = std::make_shared<TransferState>(0, 1);
  st->finish(s);
  return Transfer(st);
}

// ---- control stream output ------------------------------------------------

Status TcpConnection::write_control(const FrameHeader& h, std::string_view aux, const core::SegmentList* payload) {
  wire::HeaderBytes hb;
  encode_header(h, hb);
  std::vector<struct iovec> iov;
  iov.push_back({hb.data(), hb.size()});
  if (!aux.empty()) iov.push_back({const_cast<char*>(aux.data()), aux.size()});
  std::optional<core::ChunkAccess> access;
  std::string staged;  // GPU payloads (small: the control stream carries at most inline_max) go through here
  if (payload != nullptr && payload->total() > 0) {
    access.emplace(*payload, 0, payload->total());
    if (!access->ok()) return Status(Code::kNotFound, "memory was deregistered before it was sent");
    std::vector<Piece> pieces;
    pieces_of(*payload, 0, payload->total(), pieces);
    if (staged_bytes(pieces) > 0) {
      staged.resize(payload->total());
      FERRY_RETURN_IF_ERROR(exchange(pieces, reinterpret_cast<uint8_t*>(staged.data()), /*to_buffer=*/true));
      iov.push_back({staged.data(), staged.size()});
    } else {
      payload->slice(0, payload->total(), iov);
    }
  }
  Status s;
  {
    std::lock_guard lock(control_write_mu_);
    // Once the connection failed its descriptor may be closed (and its number reused).
    s = failed_.load(std::memory_order_acquire)
            ? Status(Code::kPeerLost, "the connection failed")
            : platform::send_all(control_.fd(), iov.data(), static_cast<int>(iov.size()));
  }
  if (!s.ok()) {
    Status lost(Code::kPeerLost, where() + ": control stream: " + s.message());
    fail(lost);
    return lost;
  }
  last_tx_ns_.store(now_ns(), std::memory_order_relaxed);
  return Status();
}

void TcpConnection::queue_control(Outgoing out) {
  // Small replies go out at once when the stream is free and has room: a
  // hand-off to the control-transmit thread would add a wake-up to every
  // acknowledgement. Never blocks: if the lock is taken or the socket is
  // full, the frame is queued as usual. (Replies are independent of each
  // other, so their order does not matter.)
  if (!out.payload_op && out.aux.empty()) {
    std::unique_lock lock(control_write_mu_, std::try_to_lock);
    if (lock.owns_lock() && !failed_.load(std::memory_order_relaxed)) {
      wire::HeaderBytes hb;
      encode_header(out.header, hb);
      ssize_t n = ::send(control_.fd(), hb.data(), hb.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n == static_cast<ssize_t>(hb.size())) {
        last_tx_ns_.store(now_ns(), std::memory_order_relaxed);
        return;
      }
      if (n > 0) {
        // A partial frame must be finished before anything else is written.
        struct iovec rest = {hb.data() + n, hb.size() - static_cast<size_t>(n)};
        Status s = platform::send_all(control_.fd(), &rest, 1);
        lock.unlock();
        if (!s.ok()) fail(Status(Code::kPeerLost, where() + ": control stream: " + s.message()));
        return;
      }
    }
  }
  // Queued, it is held on the peer's behalf until the peer reads.
  size_t bytes = kReplyBytes + out.aux.size();
  if (!held_->take_reply(bytes)) {
    fail(exhausted("replies the peer does not read"));
    return;
  }
  out.charged = bytes;
  bool queued = false;
  {
    std::lock_guard lock(out_mu_);
    if (!out_stopped_) {
      out_.push_back(std::move(out));
      queued = true;
    }
  }
  if (!queued) {
    held_->give_reply(bytes);
    return;
  }
  out_cv_.notify_one();
}

void TcpConnection::ack(uint64_t op, const Status& s, uint8_t flags) {
  Outgoing o;
  o.header.type = FrameType::kAck;
  o.header.id = op;
  o.header.flags = flags;
  o.header.code = static_cast<uint32_t>(s.code());
  o.aux = s.message().substr(0, 1024);
  o.header.aux_len = static_cast<uint16_t>(o.aux.size());
  queue_control(std::move(o));
}

void TcpConnection::control_tx_loop() {
  for (;;) {
    Outgoing o;
    {
      std::unique_lock lock(out_mu_);
      out_cv_.wait(lock, [&] { return out_stopped_ || !out_.empty(); });
      if (out_stopped_) return;
      o = std::move(out_.front());
      out_.pop_front();
      out_writing_ = true;
    }
    const core::SegmentList* payload = o.payload_op ? &o.payload_op->source : nullptr;
    if (payload != nullptr) o.header.payload_len = static_cast<uint32_t>(payload->total());
    Status s = write_control(o.header, o.aux, payload);
    held_->give_reply(std::exchange(o.charged, 0));
    if (!s.ok() && s.code() != Code::kPeerLost && o.payload_op) {
      // The memory of a read reply vanished (or could not be staged): tell the reader instead.
      FrameHeader h = o.header;
      h.flags |= kFlagAborted;
      h.payload_len = 0;
      std::string why = s.code() == Code::kNotFound ? "the exported memory was deregistered during the read"
                                                    : "the exported memory could not be read: " + s.message();
      why = why.substr(0, 1024);
      h.aux_len = static_cast<uint16_t>(why.size());
      h.code = static_cast<uint32_t>(s.code());
      s = write_control(h, why, nullptr);
    }
    {
      std::lock_guard lock(out_mu_);
      out_writing_ = false;
      if (out_.empty()) out_drained_cv_.notify_all();
    }
    if (!s.ok() && failed_) return;
  }
}

// ---- posting --------------------------------------------------------------

Transfer TcpConnection::send_async(const void* data, size_t size) {
  ConstBuffer b{data, size};
  return sendv_async(std::span<const ConstBuffer>(&b, 1));
}

Transfer TcpConnection::sendv_async(std::span<const ConstBuffer> parts) {
  if (Status u = usable(); !u.ok()) return failed(u);
  auto source = core::resolve_parts(ctx_->registry, parts, parts.size() == 1 ? "send buffer" : "sendv part",
                                    /*allow_gpu=*/true);
  if (!source.ok()) return failed(source.status().with_context(where()));
  return post_send(std::move(source).value());
}

Transfer TcpConnection::post_send(core::SegmentList source) {
  uint64_t size = source.total();
  auto state = new_state();
  uint64_t op = state->id();
  state->set_bytes(size);
  bool eager = size <= ctx_->options.inline_max;
  std::shared_ptr<OutOp> out;
  if (!eager) {
    out = std::make_shared<OutOp>();
    out->source = std::move(source);
    out->state = state;
    out->paths = paths_for(out->source);
    out->chunk_bytes = chunk_for(out->source, out->paths);
  }
  {
    std::lock_guard lock(mu_);
    if (failed_) return failed(usable());
    pending_.emplace(op, state);
    if (out) awaiting_cts_.emplace(op, out);
  }
  FrameHeader h;
  h.type = eager ? FrameType::kEager : FrameType::kRts;
  h.id = op;
  h.a = size;
  if (eager) h.payload_len = static_cast<uint32_t>(size);
  Status s = write_control(h, {}, eager ? &source : nullptr);
  if (!s.ok() && s.code() != Code::kPeerLost) {
    {
      std::lock_guard lock(mu_);
      pending_.erase(op);
    }
    state->finish(s.with_context(where()));
  }
  return Transfer(state);
}

Transfer TcpConnection::recv_async(void* data, size_t capacity) {
  MutableBuffer b{data, capacity};
  return recvv_async(std::span<const MutableBuffer>(&b, 1));
}

Transfer TcpConnection::recvv_async(std::span<const MutableBuffer> parts) {
  if (Status u = usable(); !u.ok()) return failed(u);
  auto dest = core::resolve_parts(ctx_->registry, parts, parts.size() == 1 ? "receive buffer" : "recvv part",
                                  /*allow_gpu=*/true);
  if (!dest.ok()) return failed(dest.status().with_context(where()));
  return post_recv(std::move(dest).value());
}

Transfer TcpConnection::post_recv(core::SegmentList dest) {
  PostedRecv recv{new_state(), std::move(dest)};
  Transfer handle(recv.state);
  Unexpected u;
  {
    std::lock_guard lock(mu_);
    if (failed_) return failed(usable());
    if (unexpected_.empty()) {
      std::weak_ptr<TransferState> weak = recv.state;
      std::weak_ptr<TcpConnection> self = weak_from_this();
      recv.state->set_canceller([self, weak]() -> bool {
        auto conn = self.lock();
        auto st = weak.lock();
        if (!conn || !st) return false;
        {
          std::lock_guard lock(conn->mu_);
          auto it = std::find_if(conn->posted_.begin(), conn->posted_.end(),
                                 [&](const PostedRecv& r) { return r.state == st; });
          if (it == conn->posted_.end()) return false;
          conn->posted_.erase(it);
        }
        return st->finish(Status(Code::kCancelled, "receive cancelled before a message matched it"));
      });
      posted_.push_back(std::move(recv));
      return handle;
    }
    u = std::move(unexpected_.front());
    unexpected_.pop_front();
  }
  held_->budget.give(kUnexpectedBytes + u.bytes.size());
  if (u.rendezvous) {
    match_rendezvous(std::move(recv), u.op, u.size);
  } else {
    complete_recv_now(recv, u.op, u.size, u.bytes);
  }
  return handle;
}

Status TcpConnection::check_remote(const RemoteDescriptor& r, uint64_t offset, uint64_t size, const char* op) const {
  if (r.engine_id != peer_.engine_id) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%s: descriptor belongs to engine %016" PRIx64 ", but %s", op, r.engine_id,
                  where().c_str());
    return Status(Code::kInvalidArgument, buf);
  }
  if (offset > r.length || size > r.length - offset) {
    return Status(Code::kOutOfRange, std::string(op) + ": [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                         ") leaves remote export " + std::to_string(r.export_id) + " of " +
                                         std::to_string(r.length) + " bytes");
  }
  return Status();
}

Transfer TcpConnection::write_async(const void* local, size_t size, const RemoteDescriptor& remote,
                                    uint64_t remote_offset, std::string_view notification) {
  WriteItem item{local, size, remote, remote_offset};
  return writev_async(std::span<const WriteItem>(&item, 1), notification);
}

Transfer TcpConnection::writev_async(std::span<const WriteItem> items, std::string_view notification) {
  if (Status u = usable(); !u.ok()) return failed(u);
  if (items.empty()) return failed(Status(Code::kInvalidArgument, "writev: no items"));
  if (Status c = core::NotificationQueue::check_size(notification, "write"); !c.ok()) return failed(c);
  std::vector<core::SegmentList> sources(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    Status c = check_remote(items[i].remote, items[i].remote_offset, items[i].size, "write");
    if (!c.ok()) return failed(c);
    if (items[i].size > 0) {
      auto span = ctx_->registry.resolve_local(items[i].local, items[i].size, "write source");
      if (!span.ok()) return failed(span.status().with_context(where()));
      sources[i].add(std::move(span).value());
    }
  }
  // One item: its notification rides with its data. Several: the items may
  // land in any order, so the notification follows once all of them are in place.
  bool trailing_note = items.size() > 1 && !notification.empty();
  auto parent = new_state(static_cast<int>(items.size()) + (trailing_note ? 1 : 0));
  // The notification's place among this connection's notifications is taken
  // now (NotificationQueue::push_numbered); a write that fails gives it up
  // with a skip.
  uint64_t seq = notification.empty() ? 0 : next_note_seq();
  if (seq != 0) {
    std::weak_ptr<TcpConnection> self = weak_from_this();
    parent->on_finish([self, seq](const Status& s) {
      if (auto conn = self.lock(); conn && !s.ok()) conn->skip_note(seq);
    });
  }
  if (!trailing_note) {
    for (size_t i = 0; i < items.size(); ++i) {
      post_write(parent, std::move(sources[i]), items[i].remote, items[i].remote_offset,
                 items.size() == 1 ? std::string(notification) : std::string(), items.size() == 1 ? seq : 0);
    }
    return Transfer(parent);
  }
  auto left = std::make_shared<std::atomic<size_t>>(items.size());
  auto all_ok = std::make_shared<std::atomic<bool>>(true);
  std::weak_ptr<TcpConnection> self = weak_from_this();
  std::string note(notification);
  for (size_t i = 0; i < items.size(); ++i) {
    auto item_state = new_state();
    item_state->on_finish([parent, left, all_ok, self, note, seq](const Status& s) {
      if (!s.ok()) all_ok->store(false);
      parent->finish_part(s);
      if (left->fetch_sub(1) != 1) return;
      auto conn = self.lock();
      if (!all_ok->load() || !conn) {
        parent->finish_part(Status(Code::kCancelled, "notification not sent: a write of the vector failed"));
        return;
      }
      // Runs on a ferry worker thread: queue the notification, never block here.
      uint64_t op;
      {
        std::lock_guard lock(conn->mu_);
        if (conn->failed_) {
          parent->finish_part(conn->usable());
          return;
        }
        op = conn->next_op_++;
        conn->pending_.emplace(op, parent);
      }
      Outgoing o;
      o.header.type = FrameType::kNotify;
      o.header.id = op;
      o.header.e = seq;
      o.aux = note;
      o.header.aux_len = static_cast<uint16_t>(note.size());
      conn->queue_control(std::move(o));
    });
    post_write(item_state, std::move(sources[i]), items[i].remote, items[i].remote_offset, std::string(), 0);
  }
  return Transfer(parent);
}

void TcpConnection::post_write(const std::shared_ptr<TransferState>& state, core::SegmentList source,
                               const RemoteDescriptor& remote, uint64_t offset, std::string notification,
                               uint64_t note_seq) {
  uint64_t size = source.total();
  uint64_t op;
  {
    std::lock_guard lock(mu_);
    if (failed_) {
      state->finish_part(usable());
      return;
    }
    op = next_op_++;
    pending_.emplace(op, state);
  }
  state->add_bytes(size);
  FrameHeader h;
  h.type = FrameType::kWrite;
  h.id = op;
  h.a = remote.export_id;
  h.b = remote.key;
  h.c = offset;
  h.d = size;
  h.e = note_seq;  // every chunk carries it: any may arrive first
  if (size <= ctx_->options.inline_max) {
    h.payload_len = static_cast<uint32_t>(size);
    h.aux_len = static_cast<uint16_t>(notification.size());
    Status s = write_control(h, notification, &source);
    if (!s.ok() && s.code() != Code::kPeerLost) {
      {
        std::lock_guard lock(mu_);
        pending_.erase(op);
      }
      state->finish_part(s.with_context(where()));
    }
    return;
  }
  auto out = std::make_shared<OutOp>();
  out->header = h;
  out->source = std::move(source);
  out->remote_base = offset;
  out->first_aux = std::move(notification);
  out->state = state;
  out->paths = paths_for(out->source);
  out->chunk_bytes = chunk_for(out->source, out->paths);
  {
    std::lock_guard lock(mu_);
    sending_[op] = out;
  }
  if (!chunks_.push(std::move(out))) state->finish_part(usable());
}

Transfer TcpConnection::read_async(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset) {
  ReadItem item{local, size, remote, remote_offset};
  return readv_async(std::span<const ReadItem>(&item, 1));
}

Transfer TcpConnection::readv_async(std::span<const ReadItem> items) {
  if (Status u = usable(); !u.ok()) return failed(u);
  if (items.empty()) return failed(Status(Code::kInvalidArgument, "readv: no items"));
  std::vector<core::SegmentList> dests(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    Status c = check_remote(items[i].remote, items[i].remote_offset, items[i].size, "read");
    if (!c.ok()) return failed(c);
    if (items[i].size > 0) {
      auto span = ctx_->registry.resolve_local(items[i].local, items[i].size, "read destination");
      if (!span.ok()) return failed(span.status().with_context(where()));
      dests[i].add(std::move(span).value());
    }
  }
  auto parent = new_state(static_cast<int>(items.size()));
  for (size_t i = 0; i < items.size(); ++i)
    post_read(parent, std::move(dests[i]), items[i].remote, items[i].remote_offset);
  return Transfer(parent);
}

void TcpConnection::post_read(const std::shared_ptr<TransferState>& state, core::SegmentList dest,
                              const RemoteDescriptor& remote, uint64_t offset) {
  auto landing = std::make_shared<Landing>();
  landing->state = state;
  landing->size = dest.total();
  landing->arrivals = ChunkArrivals(landing->size);
  landing->dest = std::move(dest);
  uint64_t op;
  {
    std::lock_guard lock(mu_);
    if (failed_) {
      state->finish_part(usable());
      return;
    }
    op = next_op_++;
    pending_.emplace(op, state);
    landings_.emplace(op, landing);
  }
  FrameHeader h;
  h.type = FrameType::kReadReq;
  h.id = op;
  h.a = remote.export_id;
  h.b = remote.key;
  h.c = offset;
  h.d = landing->size;
  (void)write_control(h, {}, nullptr);  // a failure fails the connection, which finishes the read
}

Transfer TcpConnection::notify_async(std::string_view message) {
  if (Status u = usable(); !u.ok()) return failed(u);
  if (Status c = core::NotificationQueue::check_size(message, "notify"); !c.ok()) return failed(c);
  auto state = new_state();
  {
    std::lock_guard lock(mu_);
    if (failed_) return failed(usable());
    pending_.emplace(state->id(), state);
  }
  FrameHeader h;
  h.type = FrameType::kNotify;
  h.id = state->id();
  h.e = next_note_seq();
  h.aux_len = static_cast<uint16_t>(message.size());
  (void)write_control(h, message, nullptr);
  return Transfer(state);
}

Result<std::string> TcpConnection::wait_notification(Deadline deadline) {
  std::string note;
  switch (notes_.wait(deadline, failed_, note)) {
    case core::NotificationQueue::Wait::kNote:
      return note;
    case core::NotificationQueue::Wait::kStopped:
      return usable();
    case core::NotificationQueue::Wait::kDeadline:
      break;
  }
  return Status(Code::kDeadlineExceeded, "no notification from " + where() + " by the deadline");
}

std::optional<std::string> TcpConnection::poll_notification() { return notes_.poll(); }

uint64_t TcpConnection::next_note_seq() {
  std::lock_guard lock(mu_);
  return next_note_seq_++;
}

void TcpConnection::skip_note(uint64_t seq) {
  if (failed_.load(std::memory_order_acquire)) return;
  Outgoing o;
  o.header.type = FrameType::kNotify;
  o.header.flags = kFlagNoteSkip;
  o.header.e = seq;  // id 0: nothing to confirm
  queue_control(std::move(o));
}

// ---- matching -------------------------------------------------------------

void TcpConnection::complete_recv_now(PostedRecv& recv, uint64_t op, uint64_t size, const std::string& bytes) {
  if (recv.dest.total() < size) {
    Status s(Code::kBufferTooSmall, "message of " + std::to_string(size) +
                                        " bytes does not fit the receive buffer of " +
                                        std::to_string(recv.dest.total()) + " bytes (" + where() + ")");
    ack(op, s);
    recv.state->finish(s);
    return;
  }
  Status s;
  {
    core::ChunkAccess access(recv.dest, 0, size);
    if (access.ok()) {
      s = copy_in(recv.dest, reinterpret_cast<const uint8_t*>(bytes.data()), size);
    } else {
      s = Status(Code::kNotFound, "receive buffer was deregistered before the message arrived");
    }
  }
  recv.state->set_bytes(size);
  ack(op, s);
  recv.state->finish(s);
}

void TcpConnection::match_rendezvous(PostedRecv recv, uint64_t op, uint64_t size) {
  if (recv.dest.total() < size) {
    Status s(Code::kBufferTooSmall, "message of " + std::to_string(size) +
                                        " bytes does not fit the receive buffer of " +
                                        std::to_string(recv.dest.total()) + " bytes (" + where() + ")");
    ack(op, s);
    recv.state->finish(s);
    return;
  }
  auto landing = std::make_shared<Landing>();
  landing->state = recv.state;
  landing->dest = std::move(recv.dest);
  landing->size = size;
  landing->arrivals = ChunkArrivals(size);
  landing->reply_op = op;
  uint64_t token;
  {
    std::lock_guard lock(mu_);
    if (failed_) {
      landing->state->finish(usable());
      return;
    }
    token = next_op_++;
    landings_.emplace(token, landing);
  }
  Outgoing o;
  o.header.type = FrameType::kCts;
  o.header.id = op;
  o.header.a = token;
  queue_control(std::move(o));
}

void TcpConnection::finish_landing(uint64_t token, const std::shared_ptr<Landing>& l) {
  Status s;
  bool orphaned, aborted;
  {
    std::lock_guard lock(l->mu);
    s = l->error;
    orphaned = l->orphaned;
    aborted = l->arrivals.aborted();
    held_->budget.give(std::exchange(l->charged, 0));
  }
  // An orphan is off the tables already: fail() left its end to this, its
  // last chunk.
  if (!orphaned) {
    std::lock_guard lock(mu_);
    auto it = landings_.find(token);
    if (it == landings_.end() || it->second != l) return;
    landings_.erase(it);
    if (l->reply_op == 0) pending_.erase(token);
  }
  if (orphaned || aborted) {
    l->state->finish_part(s);  // no bytes, no answer; one item of a vector operation
    return;
  }
  if (l->reply_op != 0) {
    l->state->set_bytes(l->size);
    ack(l->reply_op, s);
  } else {
    l->state->add_bytes(l->size);
  }
  l->state->finish_part(s);
}

// ---- receiving ------------------------------------------------------------

Status TcpConnection::drain(int fd, uint64_t n) {
  char scratch[16384];
  while (n > 0) {
    size_t k = n < sizeof(scratch) ? static_cast<size_t>(n) : sizeof(scratch);
    FERRY_RETURN_IF_ERROR(platform::recv_exact(fd, scratch, k));
    n -= k;
  }
  return Status();
}

Status TcpConnection::land_data(int fd, int path, const FrameHeader& h) {
  std::shared_ptr<Landing> l;
  {
    std::lock_guard lock(mu_);
    auto it = landings_.find(h.id);
    if (it != landings_.end()) l = it->second;
  }
  if (!l) {
    // The operation already ended (aborted or failed); its late bytes go nowhere.
    FERRY_LOG(kDebug, "tcp", "%s: %u bytes for finished token %" PRIu64 " dropped", where().c_str(), h.payload_len,
              h.id);
    return drain(fd, h.payload_len);
  }
  if (h.flags & kFlagAborted) {
    ChunkArrivals::Abort abort;
    {
      std::lock_guard lock(l->mu);
      abort = l->arrivals.abort(h.a, path);
      if (l->arrivals.aborted()) {
        l->error = peer_status(h.code ? h.code : static_cast<uint32_t>(Code::kCancelled), "transfer aborted", where());
      }
    }
    if (abort.stalled_path >= 0) give_up_stalled_path(abort.stalled_path, path, h.a);
    // Chunks still being written into the memory end first; the last of
    // them finishes the operation.
    if (abort.over) finish_landing(h.id, l);
    return drain(fd, h.payload_len);
  }
  if (h.a > l->size || h.payload_len > l->size - h.a) {
    return Status(Code::kDataLoss, where() + ": data chunk [" + std::to_string(h.a) + ", +" +
                                       std::to_string(h.payload_len) + ") lies outside its message of " +
                                       std::to_string(l->size) + " bytes");
  }
  if (h.payload_len == 0 && l->size != 0) {
    // Only an empty message travels as an empty chunk; empty ones at every
    // offset would each be remembered.
    return Status(Code::kDataLoss, where() + ": empty data chunk at offset " + std::to_string(h.a) +
                                       " of a message of " + std::to_string(l->size) + " bytes");
  }
  uint64_t token = h.id, offset = h.a, size = h.payload_len;
  ChunkArrivals::Begin begin;
  bool over = false;
  {
    std::lock_guard lock(l->mu);
    begin = l->arrivals.begin(offset, path);
    // The peer chooses how small the chunks are: each one's record counts.
    if (begin.land && !(over = !held_->budget.take(kArrivalBytes))) l->charged += kArrivalBytes;
    if (over) (void)l->arrivals.end(offset, path, 0, /*landed=*/false);
  }
  if (over) return fail_with(exhausted("chunks of operations still arriving"));
  if (begin.stalled_path >= 0) give_up_stalled_path(begin.stalled_path, path, offset);
  if (!begin.land) return drain(fd, size);  // a resent chunk that had landed already, or aborted
  std::weak_ptr<TcpConnection> self = weak_from_this();
  auto guard = std::make_shared<ArrivalGuard>(
      [self, token, l, offset, path] { landing_chunk_abandoned(self.lock().get(), token, l, offset, path); });
  Landed account = [this, l, token, offset, size, path, guard](const Status& landed) -> Status {
    guard->disarm();
    Result<bool> complete = false;
    {
      std::lock_guard lock(l->mu);
      if (!landed.ok() && l->error.ok()) l->error = landed;
      complete = l->arrivals.end(offset, path, size, /*landed=*/true);
    }
    if (!complete.ok()) return complete.status().with_context(where() + ": message");
    if (*complete) finish_landing(token, l);
    return Status();
  };
  return receive_payload(fd, path, l->dest, offset, size,
                         "destination memory was deregistered while data arrived (" + where() + ")",
                         std::move(account));
}

void TcpConnection::landing_chunk_abandoned(TcpConnection* conn, uint64_t token, const std::shared_ptr<Landing>& l,
                                            uint64_t offset, int path) {
  Result<bool> complete = false;
  Status error;
  {
    std::lock_guard lock(l->mu);
    complete = l->arrivals.end(offset, path, 0, /*landed=*/false);
    error = l->error;
  }
  if (!complete.ok() || !*complete) return;
  if (conn != nullptr) {
    conn->finish_landing(token, l);
  } else {
    l->state->finish_part(error);  // the connection is going: nothing to answer, nothing to unlist
  }
}

void TcpConnection::give_up_stalled_path(int stalled, int path, uint64_t offset) {
  path_failed(stalled, Status(Code::kUnavailable, "the peer resent the chunk at offset " + std::to_string(offset) +
                                                      " on data path " + std::to_string(path) +
                                                      " while this path was still bringing it (the peer gave it up)"));
}

void TcpConnection::remember_finished_write(uint64_t op) {
  finished_writes_.insert(op);
  finished_order_.push_back(op);
  if (finished_order_.size() > kFinishedWritesKept) {
    finished_writes_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

void TcpConnection::write_chunk_abandoned(uint64_t op, uint64_t offset, int path) {
  IncomingWrite done;
  {
    std::lock_guard lock(mu_);
    if (finished_writes_.count(op) > 0) return;
    auto it = incoming_.find(op);
    if (it == incoming_.end()) return;
    Result<bool> complete = it->second.arrivals.end(offset, path, 0, /*landed=*/false);
    if (!complete.ok() || !*complete) return;
    done = std::move(it->second);
    incoming_.erase(it);
    remember_finished_write(op);
  }
  held_->budget.give(done.charged);
  if (Status s = complete_write(op, done); !s.ok()) fail(s);
}

Status TcpConnection::complete_write(uint64_t op, IncomingWrite& done) {
  // The initiator aborted it: it expects no answer, and sends its
  // notification's skip itself.
  if (done.arrivals.aborted()) return Status();
  if (done.note_seq != 0 || !done.notification.empty()) {
    Status queued = notes_.push_numbered(done.note_seq, !done.error.ok(), std::move(done.notification));
    if (!queued.ok()) return fail_with(queued.with_context(where()));
  }
  ack(op, done.error);
  return Status();
}

Status TcpConnection::land_write(int fd, int path, const FrameHeader& h, std::string& aux) {
  uint64_t op = h.id;
  const bool aborted = (h.flags & kFlagAborted) != 0;
  if (aux.size() > kMaxNotification) {
    return Status(Code::kDataLoss, where() + ": write " + std::to_string(op) + " carries a notification of " +
                                       std::to_string(aux.size()) + " bytes, past the limit of " +
                                       std::to_string(kMaxNotification) + " that every sender keeps");
  }
  if (!aborted && h.payload_len == 0 && h.d != 0) {
    // Only an empty write travels as an empty chunk; empty ones at every
    // offset would each be remembered.
    return Status(Code::kDataLoss,
                  where() + ": empty chunk of write " + std::to_string(op) + " of " + std::to_string(h.d) + " bytes");
  }
  // The key and the bounds are checked before any state is kept for a write.
  Result<core::MemorySpan> span = Status(Code::kCancelled, "aborted");
  if (!aborted) span = ctx_->registry.resolve_export(h.a, h.b, h.c, h.payload_len);
  ChunkArrivals::Begin begin;
  Status refused;  // a write refused at its first chunk: answered now, and nothing of it kept
  bool over = false;
  {
    std::lock_guard lock(mu_);
    if (finished_writes_.count(op) > 0) {
      begin.land = false;  // finished, or aborted with nothing of it still arriving
    } else if (aborted) {
      // Chunks of it still on other paths are dropped from now on. It is
      // over once none is still being written into the export; a path still
      // bringing this chunk was given up by the peer (its late bytes must
      // not land where the peer may write again).
      begin.land = false;
      auto it = incoming_.find(op);
      ChunkArrivals::Abort abort =
          it != incoming_.end() ? it->second.arrivals.abort(h.c, path) : ChunkArrivals::Abort{true, -1};
      begin.stalled_path = abort.stalled_path;
      if (abort.over) {
        if (it != incoming_.end()) {
          held_->budget.give(it->second.charged);
          incoming_.erase(it);
        }
        remember_finished_write(op);
      }
    } else {
      auto it = incoming_.find(op);
      if (it == incoming_.end()) {
        refused = span.status();
        if (refused.ok()) refused = ctx_->registry.resolve_export(h.a, h.b, 0, h.d).status();  // its whole size fits
        if (refused.ok() && !(over = !held_->budget.take(kWriteBytes))) {
          it = incoming_.try_emplace(op).first;
          it->second.arrivals = ChunkArrivals(h.d);
          it->second.charged = kWriteBytes;
        } else if (!refused.ok()) {
          begin.land = false;
          remember_finished_write(op);  // its other chunks are dropped
        }
      }
      if (it != incoming_.end()) {
        IncomingWrite& w = it->second;
        if (w.arrivals.total() != h.d) {
          return Status(Code::kDataLoss, where() + ": chunks of write " + std::to_string(op) + " disagree on its size");
        }
        begin = w.arrivals.begin(h.c, path);
        // The peer chooses how small the chunks are: each one's record counts.
        if (begin.land && !(over = !held_->budget.take(kArrivalBytes + aux.size()))) {
          w.charged += kArrivalBytes + aux.size();
        }
        if (over) (void)w.arrivals.end(h.c, path, 0, /*landed=*/false);
      }
    }
  }
  if (over) return fail_with(exhausted("writes still arriving"));
  if (begin.stalled_path >= 0) give_up_stalled_path(begin.stalled_path, path, h.c);
  // Drained outside the lock: a payload that stalls holds up nothing else.
  if (!refused.ok()) {
    FERRY_RETURN_IF_ERROR(drain(fd, h.payload_len));
    // As for a write that failed: its notification's number is given up, and the initiator told.
    if (h.e != 0) {
      Status skipped = notes_.push_numbered(h.e, /*skip=*/true, {});
      if (!skipped.ok()) return fail_with(skipped.with_context(where()));
    }
    ack(op, refused);
    return Status();
  }
  if (!begin.land) return drain(fd, h.payload_len);  // over, or a resent chunk that had landed already
  FrameHeader fh = h;
  std::weak_ptr<TcpConnection> self = weak_from_this();
  auto guard = std::make_shared<ArrivalGuard>([self, op, offset = h.c, path] {
    if (auto c = self.lock()) c->write_chunk_abandoned(op, offset, path);
  });
  Landed account = [this, fh, path, guard, note = std::move(aux)](const Status& landed) mutable -> Status {
    guard->disarm();
    uint64_t op = fh.id;
    IncomingWrite done;
    {
      std::lock_guard lock(mu_);
      if (finished_writes_.count(op) > 0) return Status();  // aborted while this chunk was copied
      auto it = incoming_.find(op);
      if (it == incoming_.end()) return Status();
      IncomingWrite& w = it->second;
      if (!note.empty()) w.notification = std::move(note);
      if (fh.e != 0) w.note_seq = fh.e;
      if (!landed.ok() && w.error.ok()) w.error = landed;
      Result<bool> complete = w.arrivals.end(fh.c, path, fh.payload_len, /*landed=*/true);
      if (!complete.ok()) return complete.status().with_context(where() + ": write " + std::to_string(op));
      if (!*complete) return Status();
      done = std::move(w);
      incoming_.erase(it);
      remember_finished_write(op);
    }
    held_->budget.give(done.charged);
    return complete_write(op, done);
  };
  if (!span.ok()) {
    FERRY_RETURN_IF_ERROR(drain(fd, h.payload_len));
    Status why = span.status();
    return after_earlier(path, [account = std::move(account), why]() mutable { return account(why); });
  }
  core::SegmentList dest;
  dest.add(std::move(span).value());
  return receive_payload(fd, path, dest, 0, dest.total(),
                         "export " + std::to_string(h.a) + " was deregistered during the write", std::move(account));
}

Status TcpConnection::receive_payload(int fd, int path, const core::SegmentList& dest, uint64_t offset, uint64_t size,
                                      const std::string& gone, Landed landed) {
  // Holds the regions open until the bytes are in place (for GPU memory: until
  // the copy to the device finished), and the list that names them.
  struct Held {
    core::SegmentList list;
    std::optional<core::ChunkAccess> access;
  };
  auto held = std::make_shared<Held>();
  held->list = dest;
  held->access.emplace(held->list, offset, size);
  if (!held->access->ok()) {
    held.reset();
    FERRY_RETURN_IF_ERROR(drain(fd, size));
    Status why(Code::kNotFound, gone);
    return after_earlier(path, [landed = std::move(landed), why]() { return landed(why); });
  }
  std::vector<Piece> pieces;
  pieces_of(held->list, offset, size, pieces);
  if (staged_bytes(pieces) == 0) {
    std::vector<struct iovec> iov;
    for (const Piece& p : pieces) iov.push_back({p.data, p.size});
    FERRY_RETURN_IF_ERROR(platform::recv_all(fd, iov.data(), static_cast<int>(iov.size())));
    held.reset();
    return after_earlier(path, [landed = std::move(landed)]() { return landed(Status()); });
  }
  if (path < 0) {
    // The control stream carries small payloads only: land them synchronously.
    std::string bytes(size, '\0');
    FERRY_RETURN_IF_ERROR(platform::recv_exact(fd, bytes.data(), bytes.size()));
    Status s = exchange(pieces, reinterpret_cast<uint8_t*>(bytes.data()), /*to_buffer=*/false);
    held.reset();
    return landed(s);
  }
  std::unique_ptr<RxStager>& stager = rx_stage_[static_cast<size_t>(path)];
  if (!stager) {
    stager = std::make_unique<RxStager>(new_copier(), ctx_->options.staging_chunk_bytes, ctx_->options.staging_depth);
  }
  return stager->receive(fd, pieces, [held, landed = std::move(landed)]() mutable {
    held.reset();  // the bytes are in place: the regions may go
    return landed(Status());
  });
}

Status TcpConnection::after_earlier(int path, std::function<Status()> fn) {
  if (path >= 0) {
    std::unique_ptr<RxStager>& stager = rx_stage_[static_cast<size_t>(path)];
    if (stager && !stager->idle()) return stager->then(std::move(fn));
  }
  return fn();
}

Status TcpConnection::count_landed(int path, bool ack_request) {
  uint64_t landed = ++landed_chunks_[static_cast<size_t>(path)];
  if (ack_request) {
    Outgoing o;
    o.header.type = FrameType::kChunkAck;
    o.header.a = static_cast<uint64_t>(path);
    o.header.b = landed;
    queue_control(std::move(o));
  }
  return Status();
}

// ---- staging --------------------------------------------------------------------

std::unique_ptr<Copier> TcpConnection::new_copier() const {
  return hooks_.make ? hooks_.make() : make_cuda_copier(kernels_);
}

std::unique_ptr<Copier> TcpConnection::new_control_copier() const {
  // A kernel writing to or reading from pageable memory faults where the GPU
  // cannot address it (CUDA_ERROR_ILLEGAL_ADDRESS, which ends the context):
  // a 4 KiB send between GPUs did so on the two-H200 host.
  return hooks_.make ? hooks_.make() : make_cuda_copier(nullptr);
}

void TcpConnection::pieces_of(const core::SegmentList& list, uint64_t offset, uint64_t size,
                              std::vector<Piece>& out) const {
  std::vector<core::SpanPiece> spans;
  list.pieces(offset, size, spans);
  for (const core::SpanPiece& p : spans) {
    out.push_back(Piece{p.data, p.size, p.device, p.kind == MemoryKind::kCuda || hooks_.stage_host});
  }
}

bool TcpConnection::stages(const core::SegmentList& list) const {
  return !list.empty() && (hooks_.stage_host || list.has_gpu());
}

uint64_t TcpConnection::chunk_for(const core::SegmentList& list, uint64_t paths) const {
  if (!stages(list)) return 0;
  int n = paths != 0 ? std::popcount(paths) : static_cast<int>(data_.size());
  return staged_chunk_bytes(list.total(), n, ctx_->options.staging_chunk_bytes);
}

Status TcpConnection::exchange(std::span<const Piece> pieces, uint8_t* buffer, bool to_buffer) {
  std::lock_guard lock(control_copy_mu_);
  if (!control_copier_) control_copier_ = new_control_copier();
  bool copied = false;
  for (const Piece& p : pieces) {
    uint8_t* mine = buffer;
    buffer += p.size;
    if (!p.staged) {
      std::memcpy(to_buffer ? mine : p.data, to_buffer ? p.data : mine, p.size);
      continue;
    }
    Status s = control_copier_->copy(p.device, to_buffer ? mine : p.data, to_buffer ? p.data : mine, p.size);
    if (!s.ok()) {
      // The pieces queued before this one use the caller's region and buffer.
      if (copied) control_copier_->wait_all();
      return s;
    }
    copied = true;
  }
  if (!copied) return Status();
  auto t = control_copier_->fence();
  if (!t.ok()) {
    (void)control_copier_->sync();  // the copies use the caller's region and buffer
    return t.status();
  }
  return control_copier_->wait(t.value());
}

Status TcpConnection::copy_in(const core::SegmentList& dest, const uint8_t* src, uint64_t size) {
  std::vector<Piece> pieces;
  pieces_of(dest, 0, size, pieces);
  if (staged_bytes(pieces) == 0) {
    dest.copy_in(0, src, size);
    return Status();
  }
  return exchange(pieces, const_cast<uint8_t*>(src), /*to_buffer=*/false);
}

Status TcpConnection::handle_eager(int fd, const FrameHeader& h) {
  if (h.payload_len != h.a) return Status(Code::kDataLoss, where() + ": eager message size and payload disagree");
  if (h.a > Options::kMaxInline) {
    // No engine sends one this large: a header that would make this side
    // allocate up to the frame limit before a byte of payload arrived.
    return Status(Code::kDataLoss, where() + ": eager message of " + std::to_string(h.a) +
                                       " bytes, more than any engine sends inline (" +
                                       std::to_string(Options::kMaxInline) + ")");
  }
  PostedRecv recv;
  bool matched = false, over = false;
  {
    std::lock_guard lock(mu_);
    if (!posted_.empty()) {
      recv = std::move(posted_.front());
      posted_.pop_front();
      matched = true;
    }
  }
  if (matched && recv.dest.total() >= h.a && !stages(recv.dest)) {
    // The common case: straight from the socket into the posted buffer.
    Status s, stream;
    {
      core::ChunkAccess access(recv.dest, 0, h.a);
      if (access.ok()) {
        std::vector<struct iovec> iov;
        recv.dest.slice(0, h.a, iov);
        stream = platform::recv_all(fd, iov.data(), static_cast<int>(iov.size()));
      } else {
        stream = drain(fd, h.a);
        s = Status(Code::kNotFound, "receive buffer was deregistered before the message arrived");
      }
    }
    if (!stream.ok()) {
      // The stream broke mid-message: this receive, taken off posted_, is
      // no longer where the connection's failure would find it.
      recv.state->finish(stream.with_context(where()));
      return stream;
    }
    recv.state->set_bytes(h.a);
    ack(h.id, s);
    recv.state->finish(s);
    return Status();
  }
  std::string bytes(h.a, '\0');
  if (Status s = platform::recv_exact(fd, bytes.data(), bytes.size()); !s.ok()) {
    if (matched) recv.state->finish(s.with_context(where()));  // as above
    return s;
  }
  if (matched) {
    complete_recv_now(recv, h.id, h.a, bytes);  // reports the too-small buffer
    return Status();
  }
  {
    std::lock_guard lock(mu_);
    if (!posted_.empty()) {
      // A receive was posted while the bytes were read; it is the match.
      recv = std::move(posted_.front());
      posted_.pop_front();
      matched = true;
    } else if (held_->budget.take(kUnexpectedBytes + bytes.size())) {
      unexpected_.push_back(Unexpected{h.id, h.a, false, std::move(bytes)});
      arrived_.notify_all();
    } else {
      over = true;
    }
  }
  if (over) return fail_with(exhausted("messages no receive was posted for"));
  if (matched) complete_recv_now(recv, h.id, h.a, bytes);
  return Status();
}

Status TcpConnection::handle_rts(const FrameHeader& h) {
  PostedRecv recv;
  bool over = false;
  {
    std::lock_guard lock(mu_);
    if (posted_.empty()) {
      if (held_->budget.take(kUnexpectedBytes)) {
        unexpected_.push_back(Unexpected{h.id, h.a, true, {}});
        arrived_.notify_all();
        return Status();
      }
      over = true;
    } else {
      recv = std::move(posted_.front());
      posted_.pop_front();
    }
  }
  if (over) return fail_with(exhausted("messages no receive was posted for"));
  match_rendezvous(std::move(recv), h.id, h.a);
  return Status();
}

Status TcpConnection::handle_cts(const FrameHeader& h) {
  std::shared_ptr<OutOp> out;
  {
    std::lock_guard lock(mu_);
    auto it = awaiting_cts_.find(h.id);
    if (it == awaiting_cts_.end()) {
      return Status(Code::kDataLoss, where() + ": clear-to-send for unknown send " + std::to_string(h.id));
    }
    out = std::move(it->second);
    awaiting_cts_.erase(it);
    sending_[h.id] = out;
  }
  out->header.type = FrameType::kData;
  out->header.id = h.a;
  if (!chunks_.push(out)) out->state->finish(usable());
  return Status();
}

Status TcpConnection::handle_ack(const FrameHeader& h, std::string& aux) {
  std::shared_ptr<TransferState> state;
  Status answer = peer_status(h.code, aux, where());
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(h.id);
    if (it == pending_.end()) return Status();  // already failed or finished locally
    if (auto o = sending_.find(h.id); o != sending_.end()) {
      std::shared_ptr<OutOp> op = o->second.lock();
      if (op) {
        if (h.code == 0 && !chunks_.claimed_all(*op)) {
          return Status(Code::kDataLoss, where() + ": the peer acknowledged operation " + std::to_string(h.id) +
                                             " before all of it was sent");
        }
        if (ChunkQueue::acknowledged(*op)) return Status();  // repeated: the first one stands
        // Refused: the rest of it goes out empty, marked aborted.
        if (h.code != 0) chunks_.abort(op);
        // A path still sending a chunk of it finishes it (finish_acknowledged).
        if (!ChunkQueue::acknowledge(*op, answer)) return Status();
      }
      sending_.erase(o);
    }
    if (auto l = landings_.find(h.id); l != landings_.end()) {
      // A read: its DATA answers it, and completes it once every byte is in
      // place. An ACK may only refuse it, before any of its bytes came.
      // (Held here: erasing it below must not free the mutex locked next.)
      std::shared_ptr<Landing> landing = l->second;
      Landing& read = *landing;
      std::lock_guard ll(read.mu);
      if (h.code == 0) {
        return Status(Code::kDataLoss, where() + ": the peer acknowledged read " + std::to_string(h.id) +
                                           " as done; a read is answered by its data");
      }
      if (read.arrivals.received() > 0 || read.arrivals.arriving()) {
        return Status(Code::kDataLoss,
                      where() + ": the peer refused read " + std::to_string(h.id) + " after its data began to land");
      }
      read.arrivals.stop();  // a chunk that comes after all the same is dropped
      held_->budget.give(std::exchange(read.charged, 0));
      landings_.erase(l);
    }
    state = std::move(it->second);
    pending_.erase(it);
    awaiting_cts_.erase(h.id);
  }
  state->finish_part(answer);
  return Status();
}

void TcpConnection::finish_acknowledged(const OutOp& op) {
  uint64_t id = op.header.type == FrameType::kData ? op.state->id() : op.header.id;
  bool was_pending;
  {
    std::lock_guard lock(mu_);
    sending_.erase(id);
    was_pending = pending_.erase(id) > 0;
  }
  if (!was_pending) return;  // fail() finished it
  // The peer may have answered while the chunk was on its way; once the
  // connection failed, whether the chunk got out is not known.
  Status answer = op.answer;
  if (answer.ok() && failed_.load(std::memory_order_acquire)) answer = health();
  op.state->finish_part(answer);
}

Status TcpConnection::handle_read_req(const FrameHeader& h) {
  auto span = ctx_->registry.resolve_export(h.a, h.b, h.c, h.d);
  if (!span.ok()) {
    ack(h.id, span.status());
    return Status();
  }
  auto out = std::make_shared<OutOp>();
  out->header.type = FrameType::kData;
  out->header.id = h.id;
  out->source.add(std::move(span).value());
  out->paths = paths_for(out->source);
  out->chunk_bytes = chunk_for(out->source, out->paths);
  if (h.d <= ctx_->options.inline_max) {
    Outgoing o;
    o.header = out->header;
    o.payload_op = std::move(out);
    queue_control(std::move(o));  // counted there
  } else {
    if (!held_->take_reply(kReplyBytes)) return fail_with(exhausted("replies the peer does not read"));
    out->hold = std::make_shared<ReplyHold>(held_, kReplyBytes);
    chunks_.push(std::move(out));
  }
  return Status();
}

Status TcpConnection::handle_frame(int fd, int path, const FrameHeader& h, std::string& aux) {
  bool on_control = path < 0;
  switch (h.type) {
    case FrameType::kData:
      return land_data(fd, path, h);
    case FrameType::kWrite:
      return land_write(fd, path, h, aux);
    default:
      break;
  }
  if (!on_control) {
    return Status(Code::kDataLoss, where() + ": " + std::string(frame_type_name(h.type)) + " frame on data stream " +
                                       std::to_string(path));
  }
  if (h.type != FrameType::kEager && h.payload_len != 0) {
    return Status(Code::kDataLoss, where() + ": " + std::string(frame_type_name(h.type)) + " frame with a payload");
  }
  switch (h.type) {
    case FrameType::kHeartbeat:
      return Status();
    case FrameType::kClose:
      closed_by_peer_ = true;
      fail(Status(Code::kPeerLost, where() + ": the peer closed the connection"));
      return Status();
    case FrameType::kEager:
      return handle_eager(fd, h);
    case FrameType::kRts:
      return handle_rts(h);
    case FrameType::kCts:
      return handle_cts(h);
    case FrameType::kAck:
      return handle_ack(h, aux);
    case FrameType::kReadReq:
      return handle_read_req(h);
    case FrameType::kNotify:
      // Confirmed once taken, before the application can see it: one that
      // closes the moment it sees the note would otherwise send CLOSE ahead
      // of the confirmation, and the sender's notify would fail although
      // the note arrived.
      {
        Status queued = notes_.push_numbered(h.e, (h.flags & kFlagNoteSkip) != 0, std::move(aux), [&] {
          if (h.id != 0) ack(h.id, Status());
        });
        return queued.ok() ? queued : fail_with(queued.with_context(where()));
      }
    case FrameType::kChunkAck:
      chunks_.on_landed(static_cast<int>(h.a), h.b);
      return Status();
    default:
      return Status(Code::kDataLoss,
                    where() + ": unexpected " + std::string(frame_type_name(h.type)) + " frame after the handshake");
  }
}

void TcpConnection::control_rx_loop() {
  int fd = control_.fd();
  std::string aux;
  for (;;) {
    if (Status room = await_reply_room(); !room.ok()) {
      fail(room);
      return;
    }
    wire::HeaderBytes hb;
    Status s = platform::recv_exact(fd, hb.data(), hb.size());
    if (!s.ok()) {
      fail(Status(Code::kPeerLost, where() + ": control stream: " + s.message()));
      return;
    }
    last_rx_ns_.store(now_ns(), std::memory_order_relaxed);
    auto h = wire::decode_header(hb.data(), hb.size());
    if (!h.ok()) {
      fail(h.status().with_context(where() + ": control stream"));
      return;
    }
    aux.resize(h->aux_len);
    if (h->aux_len > 0) s = platform::recv_exact(fd, aux.data(), aux.size());
    if (s.ok()) s = handle_frame(fd, -1, *h, aux);
    if (!s.ok()) {
      fail(s.code() == Code::kDataLoss ? s : Status(Code::kPeerLost, where() + ": control stream: " + s.message()));
      return;
    }
  }
}

void TcpConnection::path_rx_loop(int path) {
  int fd = data_[static_cast<size_t>(path)].fd();
  std::unique_ptr<RxStager>& stager = rx_stage_[static_cast<size_t>(path)];
  std::string aux;
  Status s;
  for (;;) {
    if (s = await_reply_room(); !s.ok()) {
      fail(s);
      break;
    }
    if (stager) {
      s = stager->before_read(fd);
      if (!s.ok()) {
        fail(s.with_context(where() + ": data stream " + std::to_string(path)));
        break;
      }
    }
    wire::HeaderBytes hb;
    s = platform::recv_exact(fd, hb.data(), hb.size());
    if (!s.ok()) {
      path_failed(path, s);
      break;
    }
    last_rx_ns_.store(now_ns(), std::memory_order_relaxed);
    auto h = wire::decode_header(hb.data(), hb.size());
    if (!h.ok()) {
      fail(h.status().with_context(where() + ": data stream " + std::to_string(path)));
      break;
    }
    aux.resize(h->aux_len);
    if (h->aux_len > 0) s = platform::recv_exact(fd, aux.data(), aux.size());
    if (s.ok()) s = handle_frame(fd, path, *h, aux);
    if (s.ok()) {
      bool ack_request = (h->flags & kFlagAckRequest) != 0;
      s = after_earlier(path, [this, path, ack_request] { return count_landed(path, ack_request); });
    }
    if (!s.ok()) {
      if (s.code() == Code::kDataLoss) {
        fail(s);
      } else {
        path_failed(path, s);
      }
      break;
    }
  }
  // Frames whose bytes fully arrived still count while the connection lives
  // (a path can die alone); then the slots go.
  if (stager && !failed_.load(std::memory_order_acquire)) (void)stager->retire(/*all=*/true);
  stager.reset();
}

// ---- sending chunks -----------------------------------------------------------

void TcpConnection::prepare_chunk(TxEntry& e, std::unique_ptr<TxStager>& stager) {
  const Chunk& c = e.chunk;
  if (chunks_.aborted(*c.op)) {
    e.abort = Status(Code::kCancelled, "transfer aborted (" + where() + ")");
    return;
  }
  e.access = std::make_shared<core::ChunkAccess>(c.op->source, c.offset, c.size);
  if (!e.access->ok()) {
    e.access.reset();
    e.abort = Status(Code::kNotFound, "source memory was deregistered during the transfer (" + where() + ")");
    return;
  }
  if (!stages(c.op->source)) return;
  std::vector<Piece> pieces;
  pieces_of(c.op->source, c.offset, c.size, pieces);
  if (staged_bytes(pieces) == 0) return;
  if (!stager) {
    stager = std::make_unique<TxStager>(new_copier(), ctx_->options.staging_chunk_bytes, ctx_->options.staging_depth);
  }
  Status s = stager->stage(pieces, e.staged);
  if (!s.ok()) {
    e.access.reset();
    e.abort = s.with_context("staging GPU memory for " + where());
    return;
  }
  e.staging = true;
}

void TcpConnection::await_staging(TxEntry& e, TxStager* stager) {
  if (!e.staging || !e.abort.ok()) return;
  Status s = stager->wait(e.staged);
  if (!s.ok()) e.abort = s.with_context("staging GPU memory for " + where());
}

Status TcpConnection::transmit_chunk(int fd, TxEntry& e, TxStager* stager) {
  const Chunk& c = e.chunk;
  OutOp& op = *c.op;
  FrameHeader h = op.header;
  h.payload_len = static_cast<uint32_t>(c.size);
  if (c.ack_request) h.flags |= kFlagAckRequest;
  std::string_view aux;
  if (h.type == FrameType::kData) {
    h.a = c.offset;
  } else {
    h.c = op.remote_base + c.offset;
    if (c.offset == 0) aux = op.first_aux;
  }
  if (e.abort.ok() && chunks_.aborted(op)) {
    // An earlier chunk of this op was aborted after this one was claimed.
    e.abort = Status(Code::kCancelled, "transfer aborted (" + where() + ")");
  }
  wire::HeaderBytes hb;
  std::vector<struct iovec> iov;
  if (!e.abort.ok()) {
    // The chunk still travels, empty and marked aborted, so the peer stops
    // waiting and the window stays honest.
    if (e.staging) stager->release(e.staged);
    e.access.reset();
    bool first = chunks_.abort(c.op);
    h.flags |= kFlagAborted;
    h.payload_len = 0;
    h.code = static_cast<uint32_t>(e.abort.code());
    h.aux_len = 0;
    encode_header(h, hb);
    iov.push_back({hb.data(), hb.size()});
    if (op.state && first) {
      bool was_pending;
      {
        std::lock_guard lock(mu_);
        uint64_t id = h.type == FrameType::kData ? op.state->id() : h.id;
        was_pending = pending_.erase(id) > 0;
        sending_.erase(id);
      }
      // One item of a vector operation: the others still move their bytes,
      // and the operation ends when they have. An item the peer already
      // acknowledged (a resent chunk aborting late) was counted then.
      if (was_pending) op.state->finish_part(e.abort);
    }
    return platform::send_all(fd, iov.data(), static_cast<int>(iov.size()));
  }
  h.aux_len = static_cast<uint16_t>(aux.size());
  encode_header(h, hb);
  iov.push_back({hb.data(), hb.size()});
  if (!aux.empty()) iov.push_back({const_cast<char*>(aux.data()), aux.size()});
  if (e.staging) {
    iov.insert(iov.end(), e.staged.iov.begin(), e.staged.iov.end());
  } else {
    op.source.slice(c.offset, c.size, iov);
  }
  Status s = platform::send_all(fd, iov.data(), static_cast<int>(iov.size()));
  if (e.staging) stager->release(e.staged);
  e.access.reset();
  return s;
}

void TcpConnection::path_tx_loop(int path) {
  int fd = data_[static_cast<size_t>(path)].fd();
  const size_t depth = static_cast<size_t>(ctx_->options.staging_depth);
  std::unique_ptr<TxStager> stager;  // made on the first chunk of GPU memory
  std::deque<TxEntry> pipe;          // claimed, not yet sent, in claim order
  auto take = [&](Chunk c) {
    pipe.emplace_back();
    pipe.back().chunk = std::move(c);
    prepare_chunk(pipe.back(), stager);
  };
  for (;;) {
    if (pipe.empty()) {
      std::optional<Chunk> c = chunks_.claim(path);
      if (!c) break;  // stopped, or the path failed
      take(std::move(*c));
    }
    // Host chunks go out one at a time as they are claimed. A staged chunk
    // goes once its copies are done; only then does the worker claim ahead
    // (without blocking), so that up to depth - 1 copies run while it is on
    // the wire. Claiming ahead earlier would put this path's second copy
    // beside every path's first one, and the device shares its copy
    // bandwidth among all of them: each first chunk would be ready later.
    await_staging(pipe.front(), stager.get());
    while (pipe.back().staging && pipe.size() < depth) {
      std::optional<Chunk> c = chunks_.try_claim(path);
      if (!c) break;
      take(std::move(*c));
    }
    Status s = transmit_chunk(fd, pipe.front(), stager.get());
    if (ChunkQueue::release(pipe.front().chunk)) finish_acknowledged(*pipe.front().chunk.op);
    pipe.pop_front();
    if (!s.ok()) {
      path_failed(path, s);
      break;
    }
  }
  // Unsent chunks stay with the queue (moved to other paths when this one
  // failed). Their copies end first: each entry holds its source region
  // open (dereg waits for it), and the copies read that region and write
  // the slots.
  if (stager) stager->drain();
  for (TxEntry& e : pipe) {
    e.access.reset();
    if (ChunkQueue::release(e.chunk)) finish_acknowledged(*e.chunk.op);
  }
  pipe.clear();
  stager.reset();
}

// ---- liveness and teardown ----------------------------------------------------

void TcpConnection::tick(Clock::time_point now) {
  if (failed_.load(std::memory_order_acquire)) return;
  int64_t t = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  int64_t silent = t - last_rx_ns_.load(std::memory_order_relaxed);
  const Options& o = ctx_->options;
  // While replies the peer does not read are over their cap, this side
  // stopped reading, and a reader ends it (await_reply_room) if they stay so.
  bool paused = held_->replies.load(std::memory_order_relaxed) > held_->reply_cap;
  if (!paused && silent > std::chrono::duration_cast<std::chrono::nanoseconds>(o.peer_timeout).count()) {
    fail(Status(Code::kPeerLost, where() + ": no traffic from the peer for " + std::to_string(silent / 1000000) +
                                     " ms (peer_timeout " + std::to_string(o.peer_timeout.count()) +
                                     " ms): stopped, partitioned or overloaded"));
    return;
  }
  int64_t closed = paths_closed_ns_.load(std::memory_order_acquire);
  if (closed != 0 && t - closed > kControlGraceNs) {
    Status down;
    {
      std::lock_guard lock(health_mu_);
      down = all_paths_down_;
    }
    fail(down);
    return;
  }
  int64_t idle = t - last_tx_ns_.load(std::memory_order_relaxed);
  if (idle >= std::chrono::duration_cast<std::chrono::nanoseconds>(o.heartbeat_interval).count()) {
    Outgoing hb;
    hb.header.type = FrameType::kHeartbeat;
    queue_control(std::move(hb));
  }
}

void TcpConnection::path_failed(int path, const Status& why) {
  if (failed_.load(std::memory_order_acquire)) return;
  if (path_dead_[static_cast<size_t>(path)].exchange(true)) return;
  {
    std::lock_guard lock(sockets_mu_);
    if (!sockets_closed_) data_[static_cast<size_t>(path)].shutdown();  // wakes the path's other worker
  }
  int live = chunks_.fail_path(path);
  const std::string& name = static_cast<size_t>(path) < paths_.size() ? paths_[static_cast<size_t>(path)].name : "";
  // An orderly close of a data stream means the peer is closing or exiting
  // (its control stream follows at once): not worth a warning. A link that
  // fails gives a reset or a timeout instead.
  bool orderly = why.message() == platform::kClosedByPeer;
  if (orderly) {
    FERRY_LOG(kInfo, "tcp", "%s: data path %d (%s) closed by the peer", where().c_str(), path, name.c_str());
  } else {
    FERRY_LOG(kWarn, "tcp", "%s: data path %d (%s) lost: %s; %d path(s) carry on", where().c_str(), path, name.c_str(),
              why.message().c_str(), live);
  }
  if (live == 0) {
    Status down(Code::kPeerLost, where() + ": every data path is down (last: path " + std::to_string(path) + " " +
                                     name + ": " + why.message() + ")");
    if (!orderly) {
      fail(down);
      return;
    }
    {
      std::lock_guard lock(health_mu_);
      all_paths_down_ = down;
    }
    // The peer is closing: what it sent on the control stream before its
    // goodbye (confirmations of notifications, acks) is still to be read
    // there, and sockets keep no order between each other. The control
    // stream's end fails the connection; tick() does if it never comes.
    closed_by_peer_ = true;
    paths_closed_ns_.store(now_ns(), std::memory_order_release);
  }
}

void TcpConnection::fail(const Status& reason) {
  if (failed_.exchange(true, std::memory_order_acq_rel)) return;
  // Once close() began here, whatever the peer did next is our own closing.
  Status why = closed_.load() ? Status(Code::kCancelled, where() + ": closed locally") : reason;
  {
    std::lock_guard lock(health_mu_);
    health_ = why;
  }
  if (why.code() == Code::kCancelled || closed_by_peer_.load()) {
    FERRY_LOG(kInfo, "tcp", "%s", why.message().c_str());
  } else {
    FERRY_LOG(kWarn, "tcp", "%s", why.to_string().c_str());
  }
  // Shutting the sockets down first wakes every thread blocked on them.
  {
    std::lock_guard lock(sockets_mu_);
    if (!sockets_closed_) {
      control_.shutdown();
      for (auto& d : data_) d.shutdown();
    }
  }
  std::vector<std::shared_ptr<OutOp>> queued = chunks_.stop();
  std::deque<Outgoing> unsent;
  {
    std::lock_guard lock(out_mu_);
    out_stopped_ = true;
    unsent.swap(out_);
  }
  for (Outgoing& o : unsent) held_->give_reply(o.charged);
  unsent.clear();
  out_cv_.notify_all();
  out_drained_cv_.notify_all();
  {
    std::lock_guard lock(held_->mu);  // a reader paused for reply room wakes to its end
    held_->room.notify_all();
  }
  std::vector<std::shared_ptr<TransferState>> states;
  std::vector<std::shared_ptr<TransferState>> parts;  // items of operations still draining
  std::unordered_set<const TransferState*> draining;   // operations that end later
  {
    std::lock_guard lock(mu_);
    // A receive or read with chunks still being written into its memory (a
    // staging copy, a receive breaking off) fails when the last of them
    // ends, not before: its memory is not the application's until then.
    for (auto& [tok, l] : landings_) {
      std::lock_guard ll(l->mu);
      if (l->arrivals.complete() || !l->arrivals.arriving()) continue;
      l->arrivals.stop();
      l->orphaned = true;
      if (l->error.ok()) l->error = why;
      draining.insert(l->state.get());
    }
    for (auto& [tok, l] : landings_) {
      if (draining.count(l->state.get()) == 0) {
        states.push_back(l->state);
        continue;
      }
      std::lock_guard ll(l->mu);
      if (!l->orphaned) parts.push_back(l->state);  // another item of a vector read
    }
    // Likewise a send or write with a chunk still held by a path worker (a
    // staging copy or sendmsg may still read its memory): it fails when the
    // worker lets go of it (finish_acknowledged), with this failure unless
    // the peer had answered it already.
    std::unordered_map<uint64_t, std::shared_ptr<TransferState>> held_by_paths;
    std::unordered_set<const TransferState*> sends_draining;
    for (auto& [id, weak] : sending_) {
      std::shared_ptr<OutOp> op = weak.lock();
      if (!op || !op->state) continue;
      bool held = ChunkQueue::acknowledged(*op) ? ChunkQueue::on_a_path(*op) : !ChunkQueue::acknowledge(*op, why);
      auto p = pending_.find(id);
      if (!held || p == pending_.end()) continue;
      held_by_paths.insert(*p);
      sends_draining.insert(p->second.get());
      draining.insert(p->second.get());
    }
    for (auto& [op, st] : pending_) {
      if (draining.count(st.get()) == 0) {
        states.push_back(st);
      } else if (sends_draining.count(st.get()) != 0 && held_by_paths.count(op) == 0) {
        parts.push_back(st);  // another item of a vector write, held by no path
      }
    }
    for (auto& r : posted_) states.push_back(r.state);
    pending_.clear();
    awaiting_cts_.clear();
    sending_.clear();
    posted_.clear();
    landings_.clear();
    incoming_.clear();
    unexpected_.clear();
    pending_ = std::move(held_by_paths);
  }
  arrived_.notify_all();  // probes see failed_
  for (auto& op : queued) {
    if (op->state && draining.count(op->state.get()) == 0) states.push_back(op->state);
  }
  for (auto& st : parts) st->finish_part(why);
  for (auto& st : states) st->finish(why);
  notes_.wake();
}

void TcpConnection::close() {
  if (closed_.exchange(true)) return;
  if (!failed_.load()) {
    // Frames already queued go first (an application that closes the moment
    // it sees a notification has queued its confirmation), then the goodbye.
    // Wait a little for them, but never block on a peer that stopped reading.
    {
      std::unique_lock lock(out_mu_);
      out_drained_cv_.wait_for(lock, std::chrono::milliseconds(100),
                               [&] { return out_stopped_ || (out_.empty() && !out_writing_); });
    }
    // A writer may be mid-frame: try for up to 100 ms, once a millisecond.
    // (Not a timed mutex: ThreadSanitizer does not follow the clock-based lock
    // behind std::timed_mutex and reports each of its unlocks as an error.)
    std::unique_lock lock(control_write_mu_, std::defer_lock);
    for (int i = 0; i < 100 && !lock.try_lock(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (lock.owns_lock() && !failed_.load()) {  // failed: the stream may be closed already
      wire::FrameHeader h;
      h.type = FrameType::kClose;
      wire::HeaderBytes hb;
      encode_header(h, hb);
      ssize_t ignored = ::send(control_.fd(), hb.data(), hb.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)ignored;
    }
  }
  fail(Status(Code::kCancelled, where() + ": closed locally"));
  bool joined_all = true;
  for (auto& t : threads_) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) {
      t.join();
    } else if (t.joinable()) {
      joined_all = false;  // closed from one of its own workers, which releases on its way out
    }
  }
  if (joined_all) release_sockets();
}

}  // namespace ferry::tcp
