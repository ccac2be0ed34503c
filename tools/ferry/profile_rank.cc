// The timing loop of one rank of `ferry profile`, and the files it writes.
#include "ferry/profile_rank.h"

#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

#include "ferry/profile_gpu.h"
#include "profile/drift.h"
#include "profile/run_files.h"
#include "profile/trace.h"
#include "profile/yaml.h"

#ifndef FERRY_VERSION
#define FERRY_VERSION "unknown"
#endif

namespace ferry::cli::profile {
namespace {

using ferry::profile::ClockFit;
using ferry::profile::ClockMap;
using ferry::profile::Config;
using ferry::profile::DriftRow;
using ferry::profile::ExecutionRow;
using ferry::profile::TraceArg;
using ferry::profile::TraceEvent;
using ferry::profile::YamlNode;

YamlNode s(const std::string& v) { return YamlNode::scalar(v); }
YamlNode s(const char* v) { return YamlNode::scalar(v); }
YamlNode n(int64_t v) { return YamlNode::scalar(std::to_string(v)); }
YamlNode f(double v, const char* fmt = "%.3f") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return YamlNode::scalar(buf);
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string clock_time(double seconds) {
  if (seconds < 0) seconds = 0;
  int64_t t = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%" PRId64 ":%02d", t / 60, static_cast<int>(t % 60));
  return buf;
}

// Progress with an ETA on stderr, at most once a second. Work is counted in
// units of one operation plus one unit per MiB moved, which tracks time on
// both latency-bound and bandwidth-bound sizes.
class Progress {
 public:
  Progress(bool on, const char* phase, double total_units) : on_(on), phase_(phase), total_(total_units) {
    start_ = monotonic_ns();
  }
  static double units(uint64_t size) { return 1.0 + static_cast<double>(size) / (1 << 20); }
  void advance(double units, int done_ops, int total_ops) {
    done_ += units;
    if (!on_) return;
    int64_t now = monotonic_ns();
    if (now - last_ < 1000000000 && done_ops != total_ops) return;
    last_ = now;
    double elapsed = (now - start_) * 1e-9;
    double eta = done_ > 0 ? elapsed * (total_ - done_) / done_ : 0;
    std::fprintf(stderr, "profile: %s %d/%d ops (%.0f%%), %s elapsed, ETA %s\n", phase_, done_ops, total_ops,
                 100.0 * done_ / total_, clock_time(elapsed).c_str(), clock_time(eta).c_str());
  }

 private:
  bool on_;
  const char* phase_;
  double total_;
  double done_ = 0;
  int64_t start_ = 0;
  int64_t last_ = 0;
};

YamlNode fit_yaml(int gpu, const char* phase, const ClockFit& fit) {
  YamlNode m = YamlNode::map();
  m.set("gpu", n(gpu));
  m.set("phase", s(phase));
  m.set("ppm", f(fit.ppm, "%.4f"));
  m.set("residual_ns", f(fit.residual_ns, "%.1f"));
  m.set("samples", n(fit.samples));
  m.set("span_s", f(fit.span_s, "%.2f"));
  m.set("host_ref_ns", n(fit.host_ref_ns));
  m.set("gpu_ref_ns", n(fit.gpu_ref_ns));
  return m;
}

YamlNode gpu_yaml(int gpu, const ferry::profile::Nvml* nvml) {
  YamlNode m = YamlNode::map();
  m.set("index", n(gpu));
  auto info = profile_gpu::device_info(gpu);
  if (info.ok()) {
    m.set("name", s(info->name));
    m.set("pci_bus_id", s(info->pci_bus_id));
    m.set("compute_capability", s(std::to_string(info->cc_major) + "." + std::to_string(info->cc_minor)));
    m.set("memory_bytes", n(static_cast<int64_t>(info->memory_bytes)));
    m.set("multiprocessors", n(info->multiprocessors));
  }
  if (nvml != nullptr && info.ok()) {
    auto facts = nvml->facts(info->pci_bus_id);
    auto sample = nvml->sample(info->pci_bus_id);
    if (facts.ok()) {
      m.set("uuid", s(facts->uuid));
      YamlNode clocks = YamlNode::map();
      if (sample.ok()) {
        clocks.set("sm_mhz", n(sample->sm_clock_mhz));
        clocks.set("mem_mhz", n(sample->mem_clock_mhz));
      }
      clocks.set("sm_max_mhz", n(facts->sm_clock_max_mhz));
      clocks.set("mem_max_mhz", n(facts->mem_clock_max_mhz));
      clocks.set("sm_application_mhz", n(facts->sm_app_clock_mhz));
      clocks.set("mem_application_mhz", n(facts->mem_app_clock_mhz));
      char reasons[32];
      std::snprintf(reasons, sizeof(reasons), "0x%llx", facts->clock_event_reasons);
      clocks.set("clock_event_reasons", s(reasons));
      m.set("clocks", std::move(clocks));
      m.set("power_limit_w", f(facts->power_limit_w, "%.1f"));
    }
    if (sample.ok()) {
      m.set("temperature_c", n(sample->temperature_c));
      m.set("power_w", f(sample->power_w, "%.1f"));
    }
  }
  return m;
}

}  // namespace

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

Result<RankResult> run_rank(Backend& backend, const RankOptions& o, const ferry::profile::Nvml* nvml) {
  const std::vector<int>& local = backend.local_gpus();
  const bool talk = o.progress && o.rank == 0;
  const std::string started_at = utc_now();
  const int64_t run_start = monotonic_ns();

  double warmed_s = 0;
  if (o.warm_to_c > 0) {
    if (nvml == nullptr) return Status(Code::kUnavailable, "thermal warm-up needs NVML to read temperatures");
    std::map<int, std::string> pci;
    for (int g : local) {
      FERRY_ASSIGN_OR_RETURN(auto info, profile_gpu::device_info(g));
      pci[g] = info.pci_bus_id;
    }
    if (talk) std::fprintf(stderr, "profile: warming GPUs to %d C (at most %.0f s)\n", o.warm_to_c, o.warm_limit_s);
    FERRY_ASSIGN_OR_RETURN(warmed_s, profile_gpu::thermal_warmup(local, o.warm_to_c, o.warm_limit_s, [&](int g) {
                             auto smp = nvml->sample(pci[g]);
                             return smp.ok() ? smp->temperature_c : -1;
                           }));
  }

  if (talk) std::fprintf(stderr, "profile: allocating and filling buffers for %zu sizes\n", o.sizes.size());
  FERRY_RETURN_IF_ERROR(backend.prepare(o.sizes));

  if (talk) std::fprintf(stderr, "profile: measuring clock drift (%.0f s)\n", o.drift_seconds);
  FERRY_ASSIGN_OR_RETURN(std::vector<ClockFit> drift_start, profile_gpu::measure_clocks(local, o.drift_seconds));
  FERRY_RETURN_IF_ERROR(backend.barrier());

  // Warm-up: each configuration, o.warmup times, in plan order; nothing recorded.
  double total_units = 0;
  for (const Config& c : o.plan) total_units += Progress::units(c.size);
  {
    Progress p(talk, "warm-up", total_units * o.warmup);
    int done = 0, total = static_cast<int>(o.plan.size()) * o.warmup;
    for (const Config& c : o.plan) {
      for (int w = 0; w < o.warmup; ++w) {
        FERRY_RETURN_IF_ERROR(backend.barrier());
        FERRY_ASSIGN_OR_RETURN(OpTiming t, backend.run_once(c, "warmup_" + ferry::profile::event_name(c, w)));
        (void)t;
        p.advance(Progress::units(c.size), ++done, total);
      }
    }
  }

  // Timed: repetition by repetition, every configuration in plan order.
  std::vector<ExecutionRow> rows;
  {
    Progress p(talk, "timed", total_units * o.repetitions);
    int done = 0, total = static_cast<int>(o.plan.size()) * o.repetitions;
    for (int r = 0; r < o.repetitions; ++r) {
      for (const Config& c : o.plan) {
        FERRY_RETURN_IF_ERROR(backend.barrier());
        const std::string name = ferry::profile::event_name(c, r);
        FERRY_ASSIGN_OR_RETURN(OpTiming t, backend.run_once(c, name));
        p.advance(Progress::units(c.size), ++done, total);
        if (!t.took_part) continue;
        rows.push_back(ExecutionRow{c.id, c.src, c.dst, c.size, r, t.host_start_ns, t.host_end_ns,
                                    t.host_end_ns - t.host_start_ns, t.device_ns, o.rank, t.role, t.gpu,
                                    t.gpu_start_ns});
      }
    }
  }
  FERRY_RETURN_IF_ERROR(backend.barrier());

  if (talk) std::fprintf(stderr, "profile: measuring clock drift again (%.0f s)\n", o.drift_seconds);
  FERRY_ASSIGN_OR_RETURN(std::vector<ClockFit> drift_end, profile_gpu::measure_clocks(local, o.drift_seconds));

  if (talk) std::fprintf(stderr, "profile: verifying received data\n");
  FERRY_ASSIGN_OR_RETURN(uint64_t bad, backend.verify());

  // Files: drift part, execution part, trace, metadata.
  std::string drift_csv = ferry::profile::drift_header();
  std::map<int, ClockMap> maps;
  for (size_t i = 0; i < local.size(); ++i) {
    drift_csv += ferry::profile::drift_row_line(DriftRow{o.rank, local[i], "start", drift_start[i]});
    drift_csv += ferry::profile::drift_row_line(DriftRow{o.rank, local[i], "end", drift_end[i]});
    maps.emplace(local[i], ClockMap(drift_start[i], drift_end[i]));
  }
  const std::string dir = o.run_dir + "/";
  FERRY_RETURN_IF_ERROR(ferry::profile::write_file(dir + ferry::profile::clock_drift_part(o.rank), drift_csv));

  std::string log = ferry::profile::execution_log_header();
  for (const ExecutionRow& row : rows) log += ferry::profile::execution_row_line(row);
  FERRY_RETURN_IF_ERROR(ferry::profile::write_file(dir + ferry::profile::execution_log_part(o.rank), log));

  ferry::profile::Trace trace;
  trace.pid = o.rank;
  trace.process_name = "rank " + std::to_string(o.rank) + " (" + o.backend + ")";
  trace.thread_names.emplace_back(0, "host (CLOCK_MONOTONIC)");
  for (int g : local) trace.thread_names.emplace_back(1 + g, "gpu " + std::to_string(g) + " (timer mapped to host)");
  trace.other_data = {{"backend", o.backend},       {"rank", int64_t{o.rank}},
                      {"world", int64_t{o.world}},  {"host_clock", std::string("CLOCK_MONOTONIC")},
                      {"seed", static_cast<int64_t>(o.seed)}, {"ferry_version", std::string(FERRY_VERSION)}};
  for (const ExecutionRow& row : rows) {
    const std::string name =
        ferry::profile::event_name(Config{row.config_id, row.src, row.dst, row.size}, row.repetition);
    std::vector<TraceArg> args = {{"config_id", int64_t{row.config_id}}, {"src", int64_t{row.src}},
                                  {"dst", int64_t{row.dst}},             {"size", static_cast<int64_t>(row.size)},
                                  {"repetition", int64_t{row.repetition}}, {"role", row.role},
                                  {"device_ns", row.device_ns}};
    trace.events.push_back(TraceEvent{name, "host", row.start_ns, row.duration_ns, o.rank, 0, args});
    if (row.gpu_start_ns != 0 && maps.count(row.gpu)) {
      args.push_back({"gpu", int64_t{row.gpu}});
      args.push_back({"gpu_start_ns", row.gpu_start_ns});
      trace.events.push_back(TraceEvent{name, "device", maps.at(row.gpu).to_host(row.gpu_start_ns), row.device_ns,
                                        o.rank, 1 + row.gpu, args});
    }
  }
  FERRY_RETURN_IF_ERROR(
      ferry::profile::write_file(dir + ferry::profile::trace_file(o.rank), ferry::profile::trace_to_json(trace)));

  YamlNode meta = YamlNode::map();
  meta.set("ferry_version", s(FERRY_VERSION));
  meta.set("command_line", s(o.command_line));
  meta.set("backend", s(o.backend));
  meta.set("rank", n(o.rank));
  meta.set("world", n(o.world));
  meta.set("host", s(hostname()));
  meta.set("started_at", s(started_at));
  meta.set("finished_at", s(utc_now()));
  meta.set("wall_s", f((monotonic_ns() - run_start) * 1e-9, "%.1f"));
  YamlNode plan = YamlNode::map();
  plan.set("seed", n(static_cast<int64_t>(o.seed)));
  YamlNode gl = YamlNode::list();
  for (int g : o.gpus) gl.push(n(g));
  plan.set("gpus", std::move(gl));
  plan.set("sizes", n(static_cast<int64_t>(o.sizes.size())));
  plan.set("configurations", n(static_cast<int64_t>(o.plan.size())));
  plan.set("warmup", n(o.warmup));
  plan.set("repetitions", n(o.repetitions));
  plan.set("drift_seconds", f(o.drift_seconds, "%.1f"));
  plan.set("thermal_warmup_c", n(o.warm_to_c));
  plan.set("thermal_warmup_s", f(warmed_s, "%.1f"));
  meta.set("plan", std::move(plan));
  meta.set("device_timing", s(backend.device_timing()));

  YamlNode software = YamlNode::map();
  if (!local.empty()) {
    if (auto info = profile_gpu::device_info(local[0]); info.ok()) {
      software.set("cuda_runtime", n(info->runtime_version));
      software.set("cuda_driver", n(info->driver_version));
    }
  }
  software.set("nvidia_driver", s(nvml ? nvml->driver_version() : std::string("unknown (no NVML)")));
  for (const auto& [k, v] : backend.versions()) software.set(k, s(v));
  meta.set("software", std::move(software));

  YamlNode gpus = YamlNode::list();
  for (int g : local) gpus.push(gpu_yaml(g, nvml));
  meta.set("gpus", std::move(gpus));

  // Topology among all GPUs of the plan, as nvidia-smi topo -m words.
  YamlNode topo = YamlNode::map();
  std::map<int, std::string> pci;
  for (int g : o.gpus) {
    if (auto info = profile_gpu::device_info(g); info.ok()) pci[g] = info->pci_bus_id;
  }
  for (int a : o.gpus) {
    YamlNode row = YamlNode::map();
    for (int b : o.gpus) {
      std::string word = "?";
      if (a == b) {
        word = "X";
      } else if (nvml != nullptr && pci.count(a) && pci.count(b)) {
        word = nvml->link(pci[a], pci[b]);
      }
      if (a != b) {
        auto peer = profile_gpu::can_access_peer(a, b);
        if (peer.ok()) word += *peer ? " (peer access)" : " (no peer access)";
      }
      row.set("gpu" + std::to_string(b), s(word));
    }
    topo.set("gpu" + std::to_string(a), std::move(row));
  }
  meta.set("topology", std::move(topo));

  YamlNode drift = YamlNode::list();
  for (size_t i = 0; i < local.size(); ++i) {
    drift.push(fit_yaml(local[i], "start", drift_start[i]));
    drift.push(fit_yaml(local[i], "end", drift_end[i]));
  }
  meta.set("clock_drift", std::move(drift));

  YamlNode verification = YamlNode::map();
  verification.set("bad_bytes", n(static_cast<int64_t>(bad)));
  verification.set("result", s(bad == 0 ? "ok" : "FAILED"));
  meta.set("verification", std::move(verification));
  YamlNode warnings = YamlNode::list();
  for (const std::string& w : o.warnings) warnings.push(s(w));
  meta.set("warnings", std::move(warnings));

  FERRY_RETURN_IF_ERROR(ferry::profile::write_file(
      dir + ferry::profile::metadata_file(o.rank),
      ferry::profile::to_yaml(meta, "ferry profile: what rank " + std::to_string(o.rank) + " ran on")));

  for (size_t i = 0; i < local.size(); ++i) {
    double change = drift_end[i].ppm - drift_start[i].ppm;
    if (talk || o.world > 1) {
      std::fprintf(stderr, "profile: rank %d gpu %d clock drift %.2f ppm at start, %.2f ppm at end (change %.2f)%s\n",
                   o.rank, local[i], drift_start[i].ppm, drift_end[i].ppm, change,
                   std::abs(change) > 1.0 ? " -- drift changed by more than 1 ppm" : "");
    }
  }
  return RankResult{bad, static_cast<int>(rows.size())};
}

}  // namespace ferry::cli::profile
