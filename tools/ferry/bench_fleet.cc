// `ferry bench --local --peers N` (see the header): many initiator engines
// against one target process, and what the target holds meanwhile.
#include "ferry/bench_fleet.h"

#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "ferry/bench_process_stats.h"
#include "ferry/bench_sizes.h"
#include "ferry/connect_hint.h"
#include "platform/mutex.h"
#include "platform/thread.h"

namespace ferry::cli {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// How often the target is sampled while the timed phases run: often enough
// to see a phase of a second several times, rarely enough that reading /proc
// (an entry per descriptor and per thread) takes little from a 2-CPU host.
constexpr auto kLoadSampleEvery = 100ms;

ProcessStats sample_or_die(pid_t pid) { return must(sample_process(pid), "sample the target"); }

// Samples the target while the peers' timed phases run and keeps the peak.
// begin() takes one sample on the caller's thread (so a phase shorter than
// kLoadSampleEvery is seen too) and wakes the sampling thread, which sleeps
// on a condition variable between samples until end(). Thread-safe.
class LoadSampler {
 public:
  explicit LoadSampler(pid_t pid) : pid_(pid) {
    thread_ = platform::start_thread("bench-sampler", [this] { loop(); });
  }
  ~LoadSampler() {
    {
      platform::MutexLock lock(mu_);
      quit_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  LoadSampler(const LoadSampler&) = delete;
  LoadSampler& operator=(const LoadSampler&) = delete;

  void begin() EXCLUDES(mu_) {
    ProcessStats s = sample_or_die(pid_);
    {
      platform::MutexLock lock(mu_);
      add(s);
      loading_ = true;
    }
    changed_.notify_all();
  }
  void end() EXCLUDES(mu_) {
    {
      platform::MutexLock lock(mu_);
      loading_ = false;
    }
    changed_.notify_all();
  }
  // The peak over every sample so far, and how many there were.
  ProcessStats peak_seen(int& samples) EXCLUDES(mu_) {
    platform::MutexLock lock(mu_);
    samples = samples_;
    return peak_;
  }

 private:
  void add(const ProcessStats& s) REQUIRES(mu_) {
    peak_ = peak(peak_, s);
    ++samples_;
  }
  void loop() EXCLUDES(mu_) {
    platform::UniqueLock lock(mu_);
    for (;;) {
      // Sleeps until a phase starts, then every kLoadSampleEvery until it ends.
      changed_.wait(lock.native(), [&]() REQUIRES(mu_) { return quit_ || loading_; });
      if (changed_.wait_for(lock.native(), kLoadSampleEvery, [&]() REQUIRES(mu_) { return quit_ || !loading_; })) {
        if (quit_) return;
        continue;
      }
      lock.unlock();
      Result<ProcessStats> s = sample_process(pid_);  // the target ends only after the sessions: ignore a late miss
      lock.lock();
      if (s.ok()) add(*s);
    }
  }

  const pid_t pid_;
  platform::Mutex mu_;
  std::condition_variable changed_;
  bool loading_ GUARDED_BY(mu_) = false;
  bool quit_ GUARDED_BY(mu_) = false;
  ProcessStats peak_ GUARDED_BY(mu_);
  int samples_ GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// Raises the FERRY_* variable `name` to `want` unless it is set (then it is
// the user's choice) or its default `fallback` already admits that many.
void raise_env(const char* name, int fallback, int want) {
  if (std::getenv(name) != nullptr || fallback >= want) return;
  ::setenv(name, std::to_string(want).c_str(), 1);
}

// One size's numbers over all peers.
struct FleetRow {
  uint64_t bytes = 0;
  double aggregate = 0;  // all peers' bytes over the interval from the first start to the last end
  double min_peer = 0, mean_peer = 0;
  double p50_median = 0, p50_max = 0, p99_max = 0;
  bool verified = true;
};

FleetRow summarize(const RunConfig& cfg, const std::vector<std::vector<SizeResult>>& results, size_t s) {
  FleetRow row;
  row.bytes = cfg.sizes[s];
  Clock::time_point first = results[0][s].start, last = results[0][s].end;
  double moved = 0;
  std::vector<double> rates, p50s;
  for (const auto& peer : results) {
    const SizeResult& r = peer[s];
    first = std::min(first, r.start);
    last = std::max(last, r.end);
    moved += r.bytes_per_s * std::chrono::duration<double>(r.end - r.start).count();
    rates.push_back(r.bytes_per_s);
    p50s.push_back(r.p50_us);
    row.p50_max = std::max(row.p50_max, r.p50_us);
    row.p99_max = std::max(row.p99_max, r.p99_us);
    row.verified = row.verified && r.verified != "FAILED";
  }
  double secs = std::chrono::duration<double>(last - first).count();
  row.aggregate = secs > 0 ? moved / secs : 0;
  row.min_peer = *std::min_element(rates.begin(), rates.end());
  for (double r : rates) row.mean_peer += r / static_cast<double>(rates.size());
  std::sort(p50s.begin(), p50s.end());
  row.p50_median = p50s[p50s.size() / 2];
  return row;
}

// The share of one core that `pid` uses over kIdleWindow (-1 when /proc
// does not tell): sampled while every connection is up and nothing moves.
constexpr std::chrono::seconds kIdleWindow{1};
double idle_cpu(pid_t pid) {
  auto before = threads_on_cpu_ns(pid);
  auto t0 = Clock::now();
  std::this_thread::sleep_for(kIdleWindow);
  auto after = threads_on_cpu_ns(pid);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!before.ok() || !after.ok() || *after < *before) return -1;
  return static_cast<double>(*after - *before) / 1e9 / secs;
}

// Round trips a probe times.
constexpr int kProbeRoundTrips = 1000;

// The probe's session: a pingpong of kProbeBytes, `iters` round trips.
RunConfig probe_config(const RunConfig& base, int group, int iters) {
  RunConfig p;
  p.op = "pingpong";
  p.sizes = {kProbeBytes};
  p.iters = iters;
  p.warmup = 20;
  p.inflight = 1;
  p.group = group;
  p.quiet = true;
  p.gpu = -1;
  p.peer_gpu = -1;
  p.budget = base.budget;
  return p;
}

// How much of [a0, a1] lies within [b0, b1], as a share of [a0, a1].
double overlap(Clock::time_point a0, Clock::time_point a1, Clock::time_point b0, Clock::time_point b1) {
  const auto lo = std::max(a0, b0), hi = std::min(a1, b1);
  const double whole = std::chrono::duration<double>(a1 - a0).count();
  return hi <= lo || whole <= 0 ? 0 : std::chrono::duration<double>(hi - lo).count() / whole;
}

json stats_json(const ProcessStats& s) {
  return json{{"threads", s.threads}, {"engine_threads", s.engine_threads}, {"fds", s.fds}, {"rss_bytes", s.rss_bytes}};
}

void print_stats(const char* phase, const ProcessStats& s) {
  std::printf("%-24s %8d %14d %8d %10.1f\n", phase, s.threads, s.engine_threads, s.fds,
              static_cast<double>(s.rss_bytes) / (1 << 20));
}

}  // namespace

std::vector<std::string> prepare_fleet_target(int peers, bool fan_out) {
  const Options defaults;
  const int sessions = fan_out ? peers : peers + kProbeSessions;
  raise_env("FERRY_MAX_CONNECTIONS", defaults.max_connections, sessions);
  raise_env("FERRY_MAX_CONNECTIONS_PER_PEER", defaults.max_connections_per_peer, sessions);
  if (fan_out) return {"--engines", std::to_string(peers)};
  return {"--max-sessions", std::to_string(sessions)};
}

int run_fleet(const FleetRun& run, const Options& o, const RunConfig& base) {
  const size_t n = static_cast<size_t>(run.peers);
  // --peers: the one target's numbers; --fan-out: this process's, the one initiator's.
  const pid_t pid = run.fan_out ? ::getpid() : run.target_pid;
  const char* role = run.fan_out ? "initiator" : "target";
  ProcessStats no_peer = sample_or_die(pid), one_peer, idle;
  double idle_cpu_share = -1;
  const int group = run.fan_out ? 1 : run.peers + kProbeSessions;
  // --peers: the probe's engine, its two sessions' results, and the first
  // size's timed phase they are set against.
  std::unique_ptr<Engine> probe_engine;
  if (!run.fan_out) probe_engine = must(Engine::create(o), "create the probe's engine");
  std::shared_ptr<Connection> probe_conn;
  std::vector<SizeResult> idle_probe, load_probe;
  std::thread load_probe_thread;
  Clock::time_point load_begin{}, load_end{};
  auto probe = [&](std::vector<SizeResult>& out) {
    auto c = connect_or_die(*probe_engine, run.targets[0]);
    out = run_initiator(*probe_engine, *c, probe_config(base, group, kProbeRoundTrips));
    c->close();
  };
  LoadSampler sampler(pid);
  // The barrier's completion runs on one thread while the others wait: the
  // even ones open a size's timed phase, the odd ones close it.
  int completions = 0;
  auto on_all_arrived = [&]() noexcept {
    if (completions % 2 == 0) {
      if (completions == 0) {
        // Every session set up and warmed, nothing moving: what the
        // connections hold, and the CPU they take while idle.
        idle = sample_or_die(pid);
        idle_cpu_share = idle_cpu(pid);
        if (probe_engine) {
          probe(idle_probe);
          load_probe_thread = platform::start_thread("bench-probe", [&] { probe(load_probe); });
        }
        load_begin = Clock::now();
      }
      sampler.begin();
    } else {
      sampler.end();
      if (completions == 1) load_end = Clock::now();
    }
    ++completions;
  };
  std::barrier sync(static_cast<std::ptrdiff_t>(n), on_all_arrived);
  RunConfig cfg = base;
  // The --once target ends after all of them; a --fan-out target's engines each after its own.
  cfg.group = group;
  cfg.quiet = true;  // one progress line per size per peer would bury the table
  cfg.sync = [&sync] { sync.arrive_and_wait(); };

  std::vector<std::unique_ptr<Engine>> engines(n);
  std::vector<std::shared_ptr<Connection>> conns(n);
  std::vector<std::vector<SizeResult>> results(n);
  std::vector<std::thread> sessions;
  double connect_s = 0, slowest_ms = 0;
  std::fprintf(stderr, "ferry bench: connecting %s to %zu target engine%s of process %d\n",
               run.fan_out ? "one initiator engine" : (std::to_string(n) + " initiator engines").c_str(),
               run.fan_out ? n : 1, run.fan_out && n > 1 ? "s" : "", static_cast<int>(run.target_pid));
  for (size_t i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    if (!run.fan_out || i == 0) engines[i] = must(Engine::create(o), "create engine " + std::to_string(i));
    Engine& engine = *engines[run.fan_out ? 0 : i];
    conns[i] = connect_or_die(engine, run.targets[run.fan_out ? i : 0]);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    connect_s += secs;
    slowest_ms = std::max(slowest_ms, secs * 1e3);
    if (i == 0) one_peer = sample_or_die(pid);
    // At once: the target gives a connection 5 s to send its configuration.
    sessions.push_back(platform::start_thread("bench-peer-" + std::to_string(i),
                                              [&, i] { results[i] = run_initiator(engine, *conns[i], cfg); }));
  }
  std::string transport(conns[0]->transport_name());
  std::fprintf(stderr, "ferry bench: %zu connections up in %.3f s over the %s transport; %s, %d in flight\n", n,
               connect_s, transport.c_str(), cfg.op.c_str(), cfg.inflight);
  for (auto& t : sessions) t.join();
  if (load_probe_thread.joinable()) load_probe_thread.join();
  for (auto& c : conns) c->close();
  int samples = 0;
  ProcessStats load = sampler.peak_seen(samples);

  std::vector<FleetRow> rows;
  for (size_t s = 0; s < cfg.sizes.size(); ++s) rows.push_back(summarize(cfg, results, s));
  bool bad = std::any_of(rows.begin(), rows.end(), [](const FleetRow& r) { return !r.verified; });

  if (run.json_out != "-") {
    if (run.fan_out) {
      std::printf("# %s over the %s transport: 1 initiator engine (this process) -> %zu target engines, %d in flight\n",
                  cfg.op.c_str(), transport.c_str(), n, cfg.inflight);
    } else {
      std::printf(
          "# %s over the %s transport: %zu initiator engines (this process) -> 1 target process, %d in flight\n",
          cfg.op.c_str(), transport.c_str(), n, cfg.inflight);
    }
    std::printf("%-10s %10s %14s %15s %8s %14s %11s %11s%s\n", "size", "aggr_GB/s", "min_peer_GB/s", "mean_peer_GB/s",
                "slowest", "p50_us_median", "p50_us_max", "p99_us_max", cfg.verify ? "   verify" : "");
    for (const FleetRow& r : rows) {
      std::printf("%-10s %10.3f %14.3f %15.3f %8.2f %14.1f %11.1f %11.1f%s%s\n", format_bytes(r.bytes).c_str(),
                  r.aggregate / 1e9, r.min_peer / 1e9, r.mean_peer / 1e9,
                  r.mean_peer > 0 ? r.min_peer / r.mean_peer : 0, r.p50_median, r.p50_max, r.p99_max,
                  cfg.verify ? "   " : "", cfg.verify ? (r.verified ? "ok" : "FAILED") : "");
    }
    std::printf("(slowest: the slowest peer's GB/s over the mean peer's; p50/p99 are each peer's own, over its ops)\n");
    std::printf(
        "connection setup: %zu connections in %.3f s (one after another, engine creation included; slowest %.1f ms)\n",
        n, connect_s, slowest_ms);
    if (!idle_probe.empty() && !load_probe.empty()) {
      const SizeResult &a = idle_probe.front(), &b = load_probe.front();
      std::printf("%s round trip: idle p50 %.1f p99 %.1f us; during the %s phase p50 %.1f p99 %.1f us "
                  "(p99 %.2f x idle; the phase covered %.0f %% of it)\n",
                  format_bytes(kProbeBytes).c_str(), a.p50_us, a.p99_us, format_bytes(cfg.sizes.front()).c_str(),
                  b.p50_us, b.p99_us, a.p99_us > 0 ? b.p99_us / a.p99_us : 0.0,
                  100 * overlap(b.start, b.end, load_begin, load_end));
    }
    if (idle_cpu_share >= 0) {
      std::printf("%s CPU with %zu connections idle: %.2f %% of a core (over %lld s)\n", role, n,
                  idle_cpu_share * 100, static_cast<long long>(kIdleWindow.count()));
    }
    std::printf("%-24s %8s %14s %8s %10s\n", (std::string(role) + " (pid " + std::to_string(pid) + ")").c_str(),
                "threads", "ferry_threads", "fds", "RSS_MiB");
    print_stats("no connection", no_peer);
    print_stats("1 connection", one_peer);
    print_stats((std::to_string(n) + " connections idle").c_str(), idle);
    print_stats((std::to_string(n) + " connections loaded").c_str(), load);
  }
  if (!run.json_out.empty()) {
    json results_json = json::array();
    for (size_t s = 0; s < rows.size(); ++s) {
      const FleetRow& r = rows[s];
      json peers = json::array();
      for (size_t i = 0; i < n; ++i) {
        const SizeResult& p = results[i][s];
        json row{{"peer", i}, {"bytes_per_s", p.bytes_per_s}, {"lat_us", {{"p50", p.p50_us}, {"p99", p.p99_us}}}};
        if (!p.verified.empty()) row["verified"] = p.verified == "ok";
        peers.push_back(row);
      }
      json j{{"op", cfg.op},
             {"bytes", r.bytes},
             {"iters", cfg.iters},
             {"bytes_per_s", r.aggregate},
             {"min_peer_bytes_per_s", r.min_peer},
             {"mean_peer_bytes_per_s", r.mean_peer},
             {"slowest_share", r.mean_peer > 0 ? r.min_peer / r.mean_peer : 0.0},
             {"lat_us", {{"p50_median", r.p50_median}, {"p50_max", r.p50_max}, {"p99_max", r.p99_max}}},
             {"peers", peers}};
      if (cfg.verify) j["verified"] = r.verified;
      results_json.push_back(j);
    }
    const Options& eo = engines[0]->options();
    json config{{"op", cfg.op},
                {"sizes", cfg.sizes},
                {"iters", cfg.iters},
                {"warmup", cfg.warmup},
                {"inflight", cfg.inflight},
                {"bidir", cfg.bidir},
                {"verify", cfg.verify},
                {"footprint", cfg.footprint},
                {"peers", n},
                {"fan_out", run.fan_out},
                {"transport", transport},
                {"streams", eo.streams},
                {"chunk_bytes", eo.chunk_bytes},
                {"window", eo.window},
                {"peer", "local"}};
    json target{{"pid", pid},
                {"no_peer", stats_json(no_peer)},
                {"one_peer", stats_json(one_peer)},
                {"idle", stats_json(idle)},
                {"load", stats_json(load)}};
    target["load"]["samples"] = samples;
    if (idle_cpu_share >= 0) target["idle"]["cpu_share"] = idle_cpu_share;
    if (!idle_probe.empty() && !load_probe.empty()) {
      const SizeResult &a = idle_probe.front(), &b = load_probe.front();
      config["probe_bytes"] = kProbeBytes;
      results_json.front()["probe"] = {
          {"idle_lat_us", {{"p50", a.p50_us}, {"p99", a.p99_us}}},
          {"load_lat_us", {{"p50", b.p50_us}, {"p99", b.p99_us}}},
          {"load_covered", overlap(b.start, b.end, load_begin, load_end)}};
    }
    json doc{{"config", config},
             {"setup", {{"connect_s", connect_s}, {"slowest_connect_ms", slowest_ms}}},
             {role, target},
             {"results", results_json}};
    std::string text = doc.dump(2) + "\n";
    if (run.json_out == "-") {
      std::fputs(text.c_str(), stdout);
    } else {
      std::ofstream out(run.json_out);
      out << text;
      if (!out) die("write " + run.json_out, Status(Code::kUnavailable, "cannot write"));
    }
  }
  return bad ? 3 : 0;
}

}  // namespace ferry::cli
