// `ferry profile`: GPU-to-GPU bandwidth and latency for every directed pair of
// the chosen GPUs and every size, in a seeded shuffled order, with warm-up,
// repetitions, clock-drift windows, NVML sampling and per-rank traces and
// metadata written to a run directory that `python3 -m ferry.analysis RUN_DIR`
// turns into plots and a summary.
//
// One-process backends (ce) run here. Process-per-GPU backends (nccl, ferry)
// run in children: this process re-executes itself once per GPU with hidden
// --worker-* flags, hands each what the ranks need to find each other (nccl:
// the NCCL unique id; ferry: an empty rendezvous directory), waits, and
// merges the children's part files.
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "ferry/bench_sizes.h"
#include "ferry/commands.h"
#include "ferry/profile_backend.h"
#include "ferry/profile_gpu.h"
#include "ferry/profile_rank.h"
#include "profile/nccl_library.h"
#include "profile/nvml.h"
#include "profile/plan.h"
#include "profile/run_files.h"
#include "profile/sampler.h"
#include "profile/stats.h"

extern char** environ;

namespace ferry::cli {
namespace {

namespace fs = std::filesystem;
using ferry::profile::Config;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitBusy = 3;

struct ProfileFlags {
  std::string backend = "ce";
  std::string gpus;  // empty: all
  std::string sizes = "1:1G:x2";
  uint64_t seed = 42;
  int warmup = 5;
  int reps = 10;
  std::string out;
  double drift_seconds = 30;
  double sample_interval = 1.0;
  bool allow_busy = false;
  int warm_to = 0;
  double warm_limit = 60;
  std::string reference_min = "256M";
  bool no_reference = false;
  int reference_copies = 16;
  int reference_samples = 10;
  bool dry_run = false;
  double timeout = 3600;
  // Hidden: set by the parent for each child of a process-per-GPU run.
  int worker_rank = -1;
  int worker_world = 0;
  std::string worker_id;          // nccl: the unique id, in hex
  std::string worker_rendezvous;  // ferry: the rendezvous directory
};

// What the children of a process-per-GPU run need to find each other.
struct Handoff {
  std::string nccl_id_hex;     // nccl
  std::string rendezvous_dir;  // ferry
  // nccl: ncclGetUniqueId left a bootstrap thread running inside the library,
  // so it must stay loaded until the children are done.
  std::unique_ptr<ferry::profile::NcclLibrary> nccl;
};

[[noreturn]] void die(int code, const std::string& message) {
  std::fprintf(stderr, "ferry profile: %s\n", message.c_str());
  std::exit(code);
}

// The command line of process `pid` ("self" for this one), spaces between words.
std::string command_line(const std::string& pid = "self") {
  std::ifstream in("/proc/" + pid + "/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  for (char c : all) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ferry") : p.string();
}

std::string default_run_dir(const std::string& backend) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return "profile-" + backend + "-" + buf;
}

// Why there is nothing to profile, for a host where CUDA finds no GPU: what
// is missing (`why`, from device_count) and what a profile needs. A host
// matter, not the command line's: exit 1.
[[noreturn]] void die_without_gpus(const Status& why) {
  die(kExitFailed, "no GPU to profile: " + why.message() +
                       ". ferry profile times copies between the GPUs of this host: it needs two or more NVIDIA GPUs "
                       "and their driver (nvidia-smi lists them). --dry-run --gpus 0,1 prints the plan without them.");
}

// The plan from the flags; GPUs default to every GPU CUDA sees.
std::vector<int> plan_gpus(const ProfileFlags& f) {
  if (!f.gpus.empty()) {
    auto g = ferry::profile::parse_gpu_list(f.gpus);
    if (!g.ok()) die(kExitUsage, g.status().message());
    return g.value();
  }
  auto n = profile_gpu::device_count();
  if (!n.ok()) die_without_gpus(n.status());
  std::vector<int> all;
  for (int i = 0; i < n.value(); ++i) all.push_back(i);
  return all;
}

// What a run of `plan` should take, for --dry-run. Fitted to full runs on
// H200 hosts (2 GPUs: 63.0 s, docs/benchmarks/2026-11-22.md; 4 GPUs: 74.6 s,
// docs/benchmarks/2026-11-26.md): the two clock-drift windows, about 1 s to
// start, 2.3 ms per transfer (events, synchronisation, checks) and the bytes
// at NVLink speed.
constexpr double kStartSeconds = 1.0;
constexpr double kSecondsPerTransfer = 0.0023;
constexpr double kAssumedBytesPerSecond = 300e9;

std::string run_time_estimate(const std::vector<Config>& plan, const ProfileFlags& f) {
  double transfers = 0, bytes = 0;
  for (const Config& c : plan) {
    transfers += f.warmup + f.reps;
    bytes += static_cast<double>(c.size) * (f.warmup + f.reps);
  }
  double drift = 2 * f.drift_seconds;
  double seconds = kStartSeconds + drift + transfers * kSecondsPerTransfer + bytes / kAssumedBytesPerSecond;
  char line[400];
  std::snprintf(line, sizeof(line),
                "# estimated run time: about %.0f s (%.0f s of clock-drift windows, %.0f transfers, %.1f GB moved at an "
                "assumed %.0f GB/s; a PCIe host moves the bytes about ten times slower)%s\n",
                seconds, drift, transfers, bytes / 1e9, kAssumedBytesPerSecond / 1e9,
                f.warm_to > 0 ? (", plus up to " + std::to_string(static_cast<int>(f.warm_limit)) +
                                 " s warming the GPUs")
                                    .c_str()
                              : "");
  return line;
}

void print_plan(const std::vector<Config>& plan, const ProfileFlags& f) {
  std::printf("# ferry profile plan: backend %s, seed %" PRIu64 ", %zu configurations, warm-up %d, repetitions %d\n",
              f.backend.c_str(), f.seed, plan.size(), f.warmup, f.reps);
  std::printf("%s", run_time_estimate(plan, f).c_str());
  std::printf("%-6s %-9s %-4s %-4s %-11s %s\n", "order", "config_id", "src", "dst", "size", "first event");
  for (size_t i = 0; i < plan.size(); ++i) {
    const Config& c = plan[i];
    std::printf("%-6zu %-9d %-4d %-4d %-11" PRIu64 " %s\n", i, c.id, c.src, c.dst, c.size,
                ferry::profile::event_name(c, 0).c_str());
  }
}

// Pre-flight: busy GPUs are refused unless allowed; unlocked clocks are
// recorded and warned about, never changed.
std::vector<std::string> preflight(const std::vector<int>& gpus, const ferry::profile::Nvml* nvml, bool allow_busy) {
  std::vector<std::string> warnings;
  if (nvml == nullptr) {
    warnings.push_back("NVML not available: no busy check, clocks or temperatures recorded");
    return warnings;
  }
  std::string busy;
  for (int g : gpus) {
    auto info = profile_gpu::device_info(g);
    if (!info.ok()) die(kExitFailed, "GPU " + std::to_string(g) + ": " + info.status().message());
    auto facts = nvml->facts(info->pci_bus_id);
    if (!facts.ok()) {
      warnings.push_back("GPU " + std::to_string(g) + ": NVML: " + facts.status().message());
      continue;
    }
    int others = 0;
    for (unsigned pid : facts->process_ids) {
      if (static_cast<pid_t>(pid) != getpid()) ++others;
    }
    if (others > 0 || facts->utilization_pct > 5) {
      busy += " GPU " + std::to_string(g) + " (" + std::to_string(others) + " compute processes, " +
              std::to_string(facts->utilization_pct) + "% busy)";
    }
    auto smp = nvml->sample(info->pci_bus_id);
    if (smp.ok() && facts->sm_clock_max_mhz > 0 && smp->sm_clock_mhz < facts->sm_clock_max_mhz) {
      warnings.push_back("GPU " + std::to_string(g) + ": clocks are not locked (SM " +
                         std::to_string(smp->sm_clock_mhz) + " MHz now, max " +
                         std::to_string(facts->sm_clock_max_mhz) +
                         " MHz); ferry records clocks and never sets them, so results follow the GPU's boost");
    }
  }
  if (!busy.empty()) {
    if (!allow_busy) die(kExitBusy, "busy:" + busy + "; pass --allow-busy to profile anyway");
    warnings.push_back("profiled busy GPUs (--allow-busy):" + busy);
  }
  return warnings;
}

// NVLink multicast stays off in everything this run starts, and CUDA loads
// modules eagerly.
void set_run_environment() {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  // Held timing (profile_cuda.cuh) queues work behind a flag that the host
  // raises only after posting; a kernel loaded lazily on first launch (CUDA's
  // default) would wait for that held stream while being posted: a deadlock.
  // Modules load when the context is made instead, unless the user chose.
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

std::vector<std::string> child_args(const ProfileFlags& f, const std::string& run_dir, const std::vector<int>& gpus,
                                    int rank, int world, const Handoff& handoff) {
  std::string gl;
  for (int g : gpus) gl += (gl.empty() ? "" : ",") + std::to_string(g);
  char drift[32], interval[32], timeout[32];
  std::snprintf(drift, sizeof(drift), "%g", f.drift_seconds);
  std::snprintf(interval, sizeof(interval), "%g", f.warm_limit);
  std::snprintf(timeout, sizeof(timeout), "%g", f.timeout);
  std::vector<std::string> args = {self_exe(),        "profile",
                                   "--backend",       f.backend,
                                   "--gpus",          gl,
                                   "--sizes",         f.sizes,
                                   "--seed",          std::to_string(f.seed),
                                   "--warmup",        std::to_string(f.warmup),
                                   "--reps",          std::to_string(f.reps),
                                   "--drift-seconds", drift,
                                   "--warm-to",       std::to_string(f.warm_to),
                                   "--warm-limit",    interval,
                                   "--timeout",       timeout,
                                   "--out",           run_dir,
                                   "--worker-rank",   std::to_string(rank),
                                   "--worker-world",  std::to_string(world)};
  if (!handoff.nccl_id_hex.empty()) args.insert(args.end(), {"--worker-id", handoff.nccl_id_hex});
  if (!handoff.rendezvous_dir.empty()) args.insert(args.end(), {"--worker-rendezvous", handoff.rendezvous_dir});
  return args;
}

// nccl: a fresh unique id from NCCL. ferry: an empty directory in the run
// directory, so that no rank finds a file left by an earlier, failed run.
Handoff make_handoff(const std::string& backend, const std::string& run_dir, size_t world) {
  Handoff h;
  if (backend == "nccl") {
    auto nccl = ferry::profile::NcclLibrary::load();
    if (!nccl.ok()) die(kExitFailed, nccl.status().message());
    ferry::profile::NcclUniqueId id{};
    if (int r = nccl.value()->get_unique_id(&id); r != 0)
      die(kExitFailed, "ncclGetUniqueId: " + nccl.value()->error(r));
    h.nccl_id_hex = ferry::profile::to_hex(id);
    std::fprintf(stderr, "profile: NCCL %s from %s; starting %zu processes\n", nccl.value()->version().c_str(),
                 nccl.value()->path().c_str(), world);
    h.nccl = std::move(nccl).value();
  } else if (backend == "ferry") {
    h.rendezvous_dir = run_dir + "/rendezvous";
    std::error_code ec;
    fs::remove_all(h.rendezvous_dir, ec);
    if (!ec) fs::create_directories(h.rendezvous_dir, ec);
    if (ec) die(kExitFailed, "cannot create the rendezvous directory " + h.rendezvous_dir + ": " + ec.message());
    std::fprintf(stderr, "profile: starting %zu processes; they meet in %s\n", world, h.rendezvous_dir.c_str());
  } else {
    die(kExitFailed,
        "backend " + backend + " runs one process per GPU but ferry profile does not know how to start it");
  }
  return h;
}

// Starts one child per GPU, waits for all; a failing child ends the others.
int run_children(const ProfileFlags& f, const std::string& run_dir, const std::vector<int>& gpus) {
  const Handoff handoff = make_handoff(f.backend, run_dir, gpus.size());
  const int world = static_cast<int>(gpus.size());
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = child_args(f, run_dir, gpus, r, world, handoff);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (int e = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ); e != 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      die(kExitFailed, "cannot start rank " + std::to_string(r) + ": " + std::strerror(e));
    }
    pids.push_back(pid);
  }
  const int64_t deadline = profile::monotonic_ns() + static_cast<int64_t>(f.timeout * 1e9);
  int failed = 0;
  size_t running = pids.size();
  std::vector<bool> done(pids.size(), false);
  while (running > 0) {
    bool reaped = false;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      pid_t r = waitpid(pids[i], &status, WNOHANG);
      if (r != pids[i]) continue;
      done[i] = true;
      --running;
      reaped = true;
      bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok) {
        std::fprintf(stderr, "profile: rank %zu %s %d\n", i, WIFEXITED(status) ? "exited with" : "killed by signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        failed = failed ? failed : (WIFEXITED(status) ? WEXITSTATUS(status) : kExitFailed);
        // The others would wait for it (forever inside NCCL): end them.
        for (size_t j = 0; j < pids.size(); ++j) {
          if (!done[j]) kill(pids[j], SIGTERM);
        }
      }
    }
    if (running > 0 && profile::monotonic_ns() > deadline) {
      std::fprintf(stderr, "profile: ranks still running after --timeout %.0f s; ending them\n", f.timeout);
      for (size_t j = 0; j < pids.size(); ++j) {
        if (!done[j]) kill(pids[j], SIGKILL);
      }
      failed = kExitFailed;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!handoff.rendezvous_dir.empty()) {
    std::error_code ec;
    fs::remove_all(handoff.rendezvous_dir, ec);
  }
  return failed;
}

// Joins the ranks' part files into execution_log.csv and clock_drift.csv.
Result<std::vector<ferry::profile::ExecutionRow>> merge_parts(const std::string& run_dir, int world) {
  std::vector<std::vector<ferry::profile::ExecutionRow>> parts;
  std::string drift = ferry::profile::drift_header();
  for (int r = 0; r < world; ++r) {
    const std::string log_part = run_dir + "/" + ferry::profile::execution_log_part(r);
    const std::string drift_part = run_dir + "/" + ferry::profile::clock_drift_part(r);
    FERRY_ASSIGN_OR_RETURN(std::string log_text, ferry::profile::read_file(log_part));
    FERRY_ASSIGN_OR_RETURN(auto rows, ferry::profile::parse_execution_log(log_text));
    parts.push_back(std::move(rows));
    FERRY_ASSIGN_OR_RETURN(std::string drift_text, ferry::profile::read_file(drift_part));
    FERRY_ASSIGN_OR_RETURN(auto drows, ferry::profile::parse_drift(drift_text));
    for (const auto& d : drows) drift += ferry::profile::drift_row_line(d);
    std::remove(log_part.c_str());
    std::remove(drift_part.c_str());
  }
  auto merged = ferry::profile::merge_execution_logs(std::move(parts));
  std::string log = ferry::profile::execution_log_header();
  for (const auto& row : merged) log += ferry::profile::execution_row_line(row);
  FERRY_RETURN_IF_ERROR(ferry::profile::write_file(run_dir + "/" + ferry::profile::kExecutionLog, log));
  FERRY_RETURN_IF_ERROR(ferry::profile::write_file(run_dir + "/" + ferry::profile::kClockDrift, drift));
  return merged;
}

// A short table: per pair and size, median latency and bandwidth, CV.
void print_summary(const std::vector<ferry::profile::ExecutionRow>& rows,
                   const std::vector<ferry::profile::ReferenceRow>& reference) {
  auto stats = ferry::profile::config_stats(rows);
  std::printf("%-7s %-8s %-5s %12s %12s %9s %7s\n", "pair", "size", "reps", "median_us", "host_us", "GB/s", "cv_%");
  for (const auto& s : stats) {
    std::printf("%d->%-4d %-8s %-5d %12.2f %12.2f %9.2f %7.2f\n", s.src, s.dst, format_bytes(s.size).c_str(),
                s.repetitions, s.median_device_ns / 1e3, s.median_host_ns / 1e3, s.gbps(), 100 * s.cv);
  }
  if (reference.empty()) return;
  std::map<std::tuple<int, int, uint64_t>, std::vector<double>> ref;
  for (const auto& r : reference) ref[{r.src, r.dst, r.size}].push_back(r.gbps());
  std::printf("\n%-7s %-8s %12s %14s %8s\n", "pair", "size", "ce GB/s", "reference GB/s", "ratio");
  for (const auto& s : stats) {
    auto it = ref.find({s.src, s.dst, s.size});
    if (it == ref.end()) continue;
    double r = ferry::profile::median(it->second);
    std::printf("%d->%-4d %-8s %12.2f %14.2f %8.4f\n", s.src, s.dst, format_bytes(s.size).c_str(), s.gbps(), r,
                r > 0 ? s.gbps() / r : 0);
  }
}

void run_profile(const ProfileFlags& f) {
  auto sizes = parse_sizes(f.sizes);
  if (!sizes.ok()) die(kExitUsage, sizes.status().message());
  if (f.warmup < 0 || f.reps < 1) die(kExitUsage, "--warmup must be >= 0 and --reps >= 1");
  const ferry::cli::profile::BackendSpec* spec = profile::find_backend(f.backend);
  if (spec == nullptr) die(kExitUsage, "unknown backend \"" + f.backend + "\": use ce, nccl or ferry");

  std::vector<int> gpus = plan_gpus(f);
  auto plan = ferry::profile::make_plan({gpus, sizes.value(), f.seed});
  if (!plan.ok()) die(kExitUsage, plan.status().message());
  if (f.dry_run) {
    print_plan(plan.value(), f);
    std::exit(0);
  }
  if (spec->unavailable != nullptr) die(kExitFailed, "backend " + f.backend + ": " + spec->unavailable);
  set_run_environment();

  const bool worker = f.worker_rank >= 0;
  const std::string run_dir = f.out.empty() ? default_run_dir(f.backend) : f.out;
  std::unique_ptr<ferry::profile::Nvml> nvml;
  if (auto n = ferry::profile::Nvml::load(); n.ok()) {
    nvml = std::move(n.value());
  } else if (!worker) {
    std::fprintf(stderr, "profile: warning: %s\n", n.status().message().c_str());
  }

  profile::RankOptions ro;
  ro.backend = f.backend;
  ro.gpus = gpus;
  ro.sizes = sizes.value();
  ro.plan = plan.value();
  ro.seed = f.seed;
  ro.warmup = f.warmup;
  ro.repetitions = f.reps;
  ro.drift_seconds = f.drift_seconds;
  ro.warm_to_c = f.warm_to;
  ro.warm_limit_s = f.warm_limit;
  ro.run_dir = run_dir;
  // A rank started by `ferry profile` records its parent's command line, the one a person typed.
  ro.command_line = f.worker_rank >= 0 ? command_line(std::to_string(getppid())) : command_line();

  if (worker) {
    // A child of a process-per-GPU run: its own rank, nothing else.
    ro.rank = f.worker_rank;
    ro.world = f.worker_world;
    profile::BackendArgs args;
    args.gpus = gpus;
    args.rank = f.worker_rank;
    args.world = f.worker_world;
    args.nccl_id_hex = f.worker_id;
    args.rendezvous_dir = f.worker_rendezvous;
    args.wait_limit_s = f.timeout;
    args.seed = f.seed;
    auto backend = profile::make_backend(f.backend, args);
    if (!backend.ok()) die(kExitFailed, "rank " + std::to_string(ro.rank) + ": " + backend.status().message());
    auto r = profile::run_rank(*backend.value(), ro, nvml.get());
    // std::exit skips destructors: end the backend's threads and connections first.
    backend.value().reset();
    if (!r.ok()) die(kExitFailed, "rank " + std::to_string(ro.rank) + ": " + r.status().message());
    if (r->bad_bytes > 0) {
      die(kExitFailed, "rank " + std::to_string(ro.rank) + ": verification FAILED: " + std::to_string(r->bad_bytes) +
                           " bytes differ from what was sent");
    }
    std::exit(0);
  }

  auto count = profile_gpu::device_count();
  if (!count.ok()) die_without_gpus(count.status());
  for (int g : gpus) {
    if (g >= count.value()) {
      die(kExitUsage, "GPU " + std::to_string(g) + " does not exist: CUDA sees " + std::to_string(count.value()));
    }
  }
  ro.warnings = preflight(gpus, nvml.get(), f.allow_busy);
  for (const std::string& w : ro.warnings) std::fprintf(stderr, "profile: warning: %s\n", w.c_str());

  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) die(kExitFailed, "cannot create " + run_dir + ": " + ec.message());
  if (fs::exists(fs::path(run_dir) / ferry::profile::kExecutionLog)) {
    die(kExitUsage, run_dir + " already holds a run; choose another --out");
  }
  std::fprintf(stderr, "profile: backend %s, GPUs %zu, %zu configurations x (%d warm-up + %d timed), run dir %s\n",
               f.backend.c_str(), gpus.size(), plan->size(), f.warmup, f.reps, run_dir.c_str());

  std::unique_ptr<ferry::profile::TemperatureSampler> sampler;
  if (nvml) {
    std::vector<ferry::profile::TemperatureSampler::Gpu> sg;
    for (int g : gpus) {
      if (auto info = profile_gpu::device_info(g); info.ok()) sg.push_back({g, info->pci_bus_id});
    }
    sampler = std::make_unique<ferry::profile::TemperatureSampler>(*nvml, sg, f.sample_interval);
    sampler->start();
  }

  const int64_t t0 = profile::monotonic_ns();
  int world = 1;
  int failed = 0;
  uint64_t bad = 0;
  if (spec->process_per_gpu) {
    world = static_cast<int>(gpus.size());
    failed = run_children(f, fs::absolute(run_dir).string(), gpus);
  } else {
    profile::BackendArgs args;
    args.gpus = gpus;
    args.seed = f.seed;
    auto backend = profile::make_backend(f.backend, args);
    if (!backend.ok()) die(kExitFailed, backend.status().message());
    auto r = profile::run_rank(*backend.value(), ro, nvml.get());
    if (!r.ok()) die(kExitFailed, r.status().message());
    bad = r->bad_bytes;
  }
  const double wall = (profile::monotonic_ns() - t0) * 1e-9;

  // The reference loop (ce): nvbandwidth's spin-gated copies at the largest sizes.
  std::vector<ferry::profile::ReferenceRow> reference;
  auto ref_min = parse_bytes(f.reference_min);
  if (!ref_min.ok()) die(kExitUsage, ref_min.status().message());
  if (f.backend == "ce" && !f.no_reference && failed == 0) {
    for (const Config& c : ferry::profile::canonical_configs({gpus, sizes.value(), f.seed})) {
      if (c.size < ref_min.value()) continue;
      std::fprintf(stderr, "profile: reference loop %d->%d %s\n", c.src, c.dst, format_bytes(c.size).c_str());
      auto rows = profile_gpu::reference_loop(c.src, c.dst, c.size, f.reference_copies, f.reference_samples);
      if (!rows.ok()) die(kExitFailed, "reference loop: " + rows.status().message());
      reference.insert(reference.end(), rows->begin(), rows->end());
    }
    if (!reference.empty()) {
      std::string csv = ferry::profile::reference_header();
      for (const auto& r : reference) csv += ferry::profile::reference_row_line(r);
      if (auto s = ferry::profile::write_file(run_dir + "/" + ferry::profile::kReference, csv); !s.ok()) {
        die(kExitFailed, s.message());
      }
    }
  }

  if (sampler) {
    sampler->stop();
    std::string csv = ferry::profile::temperature_header();
    for (const auto& r : sampler->rows()) csv += ferry::profile::temperature_row_line(r);
    if (auto s = ferry::profile::write_file(run_dir + "/" + ferry::profile::kTemperatures, csv); !s.ok()) {
      die(kExitFailed, s.message());
    }
  }
  if (failed != 0) die(failed, "a rank failed; partial files are in " + run_dir);

  auto merged = merge_parts(run_dir, world);
  if (!merged.ok()) die(kExitFailed, merged.status().message());
  print_summary(merged.value(), reference);
  std::fprintf(stderr, "profile: %zu operations timed in %.1f s; files in %s; plots: python3 -m ferry.analysis %s\n",
               merged->size(), wall, run_dir.c_str(), run_dir.c_str());
  if (bad > 0) die(kExitFailed, "verification FAILED: " + std::to_string(bad) + " bytes differ from what was sent");
  std::exit(0);
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto f = std::make_shared<ProfileFlags>();
  CLI::App* c = app.add_subcommand(
      "profile", "GPU-to-GPU bandwidth and latency: every directed pair x every size, shuffled, with traces");
  std::string backends_help = "how bytes move:";
  for (const auto& b : profile::backends()) {
    backends_help += std::string("\n  ") + b.name + ": " + b.summary + (b.unavailable ? " [unavailable here]" : "");
  }
  c->add_option("--backend", f->backend, backends_help)->capture_default_str();
  c->add_option("--gpus", f->gpus, "GPUs to profile: 0,1 or 0-3 (default: all)");
  c->add_option("--sizes", f->sizes, "sizes: list or range, e.g. 1:1G:x2 (31 sizes) or 4K,1M,64M")->capture_default_str();
  c->add_option("--seed", f->seed, "seed of the shuffled order and of the buffers' data")->capture_default_str();
  c->add_option("--warmup", f->warmup, "untimed runs of each configuration before timing")->capture_default_str();
  c->add_option("--reps", f->reps, "timed repetitions of each configuration")->capture_default_str();
  c->add_option("--out", f->out, "run directory (default: profile-BACKEND-DATE-TIME)");
  c->add_option("--drift-seconds", f->drift_seconds, "length of each clock-drift window, at start and end (0: offset only)")
      ->capture_default_str();
  c->add_option("--sample-interval", f->sample_interval, "seconds between NVML samples")->capture_default_str();
  c->add_flag("--allow-busy", f->allow_busy, "profile GPUs that other processes are using");
  c->add_option("--warm-to", f->warm_to, "warm GPUs up to this temperature (C) before timing (0: no warm-up)")
      ->capture_default_str();
  c->add_option("--warm-limit", f->warm_limit, "longest thermal warm-up, seconds")->capture_default_str();
  c->add_option("--reference-min", f->reference_min,
                "ce: run the spin-gated cudaMemcpyPeerAsync reference loop at sizes from this up")
      ->capture_default_str();
  c->add_flag("--no-reference", f->no_reference, "ce: skip the reference loop");
  c->add_option("--reference-copies", f->reference_copies, "copies queued per reference sample")->capture_default_str();
  c->add_option("--reference-samples", f->reference_samples, "reference samples per size")->capture_default_str();
  c->add_flag("--dry-run", f->dry_run, "print the shuffled plan and exit (no GPU needed with --gpus)");
  c->add_option("--timeout", f->timeout,
                "end process-per-GPU runs still going after this many seconds (ferry: also a rank's longest wait for "
                "another)")
      ->capture_default_str();
  c->add_option("--worker-rank", f->worker_rank)->group("");
  c->add_option("--worker-world", f->worker_world)->group("");
  c->add_option("--worker-id", f->worker_id)->group("");
  c->add_option("--worker-rendezvous", f->worker_rendezvous)->group("");
  c->footer(std::string("Environment: ") + ferry::profile::kNcclLibraryEnv + ": " + ferry::profile::kNcclLibraryDoc +
            ".\nNCCL_NVLS_ENABLE=0, and CUDA_MODULE_LOADING=EAGER unless set, for every process the run starts. "
            "Clocks and power are recorded, never set.\nExit status: 0 done, 1 run or verification failed, 2 bad "
            "usage, 3 busy GPUs.");
  c->callback([f] { run_profile(*f); });
}

}  // namespace ferry::cli
