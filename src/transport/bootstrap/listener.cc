// The acceptor's side of the handshake.
#include "transport/bootstrap/listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "platform/log.h"
#include "platform/crypto.h"
#include "platform/identity.h"
#include "platform/system_error.h"
#include "platform/thread.h"
#include "transport/handshake_io.h"
#include "transport/local/local_handshake.h"
#include "transport/tcp/tcp_transport.h"
#include "wire/handshake.h"

namespace ferry::bootstrap {
namespace {

// How long a stream past max_handshakes (or its group's share of them)
// waits for a handshake to end, before it is closed unread.
constexpr auto kHandshakeWait = std::chrono::milliseconds(200);
// A stream's whole HELLO arrives within this (or handshake_timeout if
// shorter): an honest connector sends it as soon as it connected, so a
// stream silent for longer only holds a slot.
constexpr auto kHelloWait = std::chrono::milliseconds(1000);
// A handshake past its HELLO that runs this long may be cut off to make
// room (an honest one takes a few round trips).
constexpr auto kStaleHandshake = std::chrono::milliseconds(1000);
// Streams parked at once: per address group, enough for an honest connector's
// burst of data streams (at most 64); in all, a bound on the descriptors
// they hold.
constexpr size_t kParkedPerGroup = 64;
constexpr size_t kParkedMost = 128;
// Streams accepted per wake-up of the accept loop, before parked ones are
// looked at again.
constexpr int kAcceptBatch = 64;

}  // namespace

Result<std::unique_ptr<TcpListener>> TcpListener::bind(std::shared_ptr<core::EngineContext> ctx,
                                                       const platform::HostPort& at, OnConnection on_connection,
                                                       NextId next_id) {
  FERRY_ASSIGN_OR_RETURN(platform::Socket s, platform::listen_tcp(at));
  FERRY_ASSIGN_OR_RETURN(uint16_t port, platform::local_port(s));
  int flags = ::fcntl(s.fd(), F_GETFL);
  if (flags < 0 || ::fcntl(s.fd(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return platform::errno_status(Code::kInternal, "listening socket: fcntl");
  }
  platform::Socket wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return platform::errno_status(Code::kResourceExhausted, "eventfd");
  return std::unique_ptr<TcpListener>(new TcpListener(std::move(ctx), std::move(s), std::move(wake), port,
                                                      std::move(on_connection), std::move(next_id)));
}

Status TcpListener::run() {
  FERRY_ASSIGN_OR_RETURN(accept_thread_, platform::try_start_thread("ferry-accept", [this] { accept_loop(); }));
  return Status();
}

TcpListener::TcpListener(std::shared_ptr<core::EngineContext> ctx, platform::Socket listen, platform::Socket wake,
                         uint16_t port, OnConnection on_connection, NextId next_id)
    : ctx_(std::move(ctx)),
      listen_(std::move(listen)),
      wake_(std::move(wake)),
      port_(port),
      on_connection_(std::move(on_connection)),
      next_id_(std::move(next_id)) {}

TcpListener::~TcpListener() { stop(); }

void TcpListener::stop() {
  std::map<uint64_t, Handshake> running;
  {
    platform::MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [id, h] : handshakes_) {
      if (!h.done && h.fd >= 0) ::shutdown(h.fd, SHUT_RDWR);
    }
  }
  cv_.notify_all();
  listen_.shutdown();
  wake();
  if (accept_thread_.joinable()) accept_thread_.join();
  std::deque<Parked> parked;
  {
    platform::MutexLock lock(mu_);
    running.swap(handshakes_);
    parked.swap(parked_);
  }
  for (auto& [id, h] : running) {
    if (h.thread.joinable()) h.thread.join();
  }
  // Every thread that could touch it has been joined; it is emptied under
  // the lock all the same, and what it held closes outside it.
  std::map<uint64_t, std::shared_ptr<Pending>> pending;
  {
    platform::MutexLock lock(mu_);
    pending.swap(pending_);
  }
}

void TcpListener::wake() {
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_.fd(), &one, sizeof one);  // full: a wake-up is pending anyway
  (void)ignored;
}

void TcpListener::reap_locked() {
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    if (it->second.done) {
      it->second.thread.join();
      it = handshakes_.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpListener::uncount_locked(Handshake& h) {
  if (!h.counted) return;
  h.counted = false;
  --counted_;
  if (auto it = counted_by_group_.find(h.group); it != counted_by_group_.end() && --it->second <= 0) {
    counted_by_group_.erase(it);
  }
  if (!parked_.empty()) wake();
}

void TcpListener::hello_seen(uint64_t handshake_id) {
  platform::MutexLock lock(mu_);
  auto it = handshakes_.find(handshake_id);
  if (it != handshakes_.end()) it->second.hello_seen = true;
}

bool TcpListener::make_room_locked(const std::string& group) {
  const int most = std::max(1, ctx_->options.max_handshakes);
  // The group that gives way: the newcomer's own once it holds its share,
  // else the one holding the most.
  std::string from = group;
  auto own = counted_by_group_.find(group);
  if (own == counted_by_group_.end() || own->second < (most + 1) / 2) {
    int largest = 0;
    for (const auto& [g, n] : counted_by_group_) {
      if (n > largest) {
        largest = n;
        from = g;
      }
    }
  }
  const auto now = Clock::now();
  Handshake* victim = nullptr;
  for (auto& [id, h] : handshakes_) {  // ids rise with time: the first found is the oldest
    if (h.done || !h.counted || h.cut_off || h.fd < 0 || h.group != from) continue;
    if (!h.hello_seen) {
      victim = &h;
      break;
    }
    if (victim == nullptr && now - h.since > kStaleHandshake) victim = &h;
  }
  if (victim == nullptr) return false;
  victim->cut_off = true;
  ::shutdown(victim->fd, SHUT_RDWR);  // its thread wakes, ends and gives the slot back
  return true;
}

void TcpListener::uncount(uint64_t handshake_id) {
  platform::MutexLock lock(mu_);
  auto it = handshakes_.find(handshake_id);
  if (it != handshakes_.end()) uncount_locked(it->second);
}

bool TcpListener::fits_locked(const std::string& group) const {
  const int most = std::max(1, ctx_->options.max_handshakes);
  if (counted_ >= most) return false;
  auto it = counted_by_group_.find(group);
  return it == counted_by_group_.end() || it->second < (most + 1) / 2;
}

void TcpListener::start_handshake_locked(platform::Socket s, std::string group) {
  uint64_t id = next_handshake_++;
  Handshake& h = handshakes_[id];
  h.fd = s.fd();
  h.group = std::move(group);
  h.since = Clock::now();
  ++counted_;
  ++counted_by_group_[h.group];
  auto started = platform::try_start_thread(
      "ferry-hs-" + std::to_string(id),
      [this, id, sock = std::make_shared<platform::Socket>(std::move(s))]() mutable { serve(id, std::move(*sock)); });
  if (!started.ok()) {
    // The stream closes with the dropped function that owned it.
    FERRY_ENGINE_LOG(kWarn, "tcp", ctx_->engine_id, "closed an incoming stream: %s",
                     started.status().to_string().c_str());
    if (ctx_->metrics) ctx_->metrics->handshake_refused(code_name(started.status().code()));
    uncount_locked(h);
    handshakes_.erase(id);
    return;
  }
  h.thread = std::move(started).value();
}

void TcpListener::closed_unread_locked(const std::string& group) {
  if (ctx_->metrics) ctx_->metrics->handshake_refused("busy");
  auto now = Clock::now();
  if (now - busy_logged_ < std::chrono::seconds(1)) return;
  busy_logged_ = now;
  auto it = counted_by_group_.find(group);
  FERRY_ENGINE_LOG(
      kWarn, "tcp", ctx_->engine_id,
      "%d handshakes in progress, %d of them from %s (max_handshakes, half of it per address group): closing "
      "incoming streams unread",
      counted_, it == counted_by_group_.end() ? 0 : it->second, group.c_str());
}

void TcpListener::start_parked_locked() {
  auto now = Clock::now();
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (fits_locked(it->group)) {
      start_handshake_locked(std::move(it->stream), std::move(it->group));
    } else if (now - it->since >= kHandshakeWait) {
      closed_unread_locked(it->group);
    } else {
      ++it;
      continue;
    }
    it = parked_.erase(it);  // an expired stream closes here
  }
}

void TcpListener::place_locked(platform::Socket s) {
  std::string group = core::address_group(core::host_of(platform::peer_name(s.fd())));
  // The parked streams that fit were started just before: one that is still
  // parked does not fit, nor does a new stream of its group.
  if (fits_locked(group)) {
    start_handshake_locked(std::move(s), std::move(group));
    return;
  }
  size_t mine = 0;
  for (const Parked& p : parked_) mine += p.group == group;
  if (mine < kParkedPerGroup && parked_.size() < kParkedMost) {
    // A slot frees once the handshake cut off for it ends; the stream waits
    // for it parked.
    (void)make_room_locked(group);
    parked_.push_back(Parked{std::move(s), std::move(group), Clock::now()});
    return;
  }
  closed_unread_locked(group);  // `s` closes
}

void TcpListener::accept_loop() {
  std::vector<platform::Socket> fresh;
  platform::UniqueLock lock(mu_);
  while (!stopping_) {
    reap_locked();
    start_parked_locked();
    int timeout = -1;  // ms
    if (!parked_.empty()) {
      auto left = parked_.front().since + kHandshakeWait - Clock::now();
      timeout = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
      timeout = std::max(timeout, 0);
    }
    lock.unlock();
    pollfd p[2] = {{listen_.fd(), POLLIN, 0}, {wake_.fd(), POLLIN, 0}};
    int ready = ::poll(p, 2, timeout);
    if ((p[1].revents & POLLIN) != 0) {
      uint64_t count;
      ssize_t ignored = ::read(wake_.fd(), &count, sizeof count);
      (void)ignored;
    }
    int err = 0;
    if (ready > 0 && p[0].revents != 0) {
      for (int i = 0; i < kAcceptBatch; ++i) {
        int fd = ::accept4(listen_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          fresh.emplace_back(fd);
        } else if (errno != EINTR && errno != ECONNABORTED) {
          if (errno != EAGAIN && errno != EWOULDBLOCK) err = errno;
          break;
        }
      }
    }
    lock.lock();
    if (stopping_) return;  // `fresh` closes
    // Handshakes that ended meanwhile go to the streams parked before these.
    reap_locked();
    start_parked_locked();
    for (platform::Socket& s : fresh) place_locked(std::move(s));
    fresh.clear();
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
      FERRY_ENGINE_LOG(kWarn, "tcp", ctx_->engine_id, "accept: out of resources (errno %d); retrying", err);
      // Sleeping here (not spinning) gives descriptors a chance to be freed.
      cv_.wait_for(lock.native(), std::chrono::milliseconds(50));
    } else if (err != 0) {
      FERRY_ENGINE_LOG(kError, "tcp", ctx_->engine_id, "accept failed (errno %d); the engine no longer accepts peers",
                       err);
      return;
    }
  }
}

void TcpListener::serve(uint64_t handshake_id, platform::Socket s) {
  std::string from = platform::peer_name(s.fd());
  Deadline deadline = Clock::now() + ctx_->options.handshake_timeout;
  Status st;
  auto hello_frame = read_handshake_frame(s.fd(), std::min(deadline, Clock::now() + kHelloWait));
  if (!hello_frame.ok()) {
    st = hello_frame.status();
  } else {
    hello_seen(handshake_id);
    // The offer is judged from the header alone: a HELLO of a version this
    // engine does not speak is refused in words, whatever its aux bytes.
    auto versions = wire::hello_versions(hello_frame->header);
    auto chosen =
        versions.ok() ? wire::negotiate(wire::kSpokenVersions, *versions) : Result<uint16_t>(versions.status());
    auto hello =
        chosen.ok() ? wire::decode_hello(hello_frame->header, hello_frame->aux) : Result<wire::Hello>(chosen.status());
    if (!chosen.ok() && chosen.status().code() == Code::kUnimplemented) {
      (void)write_handshake_frame(s.fd(), wire::encode(wire::Rejected{Code::kUnimplemented, chosen.status().message()}),
                                  deadline);
    }
    if (!hello.ok()) {
      st = hello.status();
    } else if (hello->role == wire::StreamRole::kData) {
      st = attach_data(s, *hello);
    } else {
      st = serve_control(handshake_id, s, *hello, *chosen, deadline);
    }
  }
  if (!st.ok()) {
    FERRY_ENGINE_LOG(kWarn, "tcp", ctx_->engine_id, "dropped incoming stream from %s: %s", from.c_str(),
                     st.to_string().c_str());
    if (ctx_->metrics) ctx_->metrics->handshake_refused(code_name(st.code()));
  }
  platform::MutexLock lock(mu_);
  auto it = handshakes_.find(handshake_id);
  if (it != handshakes_.end()) {
    it->second.done = true;
    it->second.fd = -1;
    uncount_locked(it->second);
  }
  // `s` (if still owned) closes here, after fd was withdrawn from stop()'s reach.
  s.reset();
}

Status TcpListener::attach_data(platform::Socket& s, const wire::Hello& hello) {
  platform::MutexLock lock(mu_);
  auto it = pending_.find(hello.cookie);
  if (it == pending_.end()) return Status(Code::kDataLoss, "data stream names no pending connection");
  Pending& p = *it->second;
  if (hello.stream_index >= p.streams || p.data[hello.stream_index].valid()) {
    return Status(Code::kDataLoss,
                  "data stream index " + std::to_string(hello.stream_index) + " is invalid or repeated");
  }
  Status tuned = platform::tune_stream(s, ctx_->options.socket_buffer_bytes,
                                       static_cast<unsigned>(ctx_->options.path_timeout.count()));
  if (!tuned.ok()) return tuned;
  p.data[hello.stream_index] = std::move(s);
  ++p.attached;
  cv_.notify_all();
  return Status();
}

Status TcpListener::serve_control(uint64_t handshake_id, platform::Socket& s, const wire::Hello& hello,
                                  uint16_t version, Deadline deadline) {
  const Options& o = ctx_->options;
  int fd = s.fd();
  auto reject = [&](Code code, const std::string& why) {
    (void)write_handshake_frame(fd, wire::encode(wire::Rejected{code, why}), deadline);
    return Status(code, why);
  };
  FERRY_RETURN_IF_ERROR(platform::tune_stream(s, 0));
  wire::Welcome welcome;
  welcome.version = version;
  welcome.engine_id = ctx_->engine_id;
  welcome.auth_required = !o.auth_token.empty();
  welcome.host_id = ctx_->host_id;
  welcome.identity = ctx_->identity->public_key();
  welcome.local_ok = o.transport != TransportChoice::kTcp;
  if (ctx_->listens_everywhere) {
    // The connector's data streams go where its control stream got through:
    // of this host's addresses it is the one known to reach us.
    std::string reached = platform::local_ip(fd);
    if (reached.rfind("::ffff:", 0) == 0) reached = reached.substr(7);
    welcome.addresses = {(reached.find(':') != std::string::npos ? "[" + reached + "]" : reached) + ":" +
                         std::to_string(port_)};
  } else {
    welcome.addresses = ctx_->addresses;
  }
  platform::fill_random(welcome.nonce.data(), welcome.nonce.size());
  FERRY_RETURN_IF_ERROR(write_handshake_frame(fd, wire::encode(welcome), deadline));

  FERRY_ASSIGN_OR_RETURN(RawFrame af, read_handshake_frame(fd, deadline));
  FERRY_ASSIGN_OR_RETURN(wire::Auth auth, wire::decode_auth(af.header, af.aux));
  // The connector's engine id is its key's, and it holds that key.
  if (hello.engine_id != platform::engine_id_of(hello.identity) ||
      !platform::verify_signature(hello.identity, wire::identity_input(wire::Signer::kConnector, hello, welcome),
                                  auth.signature)) {
    return reject(Code::kUnauthenticated, "the connector failed to prove it holds the key of the engine it names");
  }
  bool local = auth.streams == 0;
  if (local && (!welcome.local_ok || hello.host_id != ctx_->host_id)) {
    return reject(Code::kInvalidArgument, welcome.local_ok ? "local transport asked for by a peer on another host"
                                                           : "this engine serves only TCP (FERRY_TRANSPORT=tcp)");
  }
  if (!local && (auth.streams < 1 || auth.streams > 64)) {
    return reject(Code::kInvalidArgument, "data stream count " + std::to_string(auth.streams) + " outside 1..64");
  }
  wire::Accepted accepted;
  accepted.signature = ctx_->identity->sign(wire::identity_input(wire::Signer::kAcceptor, hello, welcome));
  if (welcome.auth_required) {
    if (!auth.has_proof)
      return reject(Code::kUnauthenticated, "this engine requires a shared secret (FERRY_AUTH_TOKEN)");
    auto expect = platform::hmac_sha256(o.auth_token, wire::client_proof_input(hello.nonce, welcome.nonce));
    if (!platform::constant_time_equal(expect.data(), auth.proof.data(), expect.size())) {
      return reject(Code::kUnauthenticated, "the shared secret does not match");
    }
    accepted.has_proof = true;
    accepted.proof = platform::hmac_sha256(o.auth_token, wire::server_proof_input(hello.nonce, welcome.nonce));
  }
  auto ticket =
      ctx_->admission.admit(o, core::host_of(platform::peer_name(fd)), local ? 0 : static_cast<int>(auth.streams));
  if (!ticket.ok()) return reject(ticket.status().code(), ticket.status().message());
  if (local) {
    accepted.cookie = platform::random_u64();
    accepted.connection_id = next_id_();
    FERRY_RETURN_IF_ERROR(write_handshake_frame(fd, wire::encode(accepted), deadline));
    uncount(handshake_id);
    auto conn = local::accept_local(ctx_, accepted.connection_id, hello.engine_id, std::move(s), deadline);
    if (!conn.ok()) return conn.status();
    on_connection_(std::move(conn).value(), std::move(ticket).value());
    return Status();
  }
  auto pending = std::make_shared<Pending>();
  pending->streams = auth.streams;
  pending->data.resize(auth.streams);
  accepted.cookie = platform::random_u64();
  accepted.connection_id = next_id_();
  {
    platform::MutexLock lock(mu_);
    if (stopping_) return Status(Code::kCancelled, "engine stopping");
    pending_[accepted.cookie] = pending;
  }
  Status st = write_handshake_frame(fd, wire::encode(accepted), deadline);
  // Admitted: from here on it holds one of the engine's connections, not a handshake.
  uncount(handshake_id);
  bool all = false;
  if (st.ok()) {
    platform::UniqueLock lock(mu_);
    all = cv_.wait_until(lock.native(), deadline, [&]() REQUIRES(mu_) {
      return stopping_ || pending->attached == pending->streams;
    }) && !stopping_;
  }
  {
    platform::MutexLock lock(mu_);
    pending_.erase(accepted.cookie);
  }
  if (!st.ok()) return st;
  if (!all) return reject(Code::kDeadlineExceeded, "data streams did not attach within the handshake timeout");

  tcp::PeerInfo peer{hello.engine_id, hello.host_id, platform::peer_name(fd), version};
  std::vector<tcp::PathInfo> paths;
  for (const platform::Socket& d : pending->data) {
    std::string ip = platform::local_ip(d.fd());
    std::string nic;
    for (const auto& n : ctx_->nics) {
      if (n.address == ip) nic = n.name;
    }
    paths.push_back(tcp::PathInfo{nic, (nic.empty() ? "" : nic + " ") + ip + " <- " + platform::peer_name(d.fd())});
  }
  auto conn = tcp::TcpTransport::connection(ctx_, accepted.connection_id, std::move(peer), std::move(s),
                                            std::move(pending->data), std::move(paths), std::move(ticket).value());
  // Its threads start before READY, so a connection this side cannot staff
  // is refused with the reason instead of dropped after the peer began.
  if (Status started = conn->start(); !started.ok()) {
    Status refused = reject(started.code(), started.message());
    conn->close();
    return refused;
  }
  wire::EncodedFrame ready;
  ready.header.type = wire::FrameType::kReady;
  if (Status sent = write_handshake_frame(fd, ready, deadline); !sent.ok()) {
    conn->close();
    return sent;
  }
  on_connection_(std::move(conn), nullptr);
  return Status();
}

}  // namespace ferry::bootstrap
