// `ferry bench`: measures ferry between two engines — a target (--listen) and
// an initiator (--peer) — or both on this host (--local, the main job: the
// target runs as a child process). Prints a table (size, GB/s, p50/p99
// latency) on stdout, progress on stderr, and optionally JSON.
//
// The two sides agree on the run over the ferry connection itself: the
// initiator sends the configuration, both exchange descriptors, and each size
// is bracketed by "begin"/"end" messages that carry checksums for --verify.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string_view>
#include <system_error>
#include <thread>

#include "ferry/bench_alternate.h"
#include "ferry/bench_blocks.h"
#include "ferry/bench_fleet.h"
#include "ferry/bench_gate.h"
#include "ferry/bench_local_target.h"
#include "ferry/bench_pairs.h"
#include "ferry/bench_process_stats.h"
#include "ferry/bench_session.h"
#include "ferry/bench_sizes.h"
#include "ferry/commands.h"
#include "ferry/connect_hint.h"
#include "ferry/ferry.h"
#include "platform/thread.h"

namespace ferry::cli {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

struct BenchFlags {
  bool local = false;
  std::string listen;
  std::string peer;
  std::string directory;  // --directory (else FERRY_DIRECTORY): names for --listen and --peer
  std::string transport;  // --transport: auto, tcp or local (else FERRY_TRANSPORT)
  std::string op = "send";
  std::string sizes = "4K:64M:x4";
  int iters = 20;
  int warmup = 3;
  int inflight = 1;
  int streams = 0;
  std::string chunk;
  int window = 0;
  bool bidir = false;
  bool verify = false;
  std::string footprint;
  bool once = false;
  std::string json_out;
  std::string nics;
  // --gpus: one session per listed GPU at once, each to the peer's GPU of the
  // same index (or of --peer-gpus at the same position).
  std::string gpus;
  std::string peer_gpus;
  std::string gate;  // --gate DIR:N: timed phases start together in N bench processes (with --gpus)
  // --sweep: one run per combination of these, rows appended to a CSV.
  std::string sweep_csv;
  std::string sweep_chunk = "64K,256K,512K,1M,4M";
  std::string sweep_window = "2,4,8,16,32";
  std::string sweep_streams = "1,2,4";
  std::string sweep_nics;  // NIC counts; default: all of --nics
  // --alternate-nics: NIC sets measured against each other, burst by burst.
  std::string alternate_nics;
  int rounds = 30;
  // Host memory the buffers may take at once (a target: all its sessions).
  std::string max_memory;
  // --blocks N --block-size S [--scatter]: a KV cache's write (bench_blocks.h).
  uint64_t blocks = 0;
  std::string block_size;
  bool scatter = false;
  // --peers N: N initiator engines against one --local target (bench_fleet.h).
  int peers = 0;
  // A target's sessions at once (0: kMaxSessions).
  int max_sessions = 0;
  // --fan-out N: one initiator engine against N target engines (bench_fleet.h);
  // --engines N: a target's engines (what --fan-out starts).
  int fan_out = 0;
  int engines = 0;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string first_nics(const std::vector<std::string>& nics, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && i < nics.size(); ++i) out += (i ? "," : "") + nics[i];
  return out;
}

// A command line that cannot run: the reason, then exit code 2 (usage.h).
// A run that failed exits 1 (die).
int usage_error(const std::string& what) {
  std::fprintf(stderr, "ferry bench: %s\nRun 'ferry bench --help' for its flags.\n", what.c_str());
  return 2;
}

// The value of a flag, or a usage error naming it (exit 2): a value the
// command line got wrong is the user's to fix, not a run that failed.
template <typename T>
T flag_value(Result<T> r, const std::string& flag) {
  if (!r.ok()) std::exit(usage_error(flag + ": " + r.status().message()));
  return std::move(r).value();
}

// A comma-separated list of whole numbers in [lo, hi], for --sweep-*.
Result<std::vector<int>> parse_int_list(const std::string& s, int lo, int hi) {
  std::vector<int> out;
  for (const std::string& item : split_list(s)) {
    int v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || p != item.data() + item.size() || v < lo || v > hi) {
      return Status(Code::kInvalidArgument, "\"" + item + "\" is not a whole number in [" + std::to_string(lo) + ", " +
                                                std::to_string(hi) + "]");
    }
    out.push_back(v);
  }
  if (out.empty()) return Status(Code::kInvalidArgument, "empty list");
  return out;
}

// "0-3,6" -> {0, 1, 2, 3, 6}; empty on a malformed list.
std::vector<int> parse_gpu_list(const std::string& s) {
  std::vector<int> out;
  for (const std::string& item : split_list(s)) {
    if (item == "host") {  // host memory on that side: what staging costs on one side alone
      out.push_back(-1);
      continue;
    }
    int a = 0, b = 0;
    char dash = 0;
    int n = std::sscanf(item.c_str(), "%d%c%d", &a, &dash, &b);
    if (n == 1 && a >= 0) {
      out.push_back(a);
    } else if (n == 3 && dash == '-' && a >= 0 && b >= a) {
      for (int g = a; g <= b; ++g) out.push_back(g);
    } else {
      return {};
    }
  }
  return out;
}

// ", footprint 1G" when operations take turns through a footprint.
std::string footprint_note(const RunConfig& cfg) {
  return cfg.footprint > 0 ? ", footprint " + format_bytes(cfg.footprint) : "";
}

std::string side_name(int gpu) { return gpu < 0 ? "host" : "gpu" + std::to_string(gpu); }

// Sessions a target runs at once unless --max-sessions says otherwise; an
// initiator past them is turned away.
constexpr size_t kMaxSessions = 64;

// Serves `engine`'s sessions, each on its own thread (a --gpus initiator
// opens one connection per GPU at once). A failed session (refused, cut
// short, broken protocol) is logged and its connection closed; the target
// goes on serving. With --once, returns after the first group of sessions
// ended: 0 when they all succeeded, 1 otherwise.
int serve_engine(const BenchFlags& f, Engine& engine, MemoryBudget& budget) {
  struct Session {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::atomic<int> ended{0}, group{0}, failed{0};
  std::vector<Session> sessions;
  const size_t max_sessions = f.max_sessions > 0 ? static_cast<size_t>(f.max_sessions) : kMaxSessions;
  auto reap = [&sessions] {
    for (auto it = sessions.begin(); it != sessions.end();) {
      if (!it->done->load()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = sessions.erase(it);
    }
  };
  for (;;) {
    reap();
    if (f.once && group.load() > 0 && ended.load() >= group.load()) break;
    auto conn = engine.accept(after(100ms));
    if (!conn.ok()) {
      if (conn.status().code() == Code::kDeadlineExceeded) continue;
      die("accept", conn.status());
    }
    std::shared_ptr<Connection> c = conn.value();
    std::string from = printable(c->peer_address());
    if (sessions.size() >= max_sessions) {
      std::fprintf(stderr, "ferry bench: session from %s refused: %zu sessions running, the most this target serves\n",
                   from.c_str(), sessions.size());
      c->close();
      continue;
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    auto serve = [&engine, &budget, &ended, &group, &failed, c, done, from] {
      Result<RunConfig> cfg = serve_session(engine, c, budget);
      c->close();
      if (!cfg.ok()) {
        std::fprintf(stderr, "ferry bench: session from %s failed: %s\n", from.c_str(),
                     printable(cfg.status().to_string()).c_str());
        failed.fetch_add(1);
      }
      int want = cfg.ok() ? cfg->group : 1;
      int g = group.load();
      while (g < want && !group.compare_exchange_weak(g, want)) {
      }
      ended.fetch_add(1);
      done->store(true);
    };
    try {
      sessions.push_back(Session{std::thread(serve), done});
    } catch (const std::system_error& e) {
      std::fprintf(stderr, "ferry bench: session from %s refused: cannot start its thread: %s\n", from.c_str(),
                   e.what());
      c->close();
    }
  }
  for (auto& s : sessions) s.thread.join();
  return failed.load() > 0 ? 1 : 0;
}

// Runs the target: one engine (--engines N: N engines, each on an address
// of its own and serving on a thread of its own, all sharing --max-memory;
// `--fan-out` connects to each) and serves it as serve_engine says. Each
// engine's address is a line "ferry bench target listening on ADDR".
int run_target(const BenchFlags& f, const Options& options) {
  Options o = options;
  // A name (no ':') is published in the directory; the engine listens where
  // FERRY_LISTEN says (default 127.0.0.1:0).
  if (f.listen.find(':') == std::string::npos && Directory::valid_name(f.listen)) {
    o.name = f.listen;
  } else {
    o.listen = f.listen;
  }
  const int count = std::max(1, f.engines);
  if (count > 1 && !o.name.empty()) return usage_error("--engines N listens on addresses, not on a directory name");
  uint64_t max_memory = f.max_memory.empty() ? 0 : flag_value(parse_bytes(f.max_memory), "--max-memory");
  std::vector<std::unique_ptr<Engine>> engines;
  for (int i = 0; i < count; ++i) engines.push_back(must(Engine::create(o), "create engine"));
  MemoryBudget budget(max_memory);
  Engine& first = *engines[0];
  if (!o.name.empty() && first.directory() == nullptr) {
    std::fprintf(stderr, "ferry bench: --listen %s is a name: give --directory URL (or FERRY_DIRECTORY)\n",
                 o.name.c_str());
    return 2;
  }
  for (const auto& e : engines) std::printf("ferry bench target listening on %s\n", e->address().c_str());
  if (first.directory() != nullptr) {
    std::printf("ferry bench target published as \"%s\" in %s (incarnation %" PRIu64 ")\n", first.name().c_str(),
                first.directory()->url().c_str(), first.incarnation());
  }
  std::fflush(stdout);
  if (count == 1) return serve_engine(f, first, budget);
  std::atomic<int> rc{0};
  std::vector<std::thread> serving;
  for (const auto& e : engines) {
    Engine* engine = e.get();
    serving.push_back(platform::start_thread("bench-serve", [&f, &budget, &rc, engine] {
      if (serve_engine(f, *engine, budget) != 0) rc.store(1);
    }));
  }
  for (auto& t : serving) t.join();
  return rc.load();
}

// The flags of the --local target (bench_local_target.h): the initiator's
// engine settings, so that both ends agree.
std::vector<std::string> local_target_flags(const BenchFlags& f) {
  std::vector<std::string> args;
  if (f.sweep_csv.empty()) args.push_back("--once");  // a sweep opens one session per combination
  if (f.streams > 0) {
    args.push_back("--streams");
    args.push_back(std::to_string(f.streams));
  }
  if (!f.chunk.empty()) {
    args.push_back("--chunk");
    args.push_back(f.chunk);
  }
  if (!f.max_memory.empty()) {
    args.push_back("--max-memory");
    args.push_back(f.max_memory);
  }
  if (f.window > 0) {
    args.push_back("--window");
    args.push_back(std::to_string(f.window));
  }
  if (f.peers > 0 || f.fan_out > 0) {
    std::vector<std::string> fleet = prepare_fleet_target(std::max(f.peers, f.fan_out), f.fan_out > 0);
    args.insert(args.end(), fleet.begin(), fleet.end());
  }
  return args;
}

// The settings that shape a transfer over the named transport (TCP's streams,
// chunks and window mean nothing to the same-host transport).
std::string transport_note(const std::string& transport, const Options& o) {
  if (transport != "tcp") return "";
  std::string streams = o.streams == kAutoStreams
                            ? "auto: " + std::to_string(auto_streams(platform::usable_cpu_count())) + " streams in all"
                            : std::to_string(o.streams) + " streams";
  return " (" + streams + ", chunk " + format_bytes(o.chunk_bytes) + ", window " + std::to_string(o.window) + ")";
}

// The first line of a table: what was measured over which transport, e.g.
// "# send over the local transport, 1 in flight". Two engines on one host
// take the local transport unless told otherwise, so a table read alone (or
// set beside iperf3's) must say which one it measured.
std::string table_title(const RunConfig& cfg, const std::string& transport, const Options& o) {
  return "# " + cfg.op + " over the " + transport + " transport" + transport_note(transport, o) + ", " +
         std::to_string(cfg.inflight) + " in flight" + footprint_note(cfg);
}

// "--a", "--a and --b", "--a, --b and --c".
std::string join_words(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == words.size() ? " and " : ", ") + words[i];
  }
  return out;
}

// One line on stderr when flags given shape only TCP transfers (streams,
// chunks, window) and the connection took another transport: the local
// transport moves bytes through shared memory and ignores them, so a run
// that varies them measures the same thing each time.
void note_flags_without_effect(const BenchFlags& f, const std::string& transport) {
  if (transport == "tcp") return;
  std::vector<std::string> given;
  if (f.streams > 0) given.push_back("--streams");
  if (!f.chunk.empty()) given.push_back("--chunk");
  if (f.window > 0) given.push_back("--window");
  if (given.empty()) return;
  std::fprintf(stderr,
               "ferry bench: note: %s %s nothing on the %s transport (TCP's settings); --transport tcp measures TCP\n",
               join_words(given).c_str(), given.size() == 1 ? "does" : "do", transport.c_str());
}

// SIGINT while it lives: the first sets flag(), the second ends the process
// as Ctrl-C does. A signal handler can only reach a static.
class InterruptLatch {
 public:
  InterruptLatch() {
    fired_.store(false);
    struct sigaction sa {};
    sa.sa_handler = &InterruptLatch::on_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_);
  }
  ~InterruptLatch() { ::sigaction(SIGINT, &old_, nullptr); }
  InterruptLatch(const InterruptLatch&) = delete;
  InterruptLatch& operator=(const InterruptLatch&) = delete;

  const std::atomic<bool>* flag() const { return &fired_; }
  bool fired() const { return fired_.load(); }

 private:
  static void on_signal(int) {
    if (fired_.exchange(true)) {
      ::signal(SIGINT, SIG_DFL);
      ::raise(SIGINT);
      return;
    }
    static const char kNote[] = "\nferry bench: interrupted: finishing this size (Ctrl-C again to quit now)\n";
    (void)!::write(2, kNote, sizeof(kNote) - 1);
  }

  static inline std::atomic<bool> fired_{false};
  struct sigaction old_ {};
};

// One session per GPU, all at once; per-GPU and aggregate bandwidth per size.
void print_table(const RunConfig& cfg, const std::vector<SizeResult>& rs);

int run_gpus(const BenchFlags& f, const Options& o, RunConfig cfg, const std::string& peer) {
  std::vector<int> gpus = parse_gpu_list(f.gpus);
  std::vector<int> peers = f.peer_gpus.empty() ? gpus : parse_gpu_list(f.peer_gpus);
  if (gpus.empty() || peers.size() != gpus.size()) {
    std::fprintf(stderr, "ferry bench: --gpus takes a list like 0-7 or 0,2; --peer-gpus one of the same length\n");
    return 2;
  }
  std::optional<FileGate> gate;
  if (!f.gate.empty()) gate = must(FileGate::parse(f.gate), "--gate");
  auto engine = must(Engine::create(o), "create engine");
  size_t n = gpus.size();
  std::vector<std::shared_ptr<Connection>> conns;
  for (size_t i = 0; i < n; ++i) conns.push_back(connect_or_die(*engine, peer));
  std::string transport(conns[0]->transport_name());
  std::string staging = transport == "tcp" ? ", staging chunk " + format_bytes(engine->options().staging_chunk_bytes) +
                                                 " depth " + std::to_string(engine->options().staging_depth)
                                           : "";
  std::fprintf(stderr, "ferry bench: %s, GPUs %s -> peer GPUs %s over the %s transport%s%s, %d in flight%s\n",
               cfg.op.c_str(), f.gpus.c_str(), f.peer_gpus.empty() ? f.gpus.c_str() : f.peer_gpus.c_str(),
               transport.c_str(), transport_note(transport, engine->options()).c_str(), staging.c_str(), cfg.inflight,
               footprint_note(cfg).c_str());
  note_flags_without_effect(f, transport);
  // The last session to arrive also waits for the other processes of --gate.
  auto pass_gate = [&gate]() noexcept {
    if (gate) must(gate->pass(after(120s)), "--gate");
  };
  std::barrier sync(static_cast<std::ptrdiff_t>(n), pass_gate);
  std::vector<std::vector<SizeResult>> results(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      RunConfig c = cfg;
      c.gpu = gpus[i];
      c.peer_gpu = peers[i];
      c.group = static_cast<int>(n);
      c.sync = [&sync] { sync.arrive_and_wait(); };
      results[i] = run_initiator(*engine, *conns[i], c);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& c : conns) c->close();
  if (f.json_out == "-") {
    // One JSON object per size on stdout (for scripts).
    for (size_t s = 0; s < cfg.sizes.size(); ++s) {
      Clock::time_point first = results[0][s].start, last = results[0][s].end;
      double bytes = 0;
      json per = json::array(), p50 = json::array(), p99 = json::array();
      bool ok = true;
      for (size_t i = 0; i < n; ++i) {
        const SizeResult& r = results[i][s];
        first = std::min(first, r.start);
        last = std::max(last, r.end);
        bytes += static_cast<double>(r.bytes) * r.iters * (cfg.bidir ? 2 : 1);
        per.push_back(r.bytes_per_s);
        p50.push_back(r.p50_us);
        p99.push_back(r.p99_us);
        ok = ok && r.verified != "FAILED";
      }
      double secs = std::chrono::duration<double>(last - first).count();
      auto ns = [](Clock::time_point t) {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
      };
      std::printf("%s\n", json{{"bytes", cfg.sizes[s]},
                               {"iters", cfg.iters},
                               {"transport", transport},
                               {"start_ns", ns(first)},  // the host's monotonic clock, shared by its processes
                               {"end_ns", ns(last)},
                               {"aggregate_bytes_per_s", secs > 0 ? bytes / secs : 0.0},
                               {"per_gpu_bytes_per_s", per},
                               {"per_gpu_p50_us", p50},
                               {"per_gpu_p99_us", p99},
                               {"verified", ok}}
                              .dump()
                              .c_str());
    }
    return 0;
  }
  std::printf("%s\n", table_title(cfg, transport, engine->options()).c_str());
  if (cfg.blocks > 0) {
    // Each pair's batch against its own contiguous anchor.
    bool bad = false;
    for (size_t i = 0; i < n; ++i) {
      std::printf("%s->%s\n", side_name(gpus[i]).c_str(), side_name(peers[i]).c_str());
      print_table(cfg, results[i]);
      for (const SizeResult& r : results[i]) bad = bad || r.verified == "FAILED";
    }
    return bad ? 3 : 0;
  }
  std::printf("%-12s", "size");
  for (size_t i = 0; i < n; ++i) std::printf(" %9s", (side_name(gpus[i]) + "->" + side_name(peers[i])).c_str());
  std::printf(" %12s%s\n", "aggregate", cfg.verify ? "   verify" : "");
  bool bad = false;
  for (size_t s = 0; s < cfg.sizes.size(); ++s) {
    Clock::time_point first = results[0][s].start, last = results[0][s].end;
    double bytes = 0;
    std::string verified = "ok";
    std::printf("%-12s", format_bytes(cfg.sizes[s]).c_str());
    for (size_t i = 0; i < n; ++i) {
      const SizeResult& r = results[i][s];
      first = std::min(first, r.start);
      last = std::max(last, r.end);
      bytes += static_cast<double>(r.bytes) * r.iters * (cfg.bidir ? 2 : 1);
      if (r.verified == "FAILED") verified = "FAILED";
      std::printf(" %9.3f", r.bytes_per_s / 1e9);
    }
    double secs = std::chrono::duration<double>(last - first).count();
    std::printf(" %12.3f%s%s\n", secs > 0 ? bytes / secs / 1e9 : 0.0, cfg.verify ? "   " : "",
                cfg.verify ? verified.c_str() : "");
    bad = bad || verified == "FAILED";
  }
  std::printf("(GB/s; each GPU's column is its own rate, aggregate is all bytes over the common interval)\n");
  return bad ? 3 : 0;
}

void print_table(const RunConfig& cfg, const std::vector<SizeResult>& rs) {
  if (cfg.blocks > 0) {
    // The ratio is of times per operation: contiguous p50 over the batch's.
    std::printf("%-22s %10s %12s %14s %14s %8s%s\n", "blocks", "GB/s", "p50_us", "contig_GB/s", "contig_p50_us",
                "ratio", cfg.verify ? "   verify" : "");
    for (const auto& r : rs) {
      std::string what = std::to_string(cfg.blocks) + " x " + format_bytes(cfg.block_bytes) +
                         (cfg.scatter ? " scattered" : " adjacent");
      std::printf("%-22s %10.3f %12.1f %14.3f %14.1f %8.2f%s%s\n", what.c_str(), r.bytes_per_s / 1e9, r.p50_us,
                  r.contiguous_bytes_per_s / 1e9, r.contiguous_p50_us,
                  r.p50_us > 0 ? r.contiguous_p50_us / r.p50_us : 0.0, cfg.verify ? "   " : "", r.verified.c_str());
    }
    return;
  }
  // CPU per operation: this process's (the initiator's) and, with
  // --local, the target's; "-" where not known.
  std::printf("%-12s %10s %12s %12s %12s %12s%s\n", "size", "GB/s", "p50_us", "p99_us", "cpu_us/op",
              "peer_cpu_us", cfg.verify ? "   verify" : "");
  for (const auto& r : rs) {
    char peer[32] = "-";
    if (r.peer_cpu_us_per_op >= 0) std::snprintf(peer, sizeof(peer), "%.1f", r.peer_cpu_us_per_op);
    std::printf("%-12s %10.3f %12.1f %12.1f %12.1f %12s%s%s\n", format_bytes(r.bytes).c_str(), r.bytes_per_s / 1e9,
                r.p50_us, r.p99_us, r.cpu_us_per_op, peer, cfg.verify ? "   " : "", r.verified.c_str());
  }
}

void write_json(const BenchFlags& f, const RunConfig& cfg, const Options& o, std::string_view transport,
                const std::vector<SizeResult>& rs) {
  json config{{"op", cfg.op},         {"sizes", cfg.sizes}, {"iters", cfg.iters},
              {"warmup", cfg.warmup}, {"bidir", cfg.bidir}, {"verify", cfg.verify}};
  config["streams"] = o.streams;
  config["chunk_bytes"] = o.chunk_bytes;
  config["window"] = o.window;
  config["inflight"] = cfg.inflight;
  config["footprint"] = cfg.footprint;
  if (cfg.blocks > 0) {
    config["blocks"] = cfg.blocks;
    config["block_bytes"] = cfg.block_bytes;
    config["scatter"] = cfg.scatter;
  }
  config["transport"] = transport;
  config["peer"] = f.local ? "local" : f.peer;
  json results = json::array();
  for (const auto& r : rs) {
    json j{{"op", cfg.op},
           {"bytes", r.bytes},
           {"iters", r.iters},
           {"bytes_per_s", r.bytes_per_s},
           {"lat_us", {{"p50", r.p50_us}, {"p99", r.p99_us}}}};
    if (!r.verified.empty()) j["verified"] = r.verified == "ok";
    j["cpu_us_per_op"] = r.cpu_us_per_op;
    if (r.peer_cpu_us_per_op >= 0) j["peer_cpu_us_per_op"] = r.peer_cpu_us_per_op;
    if (cfg.blocks > 0) {
      j["blocks"] = cfg.blocks;
      j["block_bytes"] = cfg.block_bytes;
      j["contiguous"] = {{"bytes_per_s", r.contiguous_bytes_per_s}, {"lat_us", {{"p50", r.contiguous_p50_us}}}};
      j["ratio"] = r.p50_us > 0 ? r.contiguous_p50_us / r.p50_us : 0.0;
    }
    results.push_back(j);
  }
  std::string text = json{{"config", config}, {"results", results}}.dump(2) + "\n";
  if (f.json_out == "-") {
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream out(f.json_out);
    out << text;
    if (!out) die("write " + f.json_out, Status(Code::kUnavailable, "cannot write"));
  }
}

// What --sweep runs through, checked before anything starts.
struct SweepLists {
  std::vector<uint64_t> chunks;
  std::vector<int> windows, streams, nic_counts;
};

// The --sweep-* lists, or a usage error (exit 2) naming the bad one.
SweepLists parse_sweep_lists(const BenchFlags& f) {
  SweepLists l;
  for (const auto& c : split_list(f.sweep_chunk)) l.chunks.push_back(flag_value(parse_bytes(c), "--sweep-chunk"));
  if (l.chunks.empty()) std::exit(usage_error("--sweep-chunk: empty list"));
  l.windows = flag_value(parse_int_list(f.sweep_window, 1, 4096), "--sweep-window");
  l.streams = flag_value(parse_int_list(f.sweep_streams, 1, 64), "--sweep-streams");
  int nics = static_cast<int>(split_list(f.nics).size());
  if (f.sweep_nics.empty()) {
    l.nic_counts.push_back(nics);
  } else if (nics == 0) {
    std::exit(usage_error("--sweep-nics: counts of --nics, which was not given"));
  } else {
    l.nic_counts = flag_value(parse_int_list(f.sweep_nics, 1, nics), "--sweep-nics");
  }
  return l;
}

// One session per combination of chunk size, window, streams per NIC pair and
// NIC count; every size's result becomes a CSV row (see docs/tuning.md).
int run_sweep(const BenchFlags& f, const SweepLists& lists, const Options& base, const RunConfig& cfg,
              const std::string& peer) {
  const std::vector<uint64_t>& chunks = lists.chunks;
  const std::vector<int>&windows = lists.windows, &streams = lists.streams, &nic_counts = lists.nic_counts;
  std::vector<std::string> nics = split_list(f.nics);
  std::FILE* csv = std::fopen(f.sweep_csv.c_str(), "w");
  if (csv == nullptr) die("open " + f.sweep_csv, Status(Code::kUnavailable, std::strerror(errno)));
  // transport last, so that readers of the older columns find them where they were.
  std::fprintf(csv, "op,bytes,chunk_bytes,window,streams,nics,iters,gbps,p50_us,p99_us,verified,transport\n");
  size_t runs = chunks.size() * windows.size() * streams.size() * nic_counts.size(), n = 0;
  bool bad = false, noted = false;
  for (uint64_t chunk : chunks) {
    for (int window : windows) {
      for (int stream : streams) {
        for (int nic_count : nic_counts) {
          Options o = base;
          o.chunk_bytes = chunk;
          o.window = window;
          o.streams = stream;
          o.nics = first_nics(nics, static_cast<size_t>(nic_count));
          std::fprintf(stderr, "ferry bench: sweep %zu/%zu: chunk %s window %d streams %d nics %d\n", ++n, runs,
                       format_bytes(chunk).c_str(), window, stream, nic_count);
          auto engine = must(Engine::create(o), "create engine");
          auto conn = connect_or_die(*engine, peer);
          std::string transport(conn->transport_name());
          if (transport != "tcp" && !noted) {
            std::fprintf(stderr,
                         "ferry bench: note: the sweep's chunk sizes, windows and streams do nothing on the %s "
                         "transport: every combination measures the same thing; --transport tcp sweeps TCP\n",
                         transport.c_str());
            noted = true;
          }
          for (const SizeResult& r : run_initiator(*engine, *conn, cfg)) {
            std::fprintf(csv, "%s,%" PRIu64 ",%" PRIu64 ",%d,%d,%d,%d,%.4f,%.1f,%.1f,%s,%s\n", cfg.op.c_str(), r.bytes,
                         chunk, window, stream, nic_count, r.iters, r.bytes_per_s / 1e9, r.p50_us, r.p99_us,
                         r.verified.c_str(), transport.c_str());
            bad = bad || r.verified == "FAILED";
          }
          std::fflush(csv);
          conn->close();
        }
      }
    }
  }
  std::fclose(csv);
  std::fprintf(stderr, "ferry bench: sweep written to %s\n", f.sweep_csv.c_str());
  return bad ? 3 : 0;
}

int run_bench(const BenchFlags& f) {
  int modes = (f.local ? 1 : 0) + (!f.listen.empty() ? 1 : 0) + (!f.peer.empty() ? 1 : 0);
  if (modes != 1) {
    std::fprintf(stderr, "ferry bench: give exactly one of --local, --listen ADDR, --peer ADDR\n");
    return 2;
  }
  Options o;
  if (!f.transport.empty()) {
    // The engine applies FERRY_TRANSPORT over its options, and the --local
    // target reads only its environment: the flag takes the variable's place
    // in this process, and so in the target it starts.
    ::setenv("FERRY_TRANSPORT", f.transport.c_str(), 1);
    o.transport = flag_value(parse_transport(f.transport), "--transport");
  }
  if (f.streams > 0) o.streams = f.streams;
  if (!f.chunk.empty()) {
    auto chunk = parse_bytes(f.chunk);
    if (!chunk.ok()) return usage_error("--chunk: " + chunk.status().message());
    o.chunk_bytes = chunk.value();
  }
  if (f.window > 0) o.window = f.window;
  if (!f.nics.empty()) o.nics = f.nics;
  if (!f.directory.empty()) o.directory = f.directory;
  // Every flag is checked before anything runs, the output file too.
  if (Status v = validate(o); !v.ok()) return usage_error(v.message());
  // And the FERRY_* variables, here and once: a bad one would otherwise fail
  // the --local target's engine first, then this one's.
  if (auto env = apply_environment(o); !env.ok()) {
    std::fprintf(stderr, "ferry bench: %s\n", env.status().to_string().c_str());
    return 2;
  }
  if (!f.json_out.empty() && f.json_out != "-") {
    std::FILE* out = std::fopen(f.json_out.c_str(), "a");
    if (out == nullptr) return usage_error("--json " + f.json_out + ": cannot be written: " + std::strerror(errno));
    std::fclose(out);
  }
  if (!f.listen.empty()) return run_target(f, o);

  RunConfig cfg;
  cfg.op = f.op;
  cfg.sizes = flag_value(parse_sizes(f.sizes), "--sizes");
  cfg.iters = f.iters;
  cfg.warmup = f.warmup;
  cfg.inflight = f.inflight;
  cfg.bidir = f.bidir;
  cfg.verify = f.verify;
  if (!f.footprint.empty()) cfg.footprint = flag_value(parse_bytes(f.footprint), "--footprint");
  if (f.blocks > 0 || !f.block_size.empty() || f.scatter) {
    if (f.blocks == 0 || f.block_size.empty()) {
      std::fprintf(stderr, "ferry bench: --blocks N and --block-size S go together (--scatter with them)\n");
      return 2;
    }
    if (f.op != "send" && f.op != "write") {
      std::fprintf(stderr, "ferry bench: --blocks measures a write; --op %s does not apply\n", f.op.c_str());
      return 2;
    }
    if (!f.footprint.empty()) {
      std::fprintf(stderr, "ferry bench: --blocks sets the pools to twice the blocks' bytes; drop --footprint\n");
      return 2;
    }
    cfg.op = "write";
    cfg.blocks = f.blocks;
    cfg.block_bytes = flag_value(parse_bytes(f.block_size), "--block-size");
    cfg.scatter = f.scatter;
    if (cfg.block_bytes == 0 || cfg.block_bytes > (uint64_t{1} << 30) / cfg.blocks) {
      std::fprintf(stderr, "ferry bench: --blocks x --block-size must be 1 byte to 1 GiB\n");
      return 2;
    }
    cfg.sizes = {cfg.blocks * cfg.block_bytes};
    cfg.footprint = 2 * cfg.sizes[0];
  }
  if (cfg.iters < 1 || cfg.warmup < 0) {
    std::fprintf(stderr, "ferry bench: --iters must be >= 1 and --warmup >= 0\n");
    return 2;
  }
  if (cfg.op == "pingpong" && cfg.inflight != 1) {
    std::fprintf(stderr, "ferry bench: --op pingpong waits for each echo: --inflight must be 1\n");
    return 2;
  }
  if (Status v = validate(cfg); !v.ok()) {
    std::fprintf(stderr, "ferry bench: %s\n", v.message().c_str());
    return 2;
  }
  cfg.budget =
      std::make_shared<MemoryBudget>(f.max_memory.empty() ? 0 : flag_value(parse_bytes(f.max_memory), "--max-memory"));
  std::vector<std::string> nic_sets;
  if (!f.alternate_nics.empty()) nic_sets = flag_value(parse_nic_sets(f.alternate_nics), "--alternate-nics");
  SweepLists sweep;
  if (!f.sweep_csv.empty()) sweep = parse_sweep_lists(f);
  if (!f.gate.empty()) flag_value(FileGate::parse(f.gate), "--gate");
  if (f.peers > 0 || f.fan_out > 0) {
    // The target's threads, descriptors and memory are read from its /proc
    // entry: it must be this bench's child.
    if (f.peers > 0 && f.fan_out > 0) return usage_error("give one of --peers N and --fan-out N");
    const std::string flag = f.peers > 0 ? "--peers" : "--fan-out";
    if (!f.local) return usage_error(flag + " N runs against a --local target (its /proc numbers are reported)");
    if (!f.gpus.empty() || !f.sweep_csv.empty() || !f.alternate_nics.empty()) {
      return usage_error(flag + " does not combine with --gpus, --sweep or --alternate-nics");
    }
  }
  std::string peer = f.peer;
  if (f.peers > 0 || f.fan_out > 0) {
    bool fan_out = f.fan_out > 0;
    int n = fan_out ? f.fan_out : f.peers;
    std::vector<std::string> targets =
        start_local_targets(local_target_flags(f), /*once=*/true, static_cast<size_t>(fan_out ? n : 1));
    int rc = run_fleet(FleetRun{n, fan_out, targets, local_target_pid(), f.json_out}, o, cfg);
    stop_local_target();
    return rc;
  }
  if (f.local) {
    peer = start_local_target(local_target_flags(f), /*once=*/f.sweep_csv.empty());
  }
  if (!f.gpus.empty()) {
    int rc = run_gpus(f, o, cfg, peer);
    stop_local_target();
    return rc;
  }
  if (!f.alternate_nics.empty()) {
    int rc = run_alternating(nic_sets, o, cfg, f.rounds, peer);
    stop_local_target();
    return rc;
  }
  if (!f.sweep_csv.empty()) {
    int rc = run_sweep(f, sweep, o, cfg, peer);
    stop_local_target();
    return rc;
  }
  auto engine = must(Engine::create(o), "create engine");
  auto conn = connect_or_die(*engine, peer);
  std::string transport(conn->transport_name());
  std::fprintf(stderr, "ferry bench: %s to %s over the %s transport%s, %d in flight%s\n", cfg.op.c_str(), peer.c_str(),
               transport.c_str(), transport_note(transport, engine->options()).c_str(), cfg.inflight,
               footprint_note(cfg).c_str());
  note_flags_without_effect(f, transport);
  // Ctrl-C: the size being measured finishes, then what was measured is
  // printed (and written) as usual; a second Ctrl-C quits at once.
  InterruptLatch interrupt;
  cfg.stop = interrupt.flag();
  if (pid_t target = local_target_pid(); target != 0) {
    cfg.peer_cpu_ns = [target]() -> uint64_t {
      auto ns = process_cpu_ns(target);
      return ns.ok() ? *ns : 0;
    };
  }
  auto results = run_initiator(*engine, *conn, cfg);
  conn->close();
  stop_local_target();
  if (f.json_out != "-") {
    std::printf("%s\n", table_title(cfg, transport, engine->options()).c_str());
    print_table(cfg, results);
  }
  if (!f.json_out.empty()) write_json(f, cfg, engine->options(), transport, results);
  // Failovers happen silently to the numbers: say what they cost.
  MetricsSnapshot m = engine->metrics();
  uint64_t lost = m.paths_lost.count("tcp") > 0 ? m.paths_lost.at("tcp") : 0;
  if (lost > 0 || m.resent.count("tcp") > 0) {
    ResentCounts r = m.resent.count("tcp") > 0 ? m.resent.at("tcp") : ResentCounts{};
    std::fprintf(stderr, "ferry bench: %llu data path(s) lost; %llu chunks (%llu bytes) resent on the others\n",
                 static_cast<unsigned long long>(lost), static_cast<unsigned long long>(r.chunks),
                 static_cast<unsigned long long>(r.bytes));
  }
  if (interrupt.fired()) {
    std::fprintf(stderr, "ferry bench: interrupted after %zu of %zu sizes\n", results.size(), cfg.sizes.size());
    return 130;
  }
  bool bad = std::any_of(results.begin(), results.end(), [](const SizeResult& r) { return r.verified == "FAILED"; });
  return bad ? 3 : 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* b = app.add_subcommand("bench", "measure transfers between two engines");
  b->add_flag("--local", f->local, "start a target and an initiator on this host (the main job)");
  b->add_option("--listen", f->listen,
                "run as target, listening on ADDR (host:port), or published in the directory as NAME");
  b->add_option("--peer", f->peer, "run as initiator against the target at ADDR (host:port or a directory NAME)");
  b->add_option("--directory", f->directory,
                "redis://host:port[/ns] or etcd://host:port[/ns]: where --listen NAME publishes and --peer NAME "
                "resolves (default: FERRY_DIRECTORY)");
  b->add_option("--transport", f->transport,
                "auto (the local transport for a peer on this host, TCP otherwise), tcp or local; set it to tcp to "
                "measure TCP between two engines of one host (default: FERRY_TRANSPORT, else auto)")
      ->check(CLI::IsMember({"auto", "tcp", "local"}));
  b->add_option("--op", f->op, "send, write, read or pingpong")
      ->check(CLI::IsMember({"send", "write", "read", "pingpong"}));
  b->add_option("--sizes", f->sizes,
                "sizes: list and ranges, e.g. 4K,1M or 1K:256M:x4; units K, M, G, T in either case, alone or as KB "
                "or KiB, all 1024-based: 1KB = 1KiB = 1024 bytes (here and in every size flag)")
      ->capture_default_str();
  b->add_option("--iters", f->iters, "timed operations per size")->capture_default_str();
  b->add_option("--warmup", f->warmup, "untimed operations per size first")->capture_default_str();
  b->add_option("--inflight", f->inflight,
                "operations posted before the oldest is awaited (1: each waits for the one before; more: as a "
                "timing loop that enqueues its iterations on a stream, like nccl-tests)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  b->add_option("--streams", f->streams,
                "TCP: data streams per NIC pair (default: FERRY_STREAMS, else auto: half the CPUs, 2..16, in all)")
      ->check(CLI::Range(1, 64));
  b->add_option("--chunk", f->chunk, "TCP: chunk size, e.g. 512K");
  b->add_option("--window", f->window, "TCP: chunks in flight per stream")->check(CLI::Range(1, 4096));
  b->add_flag("--bidir", f->bidir, "both sides move data at once");
  b->add_flag("--verify", f->verify, "fill with random bytes and compare checksums end to end");
  b->add_option("--footprint", f->footprint,
                "each side's source and destination span at least this much (e.g. 1G) and operations take "
                "turns through it, so that no operation finds the last one's bytes in the CPU's caches");
  b->add_flag("--once", f->once, "target: serve one initiator, then exit");
  b->add_option("--max-memory", f->max_memory,
                "host memory the buffers may take at once, e.g. 8G (a target: all its sessions together); a "
                "session asking for more is refused (default: half the memory available at start)");
  b->add_option("--blocks", f->blocks, "write N blocks as one operation (a KV cache's), against one contiguous write")
      ->check(CLI::Range(uint64_t{1}, kMaxBlocks));
  b->add_option("--block-size", f->block_size, "--blocks: bytes of each block, e.g. 16K");
  b->add_flag("--scatter", f->scatter, "--blocks: at random aligned places in pools twice their bytes (else adjacent)");
  b->add_option("--peers", f->peers,
                "with --local: N initiator engines of this process, one connection each, run the session at once "
                "against one target process; prints aggregate GB/s, each peer's rate and p50/p99, the slowest "
                "peer's share of the mean, the setup time of all N, and the target's threads, fds and RSS with 1 "
                "peer, N idle and N loaded (the target is given --max-sessions N and FERRY_MAX_CONNECTIONS, "
                "FERRY_MAX_CONNECTIONS_PER_PEER of at least N unless they are set)")
      ->check(CLI::Range(1, kMaxPeers));
  b->add_option("--fan-out", f->fan_out,
                "with --local: the other way from --peers: one initiator engine connected to N target engines "
                "(all in one target process), the session run on every connection at once; the same table, with "
                "this process's (the initiator's) threads, fds and RSS")
      ->check(CLI::Range(1, kMaxPeers));
  b->add_option("--engines", f->engines, "target: N engines, each on an address of its own (what --fan-out starts)")
      ->check(CLI::Range(1, kMaxPeers));
  b->add_option("--max-sessions", f->max_sessions,
                "target: sessions served at once; one more is refused (default 64; --local --peers N gives its own "
                "target N and its probes)")
      ->check(CLI::Range(1, kMaxGroup));
  b->add_option("--json", f->json_out, "also write results as JSON to FILE, or - for stdout");
  b->add_option("--nics", f->nics, "NICs to serve and stripe over, e.g. eth1,eth2 (FERRY_NICS)");
  b->add_option("--gpus", f->gpus,
                "GPU memory: one session per listed GPU at once (e.g. 0-7), each to the peer's GPU of the same "
                "index; prints per-GPU and aggregate GB/s");
  b->add_option("--peer-gpus", f->peer_gpus,
                "the peer's GPUs, position by position (default: same as --gpus); in either list, host stands for "
                "host memory on that side");
  b->add_option("--gate", f->gate,
                "with --gpus: DIR:N, each size's timed phase starts and ends together in the N bench processes "
                "given the same DIR (an empty directory; N counts this one)");
  b->add_option("--sweep", f->sweep_csv, "run every combination of the --sweep-* lists, write CSV rows to FILE");
  b->add_option("--sweep-chunk", f->sweep_chunk, "chunk sizes to sweep")->capture_default_str();
  b->add_option("--sweep-window", f->sweep_window, "windows to sweep")->capture_default_str();
  b->add_option("--sweep-streams", f->sweep_streams, "streams per NIC pair to sweep")->capture_default_str();
  b->add_option("--sweep-nics", f->sweep_nics, "NIC counts to sweep (first N of --nics; default all)");
  b->add_option("--alternate-nics", f->alternate_nics,
                "NIC sets separated by '/', e.g. fa0/fa0,fa1: one connection each, bursts of --iters taking turns; "
                "prints each set's paired ratio to the first");
  b->add_option("--rounds", f->rounds, "--alternate-nics: bursts per set")->capture_default_str();
  b->callback([f] { std::exit(run_bench(*f)); });
}

}  // namespace ferry::cli
