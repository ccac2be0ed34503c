// Engine's directory and dialing: publishing this engine, looking peers up,
// and connecting to a peer by name (through the directory), by the metadata
// blob it handed out, or by address, checking that whoever answers is the
// engine meant.
#include <unistd.h>

#include <cinttypes>
#include <optional>

#include "directory/url.h"
#include "engine/engine_impl.h"
#include "platform/log.h"
#include "platform/socket.h"
#include "transport/bootstrap/dialer.h"
#include "wire/metadata.h"

namespace ferry {
namespace {

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

Status no_directory(std::string_view what) {
  return Status(Code::kInvalidArgument, std::string(what) +
                                            ": this engine has no directory (set Options::directory or "
                                            "FERRY_DIRECTORY to redis://... or etcd://...)");
}

}  // namespace

namespace engine_detail {

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

}  // namespace engine_detail

std::string Engine::name() const { return impl_->publisher ? impl_->ctx->options.name : std::string(); }
uint64_t Engine::incarnation() const { return impl_->publisher ? impl_->publisher->self().incarnation : 0; }
Directory* Engine::directory() const { return impl_->directory.get(); }

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

}  // namespace ferry
