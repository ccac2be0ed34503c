// The registry of tunables: every Options field with its FERRY_* variable,
// default, unit and meaning, declared once. apply_environment, validate and
// `ferry config` all read this table.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "platform/log.h"
#include "core/option_names.h"
#include "core/units.h"
#include "directory/url.h"
#include "ferry/directory.h"
#include "ferry/options.h"

namespace ferry {
namespace {

struct Tunable {
  const char* name;
  const char* env;
  const char* unit;
  const char* doc;
  std::function<std::string(const Options&)> get;
  std::function<Status(Options&, std::string_view)> set;
};

Status bad_value(std::string_view env, std::string_view value, std::string_view why) {
  return Status(Code::kInvalidArgument, std::string(env) + "=\"" + std::string(value) + "\": " + std::string(why));
}

Result<uint64_t> parse_size(std::string_view env, std::string_view v) {
  auto r = core::parse_bytes(v);
  if (!r.ok()) return bad_value(env, v, r.status().message());
  return r;
}

Result<int64_t> parse_int(std::string_view env, std::string_view v) {
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size()) return bad_value(env, v, "expected an integer");
  return n;
}

Result<LogLevel> parse_level(std::string_view env, std::string_view v) {
  auto level = parse_log_level(v);
  if (!level.ok()) return bad_value(env, v, "expected error, warn, info, debug or trace (any case)");
  return level;
}

template <typename Field>
Tunable size_tunable(const char* name, const char* env, const char* unit, const char* doc, Field Options::*field) {
  return Tunable{name,
                 env,
                 unit,
                 doc,
                 [field](const Options& o) { return std::to_string(o.*field); },
                 [field, env](Options& o, std::string_view v) -> Status {
                   auto r = parse_size(env, v);
                   if (!r.ok()) return r.status();
                   if (r.value() > static_cast<uint64_t>(std::numeric_limits<Field>::max())) {
                     return bad_value(env, v, "too large");
                   }
                   o.*field = static_cast<Field>(r.value());
                   return Status();
                 }};
}

// A whole number of `Duration` units ("ms", "us"); 0 only where `zero_ok`.
template <typename Duration>
Tunable duration_tunable(const char* name, const char* env, const char* unit, const char* doc, Duration Options::*field,
                         bool zero_ok) {
  return Tunable{name,
                 env,
                 unit,
                 doc,
                 [field](const Options& o) { return std::to_string((o.*field).count()); },
                 [field, env, zero_ok](Options& o, std::string_view v) -> Status {
                   auto r = parse_int(env, v);
                   if (!r.ok()) return r.status();
                   if (r.value() < (zero_ok ? 0 : 1)) {
                     return bad_value(env, v, zero_ok ? "must not be negative" : "must be positive");
                   }
                   o.*field = Duration(r.value());
                   return Status();
                 }};
}

Tunable ms_tunable(const char* name, const char* env, const char* doc, std::chrono::milliseconds Options::*field) {
  return duration_tunable(name, env, "ms", doc, field, /*zero_ok=*/false);
}

Tunable us_tunable(const char* name, const char* env, const char* doc, std::chrono::microseconds Options::*field) {
  return duration_tunable(name, env, "us", doc, field, /*zero_ok=*/true);
}

Tunable string_tunable(const char* name, const char* env, const char* doc, std::string Options::*field,
                       bool secret = false) {
  return Tunable{name,
                 env,
                 "",
                 doc,
                 [field, secret](const Options& o) {
                   if (secret) return std::string((o.*field).empty() ? "(unset)" : "(set)");
                   return o.*field;
                 },
                 [field](Options& o, std::string_view v) -> Status {
                   o.*field = std::string(v);
                   return Status();
                 }};
}

// One of the names `parse` takes; shown by name.
template <typename E>
Tunable choice_tunable(const char* name, const char* env, const char* doc, E Options::*field,
                       Result<E> (*parse)(std::string_view)) {
  return Tunable{name,
                 env,
                 "",
                 doc,
                 [field](const Options& o) { return std::string(to_string(o.*field)); },
                 [field, env, parse](Options& o, std::string_view v) -> Status {
                   auto r = parse(v);
                   if (!r.ok()) return r.status().with_context(env);
                   o.*field = r.value();
                   return Status();
                 }};
}

// 0 or 1.
Tunable flag_tunable(const char* name, const char* env, const char* doc, bool Options::*field) {
  return Tunable{name,
                 env,
                 "",
                 doc,
                 [field](const Options& o) { return std::string(o.*field ? "1" : "0"); },
                 [field, env](Options& o, std::string_view v) -> Status {
                   if (v != "0" && v != "1") return bad_value(env, v, "expected 0 or 1");
                   o.*field = v == "1";
                   return Status();
                 }};
}

const std::vector<Tunable>& tunables() {
  static const std::vector<Tunable> table = {
      string_tunable("listen", "FERRY_LISTEN", "host:port to listen on (port 0 picks one)", &Options::listen),
      string_tunable("nics", "FERRY_NICS", "NICs to serve and stripe over, e.g. eth1,eth2 (empty: listen address only)",
                     &Options::nics),
      string_tunable("tx_bindings", "FERRY_TX_BINDINGS",
                     "CPUs of each NIC's transmit workers, eth1:8-21;eth2:... (else NCCL_GPUDIRECTTCPX_TX_BINDINGS, "
                     "else the first half of the NIC's NUMA node)",
                     &Options::tx_bindings),
      string_tunable("rx_bindings", "FERRY_RX_BINDINGS",
                     "CPUs of each NIC's receive workers (else NCCL_GPUDIRECTTCPX_RX_BINDINGS, else the second half of "
                     "the NIC's NUMA node)",
                     &Options::rx_bindings),
      size_tunable("workers", "FERRY_WORKERS", "count",
                   "TCP worker threads per NIC and direction; 0: auto (one per default stream, at most the bound CPUs)",
                   &Options::workers),
      choice_tunable("nic_policy", "FERRY_NIC_POLICY", "nearest (NICs on the memory's NUMA node first) or all",
                     &Options::nic_policy, &parse_nic_policy),
      choice_tunable(
          "path_policy", "FERRY_PATH_POLICY",
          "adaptive (when the paths' workers outnumber the cores: paths by CPU headroom and measured gain) or all",
          &Options::path_policy, &parse_path_policy),
      size_tunable("streams", "FERRY_STREAMS", "count",
                   "data streams (paths) per NIC pair; 0: auto (half the CPUs, 2..16, in all)", &Options::streams),
      size_tunable("chunk_bytes", "FERRY_CHUNK", "bytes",
                   "bulk transfers travel in chunks of this size (K/M/G suffixes)", &Options::chunk_bytes),
      size_tunable("window", "FERRY_WINDOW", "chunks",
                   "chunks a path may have in flight before the peer confirms landing", &Options::window),
      size_tunable("staging_depth", "FERRY_STAGING_DEPTH", "chunks",
                   "GPU memory: chunks each path stages ahead per direction through pinned host slots",
                   &Options::staging_depth),
      size_tunable("staging_chunk_bytes", "FERRY_STAGING_CHUNK", "bytes",
                   "GPU memory: chunk size of transfers that touch it, and of each pinned staging slot",
                   &Options::staging_chunk_bytes),
      choice_tunable("staging_copy", "FERRY_STAGING_COPY",
                     "GPU memory: what runs staging copies, kernel (a few SMs) or engine (the copy engines)",
                     &Options::staging_copy, &parse_staging_copy),
      us_tunable("gather_linger", "FERRY_GATHER_LINGER_US",
                 "local GPU blocks: the gather kernel stays resident this long after a batch (holds 32 SMs' "
                 "blocks meanwhile); 0: a launch a batch",
                 &Options::gather_linger),
      flag_tunable("staging_lend_pages", "FERRY_STAGING_LEND",
                   "GPU memory: 1 (default): sockets borrow staged chunks' pages instead of copying them; 0: copied",
                   &Options::staging_lend_pages),
      size_tunable("inline_max", "FERRY_INLINE_MAX", "bytes",
                   "messages and writes up to this size ride inline on the control stream", &Options::inline_max),
      string_tunable("auth_token", "FERRY_AUTH_TOKEN",
                     "shared secret for the challenge-response handshake (or FERRY_AUTH_TOKEN_FILE)",
                     &Options::auth_token, /*secret=*/true),
      ms_tunable("heartbeat_interval", "FERRY_HEARTBEAT_MS", "send a heartbeat after this long without control traffic (TCP with a peer of protocol 6 or later: "
                 "only while something waits on the peer)",
                 &Options::heartbeat_interval),
      us_tunable("wait_spin", "FERRY_WAIT_SPIN_US",
                 "Transfer::wait polls this long before sleeping; 0: the transport's choice (TCP 50, local 10000)",
                 &Options::wait_spin),
      ms_tunable("peer_timeout", "FERRY_PEER_TIMEOUT_MS", "a peer silent this long is lost and its transfers fail",
                 &Options::peer_timeout),
      ms_tunable("path_timeout", "FERRY_PATH_TIMEOUT_MS",
                 "a data stream with bytes unacknowledged this long is dead; its chunks move to other paths",
                 &Options::path_timeout),
      ms_tunable("handshake_timeout", "FERRY_HANDSHAKE_TIMEOUT_MS", "drop a connection whose handshake takes longer",
                 &Options::handshake_timeout),
      size_tunable("socket_buffer_bytes", "FERRY_SOCKET_BUFFER", "bytes",
                   "SO_SNDBUF/SO_RCVBUF per stream; 0 keeps kernel autotuning", &Options::socket_buffer_bytes),
      choice_tunable("transport", "FERRY_TRANSPORT", "auto (local for same-host peers), tcp, or local",
                     &Options::transport, &parse_transport),
      size_tunable("max_connections", "FERRY_MAX_CONNECTIONS", "count",
                   "connections the engine holds at once (accepted, dialed, queued); more are refused",
                   &Options::max_connections),
      size_tunable("max_handshakes", "FERRY_MAX_HANDSHAKES", "count",
                   "handshakes in progress at once (one peer address: half); a stream past it waits 200 ms, then is "
                   "closed unread",
                   &Options::max_handshakes),
      size_tunable("max_connections_per_peer", "FERRY_MAX_CONNECTIONS_PER_PEER", "count",
                   "connections one peer address may hold at once", &Options::max_connections_per_peer),
      size_tunable("max_streams", "FERRY_MAX_STREAMS", "count",
                   "data streams over all connections (a descriptor each, no thread); a handshake past it is refused",
                   &Options::max_streams),
      size_tunable("connection_memory_bytes", "FERRY_CONNECTION_MEMORY", "bytes",
                   "bytes a connection may hold for its peer (unreceived messages, unpolled notes, unread replies)",
                   &Options::connection_memory_bytes),
      size_tunable("engine_memory_bytes", "FERRY_ENGINE_MEMORY", "bytes",
                   "bytes all connections together may hold for their peers (each within connection_memory_bytes)",
                   &Options::engine_memory_bytes),
      flag_tunable("metrics", "FERRY_METRICS", "1: count transfers for Engine::metrics() (default); 0: count nothing",
                   &Options::metrics),
      string_tunable("metrics_listen", "FERRY_METRICS_ADDR",
                     "host:port (or :port, loopback) to serve metrics to Prometheus at /metrics (empty: none)",
                     &Options::metrics_listen),
      flag_tunable("local_other_uids", "FERRY_LOCAL_OTHER_UIDS",
                   "1: same-host peers of another uid may use the local transport (default 0: refused)",
                   &Options::local_other_uids),
      flag_tunable("local_same_process", "FERRY_LOCAL_SAME_PROCESS",
                   "1: an engine may be its own peer on the local transport (two engines of one process always may)",
                   &Options::local_same_process),
      Tunable{"directory", "FERRY_DIRECTORY", "",
              "redis://[user:pass@]host:port[/ns] or etcd://host:port[,...][/ns]: publish this engine and resolve "
              "names there (empty: none)",
              [](const Options& o) { return directory::redact_directory_url(o.directory); },
              [](Options& o, std::string_view v) -> Status {
                o.directory = std::string(v);
                return Status();
              }},
      string_tunable("name", "FERRY_NAME", "the name this engine publishes in the directory (empty: hostname-pid)",
                     &Options::name),
      ms_tunable("directory_ttl", "FERRY_DIRECTORY_TTL_MS",
                 "a directory entry not refreshed this long expires (refreshed every third of it)",
                 &Options::directory_ttl),
      Tunable{"log_level", "FERRY_LOG", "", "error, warn, info, debug or trace (any case)",
              [](const Options& o) { return std::string(to_string(o.log_level)); },
              [](Options& o, std::string_view v) -> Status {
                auto r = parse_level("FERRY_LOG", v);
                if (!r.ok()) return r.status();
                o.log_level = r.value();
                return Status();
              }},
  };
  return table;
}

}  // namespace

Result<Options> apply_environment(Options base) {
  for (const Tunable& t : tunables()) {
    const char* v = std::getenv(t.env);
    if (v == nullptr) continue;
    FERRY_RETURN_IF_ERROR(t.set(base, v));
  }
  // NCCL's TCPX binding variables stand in for ours when ours are unset.
  if (base.tx_bindings.empty()) {
    if (const char* v = std::getenv("NCCL_GPUDIRECTTCPX_TX_BINDINGS")) base.tx_bindings = v;
  }
  if (base.rx_bindings.empty()) {
    if (const char* v = std::getenv("NCCL_GPUDIRECTTCPX_RX_BINDINGS")) base.rx_bindings = v;
  }
  // The secret may also come from a file, so it stays out of process listings.
  if (const char* path = std::getenv("FERRY_AUTH_TOKEN_FILE"); path != nullptr && base.auth_token.empty()) {
    std::ifstream in(path);
    if (!in) {
      return Status(Code::kInvalidArgument, std::string("FERRY_AUTH_TOKEN_FILE=\"") + path + "\": cannot be read");
    }
    std::stringstream ss;
    ss << in.rdbuf();
    std::string token = ss.str();
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
    base.auth_token = token;
  }
  FERRY_RETURN_IF_ERROR(validate(base));
  return base;
}

std::vector<std::string> unknown_environment() {
  // Variables ferry reads outside the tunables' table.
  static const char* const kOthers[] = {"FERRY_AUTH_TOKEN_FILE", "FERRY_LOG_STDERR", "FERRY_NCCL_LIBRARY",
                                        "FERRY_P2P_BASE_PORT", "FERRY_P2P_CONNECT_TIMEOUT"};
  std::vector<std::string> unknown;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    if (entry.rfind("FERRY_", 0) != 0) continue;
    std::string name(entry.substr(0, entry.find('=')));
    // FERRY_TEST_*: the test suites' own switches.
    if (name.rfind("FERRY_TEST_", 0) == 0) continue;
    bool known = std::any_of(std::begin(kOthers), std::end(kOthers), [&](const char* o) { return name == o; });
    for (const Tunable& t : tunables()) known = known || name == t.env;
    if (!known) unknown.push_back(name);
  }
  std::sort(unknown.begin(), unknown.end());
  return unknown;
}

int auto_streams(int cpus) { return std::clamp(cpus / 2, 2, 16); }

Status validate(const Options& o) {
  auto bad = [](const std::string& what) { return Status(Code::kInvalidArgument, "options: " + what); };
  if (o.streams < 0 || o.streams > 64) {
    return bad("streams must be in 0..64 (0: auto), got " + std::to_string(o.streams));
  }
  if (o.workers < 0 || o.workers > 64) {
    return bad("workers must be in 0..64 (0: auto), got " + std::to_string(o.workers));
  }
  if (o.chunk_bytes < 4096 || o.chunk_bytes > (256u << 20)) {
    return bad("chunk_bytes must be in 4 KiB..256 MiB, got " + std::to_string(o.chunk_bytes));
  }
  if (o.window < 1 || o.window > 4096) return bad("window must be in 1..4096, got " + std::to_string(o.window));
  if (o.staging_depth < 1 || o.staging_depth > 64) {
    return bad("staging_depth must be in 1..64, got " + std::to_string(o.staging_depth));
  }
  if (o.staging_chunk_bytes < 4096 || o.staging_chunk_bytes > (64u << 20)) {
    return bad("staging_chunk_bytes must be in 4 KiB..64 MiB, got " + std::to_string(o.staging_chunk_bytes));
  }
  if (o.gather_linger < std::chrono::microseconds(0) || o.gather_linger > std::chrono::seconds(10)) {
    return bad("gather_linger must be in 0..10 s, got " + std::to_string(o.gather_linger.count()) + " us");
  }
  if (o.inline_max > Options::kMaxInline) {
    return bad("inline_max must be at most 1 MiB, got " + std::to_string(o.inline_max));
  }
  if (Status s = core::check_option_names(o); !s.ok()) return bad(s.message());
  if (static_cast<int>(o.log_level) > static_cast<int>(LogLevel::kTrace)) {
    return bad("log_level must be error, warn, info, debug or trace, got " +
               std::to_string(static_cast<int>(o.log_level)));
  }
  if (o.peer_timeout <= o.heartbeat_interval) {
    return bad("peer_timeout (" + std::to_string(o.peer_timeout.count()) + " ms) must exceed heartbeat_interval (" +
               std::to_string(o.heartbeat_interval.count()) + " ms)");
  }
  if (o.max_connections < 1) return bad("max_connections must be at least 1");
  if (o.max_handshakes < 1) return bad("max_handshakes must be at least 1");
  if (o.max_connections_per_peer < 1) return bad("max_connections_per_peer must be at least 1");
  if (o.max_streams < 1) return bad("max_streams must be at least 1");
  if (o.connection_memory_bytes < (1u << 20)) {
    return bad("connection_memory_bytes must be at least 1 MiB, got " + std::to_string(o.connection_memory_bytes));
  }
  if (o.engine_memory_bytes < o.connection_memory_bytes) {
    return bad("engine_memory_bytes (" + std::to_string(o.engine_memory_bytes) +
               ") must be at least connection_memory_bytes (" + std::to_string(o.connection_memory_bytes) + ")");
  }
  if (!o.directory.empty()) {
    auto u = directory::parse_directory_url(o.directory);
    if (!u.ok()) return bad(u.status().message());
  }
  if (!o.name.empty() && !Directory::valid_name(o.name)) {
    return bad("name must be 1-128 bytes of [A-Za-z0-9._-], got \"" + o.name + "\"");
  }
  if (o.directory_ttl < std::chrono::milliseconds(300) || o.directory_ttl > std::chrono::hours(1)) {
    return bad("directory_ttl must be in 300 ms..1 h, got " + std::to_string(o.directory_ttl.count()) + " ms");
  }
  if (o.listen.find(':') == std::string::npos) return bad("listen must be host:port, got \"" + o.listen + "\"");
  return Status();
}

std::vector<TunableInfo> describe_tunables(const Options& options) {
  Options defaults;
  std::vector<TunableInfo> out;
  for (const Tunable& t : tunables()) {
    out.push_back(TunableInfo{t.name, t.env, t.get(defaults), t.get(options), t.unit, t.doc});
  }
  return out;
}

}  // namespace ferry
