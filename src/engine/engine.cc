// Engine: options, identity, registry, the listener, the accept queue and the
// heartbeat thread (ferry-heartbeat) that keeps every connection honest. The
// directory and connecting to peers are in engine_dial.cc; the state both
// share, in engine_impl.h.
#include "ferry/engine.h"

#include <algorithm>
#include <cinttypes>
#include <cstdlib>

#include "core/stream_order.h"
#include "engine/engine_impl.h"
#include "gpu/gpu_kit.h"
#include "gpu/memory_kind.h"
#include "gpu/stream_signals.h"
#include "platform/crypto.h"
#include "platform/log.h"
#include "platform/socket.h"
#include "transport/bootstrap/engine_transports.h"
#include "wire/frame.h"
#include "wire/metadata.h"

namespace ferry {

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
    Status s = engine_detail::start_directory(*impl);
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
