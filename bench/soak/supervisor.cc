// The supervisor (see supervisor.h). Threads: the monitor (reaps children,
// restarts killed peers, notices silent ones), the fault injector, the prober
// and the sampler; the main thread runs the phases of the run in order and
// judges it.
#include "soak/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "ferry/transfer.h"
#include "platform/mutex.h"
#include "soak/memory.h"
#include "soak/process.h"
#include "soak/report.h"
#include "soak/report_line.h"
#include "soak/sampler.h"

namespace ferry::soak {

using namespace std::chrono_literals;

namespace {

const char* const kFaultKinds[] = {"kill", "stop", "link", "garbage", "dereg", "exhaust"};

std::atomic<bool> g_interrupted{false};
void on_interrupt(int) { g_interrupted = true; }

struct Proc {
  std::string role;  // survivor, peer, probe, garbage, hold, memflood
  int index = 0;
  std::unique_ptr<Child> child;
  std::map<std::string, uint64_t> tick;
  Clock::time_point last_line = Clock::now();
  Clock::duration withheld_at_line{};  // the supervisor's withheld_ then
  bool killed_by_us = false, stopped = false, ready = false, bye = false, exited = false, ending_seen = false;
  int exit_status = 0;
  std::string name() const { return role + (role == "peer" ? std::to_string(index) : ""); }
};

class Supervisor {
 public:
  explicit Supervisor(const RunArgs& a) : a_(a), rng_(a.seed ? a.seed : std::random_device{}()) {}

  int run() {
    if (Status s = prepare(); !s.ok()) {
      std::fprintf(stderr, "ferry_soak run: %s\n", s.to_string().c_str());
      return 2;
    }
    t0_ = Clock::now();
    std::thread monitor([this] { monitor_loop(); });
    bool started = start_survivor();
    if (started) started = warm_up();
    if (started) {
      std::thread sampler([this] { sampler_loop(); });
      {
        platform::MutexLock lock(mu_);
        for (int i = 0; i < a_.peers; ++i) peers_.push_back(start_proc("peer", i));
      }
      std::thread faults([this] { fault_loop(); });
      std::thread prober([this] { probe_loop(); });
      const auto began = Clock::now();
      const Deadline end = began + std::chrono::milliseconds(static_cast<int64_t>(a_.seconds * 1000));
      say("running for " + std::to_string(static_cast<int>(a_.seconds)) + " s");
      // Polled: the run ends at `end`, when the survivor dies or on Ctrl-C,
      // whichever comes first; 200 ms late is of no consequence.
      while (Clock::now() < end && !survivor_gone() && !g_interrupted) std::this_thread::sleep_for(200ms);
      // What the table reports: the time peers and faults ran (shorter than
      // asked when interrupted or when the survivor died).
      ran_seconds_ = std::chrono::duration<double>(Clock::now() - began).count();
      stop_faults_ = true;
      cv_.notify_all();
      faults.join();
      prober.join();
      if (!survivor_gone()) final_checks();
      stop_sampler_ = true;
      sampler.join();
    }
    ending_ = true;
    quit_survivor();
    stop_monitor_ = true;
    monitor.join();
    {
      platform::MutexLock lock(mu_);
      for (auto& p : procs_) p->child.reset();  // kills anything left, joins the readers
    }
    return judge();
  }

 private:
  // ---- setup -----------------------------------------------------------
  Status prepare() {
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0) return Status(Code::kInternal, "cannot find this program (/proc/self/exe)");
    self_.assign(buf, static_cast<size_t>(n));
    if (a_.out_dir.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "ferry-soak-XXXXXX").string();
      if (::mkdtemp(tmpl.data()) == nullptr) return Status(Code::kInternal, "mkdtemp failed");
      dir_ = tmpl;
    } else {
      dir_ = a_.out_dir;
      std::filesystem::create_directories(dir_);
    }
    events_.open(dir_ + "/events.log");
    samples_log_.open(dir_ + "/samples.csv");
    samples_log_ << "seconds,rss_kib,threads,fds\n";
    std::string list = a_.faults == "all" ? "kill,stop,link,garbage,dereg,exhaust" : a_.faults;
    if (list != "none") {
      std::stringstream ss(list);
      std::string k;
      while (std::getline(ss, k, ',')) {
        if (std::find(std::begin(kFaultKinds), std::end(kFaultKinds), k) == std::end(kFaultKinds)) {
          return Status(Code::kInvalidArgument, "unknown fault kind \"" + k + "\"");
        }
        enabled_.push_back(k);
      }
    }
    auto link = std::find(enabled_.begin(), enabled_.end(), "link");
    if (link != enabled_.end()) {
      std::string why;
      if (a_.engine.transport != "tcp")
        why = "the local transport has no network link";
      else if (a_.netns_server.empty() || a_.link_dev.empty())
        why = "no network-namespace lab (--netns-server, --link-dev; bench/soak.sh makes one as root)";
      if (!why.empty()) {
        skipped_["link"] = why;
        enabled_.erase(link);
      }
    }
    if (a_.gpu) {
      // Checked here without making a context (the children make their own).
      if (gpu_count() == 0) {
        return Status(Code::kUnimplemented,
                      "--gpu needs the CUDA driver (libcuda.so.1) and a GPU; the driver " +
                          std::string(platform_cuda_loaded() ? "sees no GPU" : "could not be loaded or initialised") +
                          " on this host");
      }
      gpu_server_ = 0;
      gpu_client_ = gpu_count() >= 2 ? 1 : 0;  // two GPUs: the survivor's and the peers' differ
    }
    ::signal(SIGINT, on_interrupt);
    ::signal(SIGTERM, on_interrupt);
    ::signal(SIGPIPE, SIG_IGN);
    return Status();
  }

  std::vector<std::string> prefix(bool server) const {
    const std::string& ns = server ? a_.netns_server : a_.netns_client;
    if (ns.empty()) return {self_};
    return {"ip", "netns", "exec", ns, self_};
  }

  std::vector<std::string> engine_flags(bool server) const {
    std::vector<std::string> f = {"--transport",
                                  a_.engine.transport,
                                  "--peer-timeout-ms",
                                  std::to_string(a_.engine.peer_timeout.count()),
                                  "--handshake-timeout-ms",
                                  std::to_string(a_.engine.handshake_timeout.count()),
                                  "--max-per-peer",
                                  std::to_string(a_.engine.max_connections_per_peer),
                                  "--connection-memory",
                                  std::to_string(a_.engine.connection_memory_bytes)};
    if (a_.gpu) {
      f.push_back("--gpu-device");
      f.push_back(std::to_string(server ? gpu_server_ : gpu_client_));
    }
    return f;
  }

  std::shared_ptr<Proc> start_proc(const std::string& role, int index) REQUIRES(mu_) {
    auto p = std::make_shared<Proc>();
    p->role = role;
    p->index = index;
    bool server = role == "survivor";
    std::vector<std::string> argv = prefix(server);
    if (role == "survivor") {
      argv.push_back("survivor");
      std::string host = a_.server_host.empty() ? "127.0.0.1" : a_.server_host;
      for (auto& x : std::vector<std::string>{"--listen", host + ":0", "--max-bytes", std::to_string(a_.max_op_bytes),
                                              "--slots", std::to_string(a_.peers * a_.lanes + 2)}) {
        argv.push_back(x);
      }
      if (a_.corrupt_one) argv.push_back("--corrupt-one");
      if (a_.hang_one) argv.push_back("--hang-one");
    } else if (role == "garbage") {
      for (auto& x :
           std::vector<std::string>{"garbage", "--connect", address_, "--seed", std::to_string(rng_()),
                                    "--handshake-timeout-ms", std::to_string(a_.engine.handshake_timeout.count())}) {
        argv.push_back(x);
      }
    } else {
      for (auto& x : std::vector<std::string>{"peer", "--connect", address_, "--mode", role == "peer" ? "lane" : role,
                                              "--lanes", std::to_string(a_.lanes), "--max-bytes",
                                              std::to_string(a_.max_op_bytes), "--seed", std::to_string(rng_() | 1),
                                              "--hold-count", std::to_string(a_.engine.max_connections_per_peer + 4)}) {
        argv.push_back(x);
      }
    }
    if (role != "garbage") {
      for (auto& x : engine_flags(server)) argv.push_back(x);
    }
    std::weak_ptr<Proc> weak = p;
    auto child = Child::start(argv, dir_ + "/" + p->name() + ".log", [this, weak](const std::string& line) {
      if (auto q = weak.lock()) on_line(*q, line);
    });
    if (!child.ok()) {
      problem("cannot start " + p->name() + ": " + child.status().to_string());
      p->exited = true;
      return p;
    }
    p->child = std::move(child).value();
    p->last_line = Clock::now();
    procs_.push_back(p);
    log(p->name() + " started, pid " + std::to_string(p->child->pid()));
    return p;
  }

  bool start_survivor() {
    {
      platform::MutexLock lock(mu_);
      survivor_ = start_proc("survivor", 0);
    }
    platform::UniqueLock lock(mu_);
    if (!cv_.wait_for(lock.native(), 30s, [this]() REQUIRES(mu_) { return survivor_->ready || survivor_->exited; }) ||
        !survivor_->ready) {
      problem("the survivor did not start (see " + dir_ + "/survivor.log)");
      return false;
    }
    return true;
  }

  // One probe before anything else, so that whatever the engine starts on
  // its first connection and keeps is part of the baseline.
  bool warm_up() {
    if (!probe("warm-up probe")) return false;
    if (!wait_sessions_ended(20s)) {
      problem("the warm-up probe's session did not end");
      return false;
    }
    std::this_thread::sleep_for(1s);
    sample_process(survivor_pid(), &baseline_);
    log("baseline: " + describe_sample(baseline_));
    return true;
  }

  // ---- children's lines ------------------------------------------------
  void on_line(Proc& p, const std::string& line) {
    platform::MutexLock lock(mu_);
    p.last_line = Clock::now();
    p.withheld_at_line = withheld_;
    if (line.rfind("TICK ", 0) == 0) {
      std::istringstream in(line.substr(5));
      std::string kv;
      while (in >> kv) {
        auto eq = kv.find('=');
        if (eq != std::string::npos) p.tick[kv.substr(0, eq)] = std::strtoull(kv.c_str() + eq + 1, nullptr, 10);
      }
      cv_.notify_all();
      return;
    }
    log(p.name() + ": " + line);
    if (line.rfind("READY addr=", 0) == 0) {
      address_ = line.substr(11, line.find(' ', 11) - 11);
      p.ready = true;
    } else if (line == "ENDING ok") {
      p.ending_seen = true;
    } else if (line == "BYE") {
      p.bye = true;
    } else if (line.rfind("CORRUPT", 0) == 0) {
      ++corrupt_;
      problem(p.name() + ": " + line);
    } else if (line.rfind("HANG", 0) == 0) {
      ++hangs_;
      problem(p.name() + ": " + line);
    } else if (line.rfind("VIOLATION", 0) == 0) {
      ++violations_;
      problem(p.name() + ": " + line);
    } else if (line.rfind("GARBAGE ", 0) == 0) {
      garbage_lines_.push_back(line);
    }
    cv_.notify_all();
  }

  // ---- monitor -----------------------------------------------------------
  void monitor_loop() {
    name_this_thread("soak-monitor");
    auto last = Clock::now();
    while (!stop_monitor_) {
      {
        platform::MutexLock lock(mu_);
        auto now = Clock::now();
        if (now - last > 150ms) withheld_ += now - last - 100ms;
        last = now;
        for (auto& p : procs_) {
          int st = 0;
          if (p->exited || !p->child || !p->child->poll_exit(&st)) continue;
          p->exited = true;
          p->exit_status = st;
          on_exit(*p, st);
        }
        for (size_t i = 0; i < peers_.size(); ++i) {
          if (peers_[i]->exited && !ending_ && restart_at_.count(i) && now >= restart_at_[i]) {
            restart_at_.erase(i);
            peers_[i] = start_proc("peer", static_cast<int>(i));
            ++restarts_;
          }
        }
        // A child that says nothing for 15 s (it ticks every second) is hung,
        // unless it is stopped on purpose.
        for (auto& p : procs_) {
          if (p->exited || p->stopped || !p->child) continue;
          // Time the host withheld the CPU from this supervisor (its own
          // wakeups came late) is not the child's silence.
          if (now - p->last_line - (withheld_ - p->withheld_at_line) > 15s) {
            ++hangs_;
            problem(p->name() + " printed nothing for 15 s (not stopped by the soak): hung");
            p->last_line = now;
            p->withheld_at_line = withheld_;
          }
        }
        cv_.notify_all();
      }
      // waitpid(WNOHANG) on every child ten times a second: a child's exit
      // is seen within 100 ms without a SIGCHLD handler.
      std::this_thread::sleep_for(100ms);
    }
  }

  void on_exit(Proc& p, int st) REQUIRES(mu_) {
    std::string how = describe_wait_status(st);
    log(p.name() + " exited: " + how);
    bool sigkill = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    if (p.role == "survivor") {
      if (!(ending_ && WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        ++crashes_;
        problem("the survivor ended during the run: " + how);
      }
      return;
    }
    if (WIFSIGNALED(st) && !(sigkill && (p.killed_by_us || ending_))) {
      ++crashes_;
      problem(p.name() + " crashed: " + how + " (see " + dir_ + "/" + p.name() + ".log)");
    }
    if (p.role == "peer") {
      if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
        ++crashes_;
        problem(p.name() + " failed: " + how + " (see " + dir_ + "/" + p.name() + ".log)");
      }
      if (!ending_) {
        restart_at_[static_cast<size_t>(p.index)] =
            Clock::now() + std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 1000)(rng_));
      }
    }
  }

  bool survivor_gone() {
    platform::MutexLock lock(mu_);
    return survivor_->exited;
  }
  pid_t survivor_pid() {
    platform::MutexLock lock(mu_);
    return survivor_->child ? survivor_->child->pid() : -1;
  }

  // ---- faults --------------------------------------------------------------
  // Sleeps `d` unless the run ends first; false then.
  bool pause(Clock::duration d) {
    platform::UniqueLock lock(mu_);
    return !cv_.wait_for(lock.native(), d, [this] { return stop_faults_.load(); });
  }

  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }

  void fault_loop() {
    name_this_thread("soak-faults");
    if (enabled_.empty()) return;
    std::vector<std::string> deck;
    while (true) {
      if (!pause(std::chrono::milliseconds(static_cast<int64_t>(1000 * uniform(a_.fault_gap_min, a_.fault_gap_max))))) {
        return;
      }
      if (deck.empty()) {
        deck = enabled_;
        std::shuffle(deck.begin(), deck.end(), rng_);
      }
      std::string kind = deck.back();
      deck.pop_back();
      // A kind with no target now (every peer dead or stopped) goes back to
      // the bottom of the deck, so that a short run still injects every kind.
      if (!inject(kind)) deck.insert(deck.begin(), kind);
    }
  }

  // A live lane peer, or null.
  std::shared_ptr<Proc> live_peer() REQUIRES(mu_) {
    std::vector<std::shared_ptr<Proc>> live;
    for (auto& p : peers_) {
      if (!p->exited && !p->stopped && p->child) live.push_back(p);
    }
    if (live.empty()) return nullptr;
    return live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng_)];
  }

  // False when the fault found no target.
  bool inject(const std::string& kind) {
    platform::UniqueLock lock(mu_);
    if (kind == "kill") {
      auto p = live_peer();
      if (!p) return log("fault kill: no live peer, later"), false;
      p->killed_by_us = true;
      p->child->signal(SIGKILL);
      count_fault("kill", "SIGKILL " + p->name());
    } else if (kind == "stop") {
      auto p = live_peer();
      if (!p) return log("fault stop: no live peer, later"), false;
      auto d = a_.engine.peer_timeout + std::chrono::milliseconds(static_cast<int64_t>(uniform(1000, 2000)));
      p->stopped = true;
      p->child->signal(SIGSTOP);
      count_fault("stop", "SIGSTOP " + p->name() + " for " +
                              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) +
                              " ms (peer timeout " + std::to_string(a_.engine.peer_timeout.count()) + " ms)");
      lock.unlock();
      // Not cut short at the end of the run: the peer must be continued.
      std::this_thread::sleep_for(d);
      lock.lock();
      p->child->signal(SIGCONT);
      p->stopped = false;
      p->last_line = Clock::now();
      p->withheld_at_line = withheld_;
      log("SIGCONT " + p->name());
    } else if (kind == "link") {
      // A garbage process judges the survivor by how soon it closes its
      // streams; with the link down, the survivor's FIN cannot reach it.
      // So the link goes down only once no garbage process is running.
      cv_.wait_for(lock.native(), 15s, [this]() REQUIRES(mu_) {
        return std::none_of(procs_.begin(), procs_.end(), [](auto& p) { return p->role == "garbage" && !p->exited; });
      });
      auto d = std::chrono::milliseconds(static_cast<int64_t>(uniform(500, a_.engine.peer_timeout.count() + 2000)));
      count_fault("link", a_.link_dev + " down for " + std::to_string(d.count()) + " ms");
      lock.unlock();
      int rc = run_command({"ip", "-n", a_.netns_server, "link", "set", a_.link_dev, "down"}, dir_ + "/ip.log", 10000);
      std::this_thread::sleep_for(d);
      int rc2 = run_command({"ip", "-n", a_.netns_server, "link", "set", a_.link_dev, "up"}, dir_ + "/ip.log", 10000);
      lock.lock();
      if (rc != 0 || rc2 != 0) problem("the link fault's ip commands failed (see " + dir_ + "/ip.log)");
    } else if (kind == "garbage") {
      start_proc("garbage", 0);
      count_fault("garbage", "a third process sends garbage and half handshakes to " + address_);
    } else if (kind == "dereg") {
      std::shared_ptr<Proc> target = survivor_;
      if (uniform(0, 1) < 0.3) {
        if (auto p = live_peer()) target = p;
      }
      target->child->command("DEREG");
      count_fault("dereg", "asked " + target->name() + " to deregister a region in use");
    } else if (kind == "exhaust") {
      bool memory = (faults_["exhaust"] % 2) == 1;
      start_proc(memory ? "memflood" : "hold", 0);
      count_fault("exhaust", memory ? "flood one connection past connection_memory_bytes"
                                    : "open max_connections_per_peer + 4 connections from one address");
    }
    return true;
  }

  void count_fault(const std::string& kind, const std::string& what) REQUIRES(mu_) {
    ++faults_[kind];
    log("FAULT " + kind + ": " + what);
  }

  // ---- probes ----------------------------------------------------------------
  bool probe(const std::string& why) {
    std::shared_ptr<Proc> p;
    {
      platform::MutexLock lock(mu_);
      p = start_proc("probe", 0);
    }
    platform::UniqueLock lock(mu_);
    bool done = cv_.wait_for(lock.native(), 60s, [&] { return p->exited; });
    bool ok = done && WIFEXITED(p->exit_status) && WEXITSTATUS(p->exit_status) == 0;
    if (ok) {
      ++probes_ok_;
    } else {
      ++probes_failed_;
      problem(why + " failed: the survivor did not serve a new connection (" +
              (done ? describe_wait_status(p->exit_status) : std::string("no exit within 60 s")) + ")");
    }
    return ok;
  }

  void probe_loop() {
    name_this_thread("soak-prober");
    while (pause(std::chrono::milliseconds(static_cast<int64_t>(a_.probe_every * 1000)))) probe("probe");
  }

  // ---- sampling --------------------------------------------------------------
  void sampler_loop() {
    name_this_thread("soak-sampler");
    pid_t pid = survivor_pid();
    while (!stop_sampler_) {
      Sample s;
      s.t = std::chrono::duration<double>(Clock::now() - t0_).count();
      if (sample_process(pid, &s)) {
        platform::MutexLock lock(mu_);
        samples_.push_back(s);
        samples_log_ << s.t << "," << s.rss_kib << "," << s.threads << "," << s.fds << std::endl;
      }
      std::this_thread::sleep_for(1s);
    }
  }

  // ---- the end -----------------------------------------------------------------
  bool wait_sessions_ended(Clock::duration within) {
    platform::UniqueLock lock(mu_);
    return cv_.wait_for(lock.native(), within, [this]() REQUIRES(mu_) {
      auto it = survivor_->tick.find("sessions_live");
      return survivor_->exited || (it != survivor_->tick.end() && it->second == 0);
    });
  }

  void final_checks() {
    say("faults stopped; final probe, then the peers quit");
    final_probe_ok_ = probe("final probe");
    ending_ = true;
    {
      // The survivor must know before any peer leaves, or it counts the
      // peers' goodbyes as failures: wait for it to say so.
      platform::UniqueLock lock(mu_);
      survivor_->child->command("ENDING");
      if (!cv_.wait_for(lock.native(), 20s,
                        [this]() REQUIRES(mu_) { return survivor_->ending_seen || survivor_->exited; })) {
        problem("the survivor did not acknowledge ENDING within 20 s");
      }
    }
    std::vector<std::shared_ptr<Proc>> others;
    {
      platform::MutexLock lock(mu_);
      for (auto& p : procs_) {
        if (p->exited || !p->child || p->role == "survivor") continue;
        if (p->role == "peer") p->child->command("QUIT");
        others.push_back(p);
      }
    }
    {
      platform::UniqueLock lock(mu_);
      bool all = cv_.wait_for(lock.native(), 45s, [&] {
        return std::all_of(others.begin(), others.end(), [](auto& p) { return p->exited; });
      });
      if (!all) {
        for (auto& p : others) {
          if (p->exited) continue;
          ++hangs_;
          problem(p->name() + " did not end within 45 s of the run's end");
          p->child->signal(SIGKILL);
        }
      }
    }
    if (!wait_sessions_ended(a_.engine.peer_timeout + 20s)) {
      ++hangs_;
      problem("the survivor still had sessions " + std::to_string((a_.engine.peer_timeout + 20s).count()) +
              " s after every peer had gone");
    }
    // Connections close on threads of their own: give them a moment, then
    // anything above the baseline is a leak.
    Sample s;
    // Polled: /proc has no way to wait for a count to drop.
    for (Deadline d = after(15s); Clock::now() < d; std::this_thread::sleep_for(250ms)) {
      if (!sample_process(survivor_pid(), &s)) break;
      if (s.fds <= baseline_.fds && s.threads <= baseline_.threads) break;
    }
    final_ = s;
    log("after the peers: " + describe_sample(final_));
  }

  void quit_survivor() {
    std::shared_ptr<Proc> s;
    {
      platform::MutexLock lock(mu_);
      s = survivor_;
      if (!s || s->exited || !s->child) return;
      s->child->command("QUIT");
      s->child->close_stdin();
    }
    platform::UniqueLock lock(mu_);
    if (!cv_.wait_for(lock.native(), 60s, [&] { return s->exited; })) {
      ++hangs_;
      problem("the survivor did not exit within 60 s of QUIT");
      s->child->signal(SIGKILL);
    }
  }

  int judge() {
    Report r;
    r.transport = a_.engine.transport;
    r.seconds = ran_seconds_;
    r.peers = a_.peers;
    r.lanes = a_.lanes;
    r.max_op_bytes = a_.max_op_bytes;
    r.memory = a_.gpu ? "GPU" : "host";
    r.dir = dir_;
    platform::MutexLock lock(mu_);
    for (auto& p : procs_) {
      auto& dst = p->role == "survivor" ? r.survivor : r.others;
      for (auto& [k, v] : p->tick) {
        if (k != "sessions_live") dst[k] += v;
      }
    }
    r.faults = faults_;
    r.skipped = skipped_;
    for (auto& k : enabled_) {
      if (!faults_.count(k)) r.never_injected.push_back(k);
    }
    r.corruptions = corrupt_;
    r.hangs = hangs_;
    r.violations = violations_;
    r.crashes = crashes_;
    r.restarts = restarts_;
    r.probes_ok = probes_ok_;
    r.probes_failed = probes_failed_;
    r.final_probe_ok = final_probe_ok_;
    r.baseline = baseline_;
    r.final_sample = final_;
    r.leaked_fds = std::max(0, final_.fds - baseline_.fds);
    r.leaked_threads = std::max(0, final_.threads - baseline_.threads);
    r.drift = judge_drift(samples_);
    r.strict = enabled_.empty();
    r.problems = problems_;
    r.garbage = garbage_lines_;
    bool pass = r.passed();
    std::string table = r.table();
    std::fputs(table.c_str(), stdout);
    std::fflush(stdout);
    std::ofstream(dir_ + "/report.txt") << table;
    if (!a_.json.empty()) std::ofstream(a_.json) << r.json() << "\n";
    return pass ? 0 : 1;
  }

  // ---- logging ----------------------------------------------------------------
  // REQUIRES: mu_ held, or a single thread.
  void log(const std::string& s) {
    char t[32];
    std::snprintf(t, sizeof(t), "%8.3f ", std::chrono::duration<double>(Clock::now() - t0_).count());
    events_ << t << s << "\n";
    events_.flush();
  }
  void problem(const std::string& s) {
    log("PROBLEM " + s);
    if (problems_.size() < 50) problems_.push_back(s);
    std::fprintf(stderr, "ferry_soak: %s\n", s.c_str());
  }
  void say(const std::string& s) {
    std::fprintf(stderr, "ferry_soak [%s %.0fs] %s\n", a_.engine.transport.c_str(),
                 std::chrono::duration<double>(Clock::now() - t0_).count(), s.c_str());
  }
  static std::string describe_sample(const Sample& s) {
    return "rss " + std::to_string(s.rss_kib / 1024) + " MiB, " + std::to_string(s.threads) + " threads, " +
           std::to_string(s.fds) + " fds";
  }

  const RunArgs a_;
  std::mt19937_64 rng_;
  std::string self_, dir_;
  std::ofstream events_;
  std::ofstream samples_log_;
  std::vector<std::string> enabled_;
  std::map<std::string, std::string> skipped_;
  int gpu_server_ = -1, gpu_client_ = -1;
  Clock::time_point t0_;

  // Taken for what follows and for the fields of every Proc.
  platform::Mutex mu_;
  std::condition_variable cv_;
  std::list<std::shared_ptr<Proc>> procs_ GUARDED_BY(mu_);
  std::shared_ptr<Proc> survivor_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Proc>> peers_ GUARDED_BY(mu_);
  std::map<size_t, Clock::time_point> restart_at_ GUARDED_BY(mu_);
  // How late the monitor's wakeups came, summed: CPU the host withheld.
  Clock::duration withheld_ GUARDED_BY(mu_){};
  std::string address_ GUARDED_BY(mu_);
  std::map<std::string, uint64_t> faults_ GUARDED_BY(mu_);
  uint64_t corrupt_ = 0, hangs_ = 0, violations_ = 0, crashes_ = 0, restarts_ = 0;
  uint64_t probes_ok_ = 0, probes_failed_ = 0;
  bool final_probe_ok_ = false;
  double ran_seconds_ = 0;
  std::vector<std::string> problems_, garbage_lines_;
  std::vector<Sample> samples_;
  Sample baseline_, final_;
  std::atomic<bool> ending_{false}, stop_faults_{false}, stop_sampler_{false}, stop_monitor_{false};
};

}  // namespace

int run_main(const RunArgs& a) {
  name_this_thread("soak-supervisor");
  Supervisor s(a);
  return s.run();
}

}  // namespace ferry::soak
