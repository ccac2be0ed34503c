// Engine: options, identity, registry, the listener, the accept queue and the
// heartbeat thread (ferry-heartbeat) that keeps every connection honest.
#include "ferry/engine.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <set>
#include <thread>

#include "core/engine_context.h"
#include "core/stream_order.h"
#include "directory/publisher.h"
#include "directory/url.h"
#include "gpu/memory_kind.h"
#include "engine/metrics_http.h"
#include "gpu/gpu_kit.h"
#include "gpu/stream_signals.h"
#include "platform/crypto.h"
#include "platform/log.h"
#include "platform/mutex.h"
#include "platform/socket.h"
#include "platform/thread.h"
#include "transport/bootstrap/dialer.h"
#include "transport/bootstrap/engine_transports.h"
#include "transport/bootstrap/listener.h"
#include "wire/frame.h"
#include "wire/metadata.h"

namespace ferry {

// ---- the engine -------------------------------------------------------------------

struct Engine::Impl {
  std::shared_ptr<core::EngineContext> ctx;
  std::unique_ptr<bootstrap::TcpListener> listener;
  std::string address;

  platform::Mutex mu;
  std::condition_variable accept_cv;
  std::condition_variable heartbeat_cv;
  // Bounded by max_connections: each holds an admission ticket while it lives.
  std::deque<std::shared_ptr<transport::ConnectionCore>> accepted GUARDED_BY(mu);
  std::vector<std::shared_ptr<transport::ConnectionCore>> connections GUARDED_BY(mu);
  // Tickets of the connections that do not hold their own (the local
  // transport's), given back when the engine lets the connection go.
  std::map<const transport::ConnectionCore*, std::unique_ptr<core::Admission::Ticket>> tickets GUARDED_BY(mu);
  uint64_t next_connection_id GUARDED_BY(mu) = 1;
  bool stopping GUARDED_BY(mu) = false;
  size_t next_note_from GUARDED_BY(mu) = 0;  // where the engine-wide stream looks first
  std::thread heartbeat;
  // With Options::directory: the client for lookups, and the thread that
  // keeps this engine's entry alive (deleted first on shutdown).
  std::unique_ptr<Directory> directory;
  std::unique_ptr<directory::Publisher> publisher;
  // With Options::metrics_listen: the scrape endpoint (stopped first).
  std::unique_ptr<MetricsHttp> metrics_http;

  MetricsSnapshot metrics() EXCLUDES(mu);

  uint64_t next_id() EXCLUDES(mu) {
    platform::MutexLock lock(mu);
    return next_connection_id++;
  }

  // Lists `c` (and keeps `ticket` while it is listed). False, with `c`
  // closed, once the engine is stopping.
  bool adopt(const std::shared_ptr<transport::ConnectionCore>& c, std::unique_ptr<core::Admission::Ticket> ticket)
      EXCLUDES(mu) {
    {
      platform::MutexLock lock(mu);
      if (!stopping) {
        connections.push_back(c);
        if (ticket) tickets[c.get()] = std::move(ticket);
        return true;
      }
    }
    c->close();
    return false;
  }

  // Connections that failed before the application accepted them leave the
  // queue, and what they received with them: none can carry a transfer.
  // The heartbeat then closes them, as nobody holds them any more.
  void prune_accepted_locked() REQUIRES(mu) {
    std::erase_if(accepted, [](const std::shared_ptr<transport::ConnectionCore>& c) { return !c->health().ok(); });
  }

  void heartbeat_loop() EXCLUDES(mu) {
    const Options& o = ctx->options;
    // Ticks often enough to notice silence within a tenth of peer_timeout.
    auto period = std::min(o.heartbeat_interval / 2, o.peer_timeout / 10);
    if (period < std::chrono::milliseconds(5)) period = std::chrono::milliseconds(5);
    platform::UniqueLock lock(mu);
    while (!stopping) {
      heartbeat_cv.wait_for(lock.native(), period);
      if (stopping) break;
      std::vector<std::shared_ptr<transport::ConnectionCore>> live = connections;
      lock.unlock();
      auto now = Clock::now();
      for (auto& c : live) c->tick(now);
      live.clear();
      lock.lock();
      prune_accepted_locked();
      // A connection nobody else holds any more is closed on a thread of its
      // own, never on one of its workers nor here: an orderly close may wait
      // up to peer_timeout for an unresponsive peer, and the other
      // connections' heartbeats must go on meanwhile. It stays listed until
      // its close() has returned: a dereg meanwhile must still reach it.
      std::erase_if(closers, [](Closer& k) {
        if (!k.done->load()) return false;
        k.thread.join();
        return true;
      });
      for (auto& c : connections) {
        // A failed connection that holds its admission here (the local
        // transport's) is closed too, even while the application holds it:
        // its thread, control stream and admission go back at once, as a
        // failed TCP connection's do; what it received stays readable.
        const bool failed_holding = !c->health().ok() && tickets.count(c.get()) > 0;
        if ((c.use_count() != 1 && !failed_holding) || closing.count(c.get()) > 0) continue;
        auto done = std::make_shared<std::atomic<bool>>(false);
        auto t = platform::try_start_thread("ferry-close", [this, c, done] { close_dropped(c, *done); });
        if (!t.ok()) break;  // out of threads: the next tick tries again
        closing.insert(c.get());
        closers.push_back(Closer{std::move(t).value(), done});
      }
    }
  }

  // A closer thread's work: close, then unlist.
  void close_dropped(const std::shared_ptr<transport::ConnectionCore>& conn, std::atomic<bool>& done) EXCLUDES(mu) {
    conn->close();
    platform::MutexLock lock(mu);
    closing.erase(conn.get());
    // The destructor may have taken the list meanwhile.
    auto it = std::find(connections.begin(), connections.end(), conn);
    if (it != connections.end()) connections.erase(it);
    tickets.erase(conn.get());
    done.store(true);
  }

  struct Closer {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Closer> closers GUARDED_BY(mu);                         // joined by the heartbeat or the destructor
  std::set<const transport::ConnectionCore*> closing GUARDED_BY(mu);  // a closer runs for these
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {

// What peers may dial when the engine listens on every address and names no
// NICs: the address of every interface that is up and not loopback, fastest
// first (then by name), each with `port`; the loopback address only when
// there is nothing else. A peer on another host cannot use 127.0.0.1.
std::vector<std::string> reachable_addresses(const std::string& port) {
  std::vector<platform::Interface> up;
  if (auto all = platform::list_interfaces(); all.ok()) {
    for (auto& n : *all) {
      // Link-local addresses (169.254/16) reach nothing past the link.
      if (n.up && !n.loopback && (n.ipv4 >> 16) != 0xa9fe) up.push_back(std::move(n));
    }
  }
  std::stable_sort(up.begin(), up.end(), [](const platform::Interface& a, const platform::Interface& b) {
    return a.speed_mbps != b.speed_mbps ? a.speed_mbps > b.speed_mbps : a.name < b.name;
  });
  std::vector<std::string> out;
  for (const auto& n : up) {
    std::string a = n.address + ":" + port;
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(std::move(a));
  }
  if (out.empty()) out.push_back("127.0.0.1:" + port);
  return out;
}

// "<hostname>-<pid>", with anything a name may not hold replaced by '-'.
std::string default_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof(host), "ferry");
  std::string name = host;
  for (char& c : name) {
    if (!Directory::valid_name(std::string_view(&c, 1))) c = '-';
  }
  std::string pid = "-" + std::to_string(::getpid());
  if (name.size() + pid.size() > 128) name.resize(128 - pid.size());
  return name + pid;
}

// Opens the directory client and publishes this engine (Options::directory).
Status start_directory(Engine::Impl& impl) {
  Options& o = impl.ctx->options;
  FERRY_ASSIGN_OR_RETURN(directory::DirectoryUrl url, directory::parse_directory_url(o.directory));
  FERRY_ASSIGN_OR_RETURN(impl.directory, Directory::open(o.directory));
  if (o.name.empty()) o.name = default_name();
  DirectoryEntry self;
  self.name = o.name;
  self.engine_id = impl.ctx->engine_id;
  self.host_id = impl.ctx->host_id;
  self.addresses = impl.ctx->addresses;
  self.pid = ::getpid();
  self.started_unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  auto loopback = [](std::string_view host) {
    return host.rfind("127.", 0) == 0 || host.rfind("[::1]", 0) == 0 || host == "::1" || host == "localhost";
  };
  bool remote_directory = std::any_of(url.endpoints.begin(), url.endpoints.end(),
                                      [&](const platform::HostPort& e) { return !loopback(e.host); });
  if (remote_directory && std::all_of(self.addresses.begin(), self.addresses.end(), loopback)) {
    FERRY_ENGINE_LOG(kWarn, "directory", impl.ctx->engine_id,
                     "publishing \"%s\" in %s with only loopback addresses (%s): engines on other hosts cannot reach "
                     "them; set listen (FERRY_LISTEN) to this host's address or name its NICs (FERRY_NICS)",
                     o.name.c_str(), url.redacted.c_str(), self.addresses.front().c_str());
  }
  // The first publish gets a moment, so that peers find the name as soon as
  // create returns; a directory that is down only delays it.
  auto first_try = std::min<Clock::duration>(o.directory_ttl, std::chrono::seconds(2));
  // Another engine's claim on a name is believed once it answers as that
  // engine: a dial proves the id (the handshake's signature), and with a
  // token, that it holds the token.
  auto verify = [&impl](const DirectoryEntry& e, Deadline deadline) -> Status {
    Status last(Code::kUnavailable, "no address");
    for (const std::string& a : e.addresses) {
      auto hp = platform::parse_host_port(a);
      if (!hp.ok()) continue;
      auto c = bootstrap::dial(impl.ctx, *hp, deadline, [&impl] { return impl.next_id(); });
      if (!c.ok()) {
        last = c.status();
        continue;
      }
      const uint64_t id = c->connection->peer_engine_id();
      c->connection->close();
      if (id == e.engine_id) return Status();
      char got[17];
      std::snprintf(got, sizeof(got), "%016" PRIx64, id);
      return Status(Code::kPermissionDenied, "engine " + std::string(got) + " answered at " + a);
    }
    return last;
  };
  FERRY_ASSIGN_OR_RETURN(impl.publisher, directory::Publisher::start(url, std::move(self), o.directory_ttl,
                                                                     after(first_try), std::move(verify)));
  FERRY_ENGINE_LOG(kInfo, "directory", impl.ctx->engine_id,
                   "published \"%s\" in %s (incarnation %" PRIu64 ", ttl %lld ms)", o.name.c_str(),
                   url.redacted.c_str(), impl.publisher->self().incarnation,
                   static_cast<long long>(o.directory_ttl.count()));
  return Status();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(Options options) {
  FERRY_ASSIGN_OR_RETURN(Options opts, apply_environment(std::move(options)));
  if (std::getenv("FERRY_LOG") != nullptr || opts.log_level != LogLevel::kWarn) log::set_level(opts.log_level);
  for (const std::string& name : unknown_environment()) {
    FERRY_LOG(kWarn, "options", "%s is set but is no ferry variable: ignored (`ferry config` lists them)",
              name.c_str());
  }
  FERRY_ASSIGN_OR_RETURN(platform::HostPort at, platform::parse_host_port(opts.listen));
  auto impl = std::make_unique<Impl>();
  impl->ctx = std::make_shared<core::EngineContext>();
  if (!opts.nics.empty()) {
    auto nics = platform::select_interfaces(opts.nics);
    if (!nics.ok()) return nics.status().with_context("engine: FERRY_NICS/nics");
    impl->ctx->nics = std::move(nics).value();
    // Serving named NICs means accepting on each of them.
    if (at.host == "127.0.0.1") at.host = "0.0.0.0";
    // Peers are told every NIC's address; a listener on one other address
    // would refuse them on the rest.
    if (at.host != "0.0.0.0" && !at.host.empty() && at.host != "::") {
      for (const auto& n : impl->ctx->nics) {
        if (n.address != at.host) {
          return Status(Code::kInvalidArgument,
                        "engine: listen names host " + at.host + ", but nics \"" + opts.nics + "\" serves " + n.name +
                            " at " + n.address + ", where nothing would accept: with nics, listen on 0.0.0.0:" +
                            std::to_string(at.port) + " (or name only the NIC whose address it is)");
        }
      }
    }
  }
  impl->ctx->options = opts;
  impl->ctx->memory_budget = std::make_shared<core::ByteBudget>(opts.engine_memory_bytes);
  impl->ctx->stream_gate = std::make_shared<core::StreamGate>(platform::cuda_stream_waits());
  impl->ctx->stream_signals = std::make_shared<platform::StreamSignals>();
  impl->ctx->gpu_reserve = std::make_shared<platform::GpuReserve>();
  if (impl->ctx->options.metrics) impl->ctx->metrics = std::make_unique<core::TransferMetrics>();
  {
    auto topo = platform::read_topology("");
    platform::Topology host = topo.ok() ? std::move(topo).value() : platform::Topology{};
    for (const auto& n : impl->ctx->nics) {
      const platform::NicInfo* info = host.find_nic(n.name);
      impl->ctx->nic_nodes[n.name] = info != nullptr ? host.nic_node(*info) : -1;
    }
    auto cpus = core::resolve_worker_cpus(opts, impl->ctx->nics, host);
    if (!cpus.ok()) return cpus.status().with_context("engine");
    impl->ctx->worker_cpus = std::move(cpus).value();
    impl->ctx->topology = std::move(host);
  }
  auto identity = platform::IdentityKey::generate();
  if (!identity.ok()) return identity.status().with_context("engine");
  impl->ctx->identity = std::move(identity).value();
  impl->ctx->engine_id = impl->ctx->identity->engine_id();
  impl->ctx->host_id = std::string(platform::host_id());
  // After engine_id: the workers log with it.
  FERRY_RETURN_IF_ERROR(bootstrap::prepare_transports(*impl->ctx).with_context("engine"));
  Impl* raw = impl.get();
  auto listener = bootstrap::TcpListener::bind(
      impl->ctx, at,
      [raw](std::shared_ptr<transport::ConnectionCore> c, std::unique_ptr<core::Admission::Ticket> ticket) {
        if (!raw->adopt(c, std::move(ticket))) return;
        {
          platform::MutexLock lock(raw->mu);
          if (raw->stopping) return;
          raw->prune_accepted_locked();
          raw->accepted.push_back(std::move(c));
        }
        raw->accept_cv.notify_all();
      },
      [raw] { return raw->next_id(); });
  if (!listener.ok()) return listener.status().with_context("engine");
  impl->listener = std::move(listener).value();
  std::string port = std::to_string(impl->listener->port());
  const bool wildcard = at.host.empty() || at.host == "0.0.0.0" || at.host == "::";
  if (!impl->ctx->nics.empty()) {
    for (const auto& n : impl->ctx->nics) impl->ctx->addresses.push_back(n.address + ":" + port);
  } else if (wildcard) {
    impl->ctx->listens_everywhere = true;
    impl->ctx->addresses = reachable_addresses(port);
  } else {
    const std::string& host = at.host;
    impl->ctx->addresses.push_back((host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port);
  }
  impl->address = impl->ctx->addresses.front();
  FERRY_RETURN_IF_ERROR(impl->listener->run().with_context("engine"));
  if (!opts.directory.empty()) {
    Status s = start_directory(*impl);
    if (!s.ok()) {
      impl->listener->stop();
      return s.with_context("engine");
    }
  }
  auto heartbeat = platform::try_start_thread("ferry-heartbeat", [raw] { raw->heartbeat_loop(); });
  if (!heartbeat.ok()) {
    impl->publisher.reset();
    impl->listener->stop();
    return heartbeat.status().with_context("engine");
  }
  impl->heartbeat = std::move(heartbeat).value();
  if (!opts.metrics_listen.empty()) {
    auto http = MetricsHttp::start(opts.metrics_listen, [raw] { return prometheus_text(raw->metrics()); });
    if (!http.ok()) {
      // The engine is not handed out: stop what runs, as its destructor would.
      Engine stopped(std::move(impl));
      return http.status().with_context("engine");
    }
    impl->metrics_http = std::move(http).value();
    FERRY_ENGINE_LOG(kInfo, "engine", impl->ctx->engine_id, "metrics at http://%s/metrics",
                     impl->metrics_http->address().c_str());
  }
  FERRY_ENGINE_LOG(kInfo, "engine", impl->ctx->engine_id, "listening on %s (engine id %016" PRIx64 ", protocol %u)",
                   impl->address.c_str(), impl->ctx->engine_id, static_cast<unsigned>(wire::kProtocolVersion));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::~Engine() {
  // No scrape reads the engine while it goes.
  impl_->metrics_http.reset();
  // Out of the directory first: nobody should resolve the name to an engine
  // that is going away.
  impl_->publisher.reset();
  std::vector<std::shared_ptr<transport::ConnectionCore>> conns;
  std::map<const transport::ConnectionCore*, std::unique_ptr<core::Admission::Ticket>> tickets;
  {
    platform::MutexLock lock(impl_->mu);
    impl_->stopping = true;
    conns.swap(impl_->connections);
    tickets.swap(impl_->tickets);
    impl_->accepted.clear();
  }
  impl_->heartbeat_cv.notify_all();
  impl_->accept_cv.notify_all();
  impl_->ctx->notifications.notify();  // engine-wide waits see `stopping`
  if (impl_->heartbeat.joinable()) impl_->heartbeat.join();
  impl_->listener->stop();
  std::vector<Impl::Closer> closers;
  {
    platform::MutexLock lock(impl_->mu);
    closers.swap(impl_->closers);
  }
  for (auto& k : closers) k.thread.join();
  for (auto& c : conns) c->close();
  impl_->ctx->stream_gate->stop();
}

uint64_t Engine::id() const { return impl_->ctx->engine_id; }
std::string Engine::address() const { return impl_->address; }
const Options& Engine::options() const { return impl_->ctx->options; }

std::string Engine::metadata() const {
  wire::EngineMetadata m;
  m.engine_id = impl_->ctx->engine_id;
  m.host_id = impl_->ctx->host_id;
  m.addresses = impl_->ctx->addresses;
  return wire::encode_metadata(m);
}

Result<Region> Engine::reg(void* data, size_t size) {
  return impl_->ctx->registry.add(data, size, platform::classify_pointer(data));
}

Status Engine::dereg(const Region& region) {
  FERRY_RETURN_IF_ERROR(impl_->ctx->registry.remove(region.id));
  if (impl_->ctx->registry.contains(region.id)) return Status();  // other registrations remain
  // Local peers may hold handles to it: tell them, then drop what was made.
  std::vector<std::shared_ptr<transport::ConnectionCore>> conns;
  {
    platform::MutexLock lock(impl_->mu);
    conns = impl_->connections;
  }
  for (auto& c : conns) c->region_retired(region.id);
  bootstrap::region_retired(*impl_->ctx, region.id);
  return Status();
}

Result<RemoteDescriptor> Engine::export_region(const Region& region, uint64_t offset, uint64_t length) {
  return impl_->ctx->registry.export_slice(impl_->ctx->engine_id, region.id, offset, length);
}

MetricsSnapshot Engine::metrics() const { return impl_->metrics(); }

std::string Engine::metrics_address() const { return impl_->metrics_http ? impl_->metrics_http->address() : ""; }

MetricsSnapshot Engine::Impl::metrics() {
  MetricsSnapshot m;
  if (ctx->gpu_reserve) m.gpu_objects_made_late = ctx->gpu_reserve->made_late();
  if (!ctx->metrics) return m;
  const uint64_t made_late = m.gpu_objects_made_late;
  m = ctx->metrics->snapshot();
  m.gpu_objects_made_late = made_late;
  m.held_bytes = ctx->memory_budget->held();
  m.held_bytes_peak = ctx->memory_budget->peak();
  std::vector<std::shared_ptr<transport::ConnectionCore>> conns;
  {
    platform::MutexLock lock(mu);
    conns = connections;
  }
  for (const auto& c : conns) {
    std::string transport(c->transport_name());
    ++m.connections[transport];
    if (!c->health().ok()) ++m.connections_failed[transport];
  }
  return m;
}

std::string Engine::name() const { return impl_->publisher ? impl_->ctx->options.name : std::string(); }
uint64_t Engine::incarnation() const { return impl_->publisher ? impl_->publisher->self().incarnation : 0; }
Directory* Engine::directory() const { return impl_->directory.get(); }

namespace {
Status no_directory(std::string_view what) {
  return Status(Code::kInvalidArgument, std::string(what) +
                                            ": this engine has no directory (set Options::directory or "
                                            "FERRY_DIRECTORY to redis://... or etcd://...)");
}
}  // namespace

Result<DirectoryEntry> Engine::lookup(std::string_view name, Deadline deadline) {
  if (!impl_->directory) return no_directory("lookup \"" + std::string(name) + "\"");
  return impl_->directory->lookup(name, deadline);
}

Result<DirectoryListing> Engine::list(Deadline deadline) {
  if (!impl_->directory) return no_directory("list");
  return impl_->directory->list(deadline);
}

Result<std::shared_ptr<Connection>> Engine::connect(std::string_view peer, Deadline deadline) {
  std::vector<std::string> addresses;
  std::optional<DirectoryEntry> entry;  // set when `peer` is a name
  uint64_t named_engine = 0;            // set when `peer` is a metadata blob
  if (wire::looks_like_metadata(peer)) {
    FERRY_ASSIGN_OR_RETURN(wire::EngineMetadata m, wire::decode_metadata(peer));
    addresses = m.addresses;
    named_engine = m.engine_id;
  } else if (peer.find(':') == std::string_view::npos && Directory::valid_name(peer)) {
    if (!impl_->directory) {
      return no_directory("connect: \"" + std::string(peer) + "\" is a name, not host:port, and");
    }
    auto e = impl_->directory->lookup(peer, deadline);
    if (!e.ok()) return e.status().with_context("connect \"" + std::string(peer) + "\"");
    entry = std::move(e).value();
    addresses = entry->addresses;
  } else {
    addresses.emplace_back(peer);
  }
  Status last(Code::kUnavailable, "no address to connect to");
  for (size_t i = 0; i < addresses.size(); ++i) {
    const std::string& a = addresses[i];
    FERRY_ASSIGN_OR_RETURN(platform::HostPort hp, platform::parse_host_port(a));
    // Each address gets its share of what is left, so one that drops its
    // SYNs (an interface the peer cannot route to) leaves time for the next.
    Deadline until = deadline;
    if (const size_t left = addresses.size() - i; left > 1 && deadline != kNoDeadline) {
      const auto now = Clock::now();
      if (deadline > now) until = now + (deadline - now) / static_cast<int64_t>(left);
    }
    auto c = bootstrap::dial(impl_->ctx, hp, until, [this] { return impl_->next_id(); });
    if (c.ok()) {
      std::shared_ptr<transport::ConnectionCore> conn = c->connection;
      if (!impl_->adopt(conn, std::move(c->ticket)))
        return Status(Code::kCancelled, "connect: the engine is shutting down");
      if (entry.has_value() && conn->peer_engine_id() != entry->engine_id) {
        // The address outlived the engine the entry names (a restart, a
        // reused port): whoever answered is not who the name means.
        char want[17], got[17];
        std::snprintf(want, sizeof(want), "%016" PRIx64, entry->engine_id);
        std::snprintf(got, sizeof(got), "%016" PRIx64, conn->peer_engine_id());
        conn->close();
        last = Status(Code::kUnavailable, "connect \"" + entry->name + "\": the directory names engine " + want +
                                              " (incarnation " + std::to_string(entry->incarnation) + ") at " + a +
                                              ", but engine " + got + " answered there: the entry is stale");
        continue;
      }
      if (named_engine != 0 && conn->peer_engine_id() != named_engine) {
        // Engine ids are proven in the handshake: whoever answers at the
        // blob's address is not the engine the blob was made by.
        char want[17], got[17];
        std::snprintf(want, sizeof(want), "%016" PRIx64, named_engine);
        std::snprintf(got, sizeof(got), "%016" PRIx64, conn->peer_engine_id());
        conn->close();
        last = Status(Code::kUnavailable, "connect: the metadata names engine " + std::string(want) + " at " + a +
                                              ", but engine " + got + " answered there");
        continue;
      }
      if (entry.has_value() && impl_->publisher) {
        std::weak_ptr<transport::ConnectionCore> weak = conn;
        impl_->publisher->watch_peer(
            *entry, {conn->id(),
                     [weak] {
                       auto c = weak.lock();
                       return c != nullptr && c->health().ok();
                     },
                     [weak](const Status& why) {
                       if (auto c = weak.lock()) c->fail(why);
                     }});
      }
      return std::shared_ptr<Connection>(std::move(conn));
    }
    last = c.status();
    if (last.code() == Code::kUnauthenticated) break;
    if (last.code() == Code::kDeadlineExceeded && Clock::now() >= deadline) break;
  }
  if (entry.has_value()) return last.with_context("connect \"" + entry->name + "\"");
  return last;
}

std::optional<Notification> Engine::poll_notification() {
  std::vector<std::shared_ptr<transport::ConnectionCore>> conns;
  size_t first = 0;
  {
    platform::MutexLock lock(impl_->mu);
    conns = impl_->connections;
    first = impl_->next_note_from++;
  }
  for (size_t i = 0; i < conns.size(); ++i) {
    const auto& c = conns[(first + i) % conns.size()];
    if (auto note = c->poll_notification()) {
      return Notification{c->id(), c->peer_engine_id(), c->peer_address(), std::move(*note)};
    }
  }
  return std::nullopt;
}

void Engine::set_notification_listener(std::function<void()> listener) {
  impl_->ctx->notifications.set_listener(std::move(listener));
}

Result<Notification> Engine::wait_notification(Deadline deadline) {
  for (;;) {
    // Read before looking: a note queued after the look moves it.
    uint64_t seen = impl_->ctx->notifications.seq();
    {
      platform::MutexLock lock(impl_->mu);
      if (impl_->stopping) return Status(Code::kCancelled, "wait_notification: the engine was closed");
    }
    if (auto note = poll_notification()) return std::move(*note);
    if (!impl_->ctx->notifications.wait_past(seen, deadline)) {
      return Status(Code::kDeadlineExceeded, "wait_notification: no notification from any peer by the deadline");
    }
  }
}

Result<std::shared_ptr<Connection>> Engine::accept(Deadline deadline) {
  platform::UniqueLock lock(impl_->mu);
  auto ready = [&]() REQUIRES(impl_->mu) {
    impl_->prune_accepted_locked();
    return impl_->stopping || !impl_->accepted.empty();
  };
  if (deadline == kNoDeadline) {
    impl_->accept_cv.wait(lock.native(), ready);
  } else if (!impl_->accept_cv.wait_until(lock.native(), deadline, ready)) {
    return Status(Code::kDeadlineExceeded, "accept: no peer connected to " + impl_->address + " by the deadline");
  }
  if (impl_->accepted.empty()) return Status(Code::kCancelled, "accept: the engine is shutting down");
  auto c = std::move(impl_->accepted.front());
  impl_->accepted.pop_front();
  return std::shared_ptr<Connection>(std::move(c));
}
}  // namespace ferry
