// The survivor: one engine that serves every lane, hold and flood the soak
// throws at it, takes faults (its regions deregistered mid-transfer) on
// command from the supervisor, and must end with nothing leaked.
//
// stdin carries commands from the supervisor, one a line: DEREG, QUIT (EOF
// also quits). stdout carries READY, TICK and event lines (report_line.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "ferry/ferry.h"
#include "platform/mutex.h"
#include "soak/lane.h"
#include "soak/memory.h"
#include "soak/report_line.h"
#include "soak/roles.h"
#include "soak/watchdog.h"

namespace ferry::soak {

using namespace std::chrono_literals;

namespace {

constexpr int kMaxSessions = 64;

struct Slot {
  std::unique_ptr<SoakMemory> local, inbox;
  bool busy = false;
};

class Survivor {
 public:
  explicit Survivor(const SurvivorArgs& a) : a_(a) {}

  int main() {
    auto engine = Engine::create(engine_options(a_.engine, a_.listen));
    if (!engine.ok()) {
      std::fprintf(stderr, "ferry_soak survivor: %s\n", engine.status().to_string().c_str());
      return 2;
    }
    engine_ = std::move(engine).value();
    const uint64_t room = buffer_bytes(a_.max_op_bytes);
    auto src = SoakMemory::create(room, a_.engine.gpu);
    if (!src.ok()) return fatal("source memory", src.status());
    source_ = std::move(src).value();
    source_seed_ = std::random_device()() | 1;
    if (Status s = source_->fill(0, room, source_seed_, 0); !s.ok()) return fatal("fill source", s);
    auto region = engine_->reg(source_->data(), room);
    if (!region.ok()) return fatal("reg source", region.status());
    auto desc = engine_->export_region(region.value());
    if (!desc.ok()) return fatal("export source", desc.status());
    for (int i = 0; i < a_.slots; ++i) {
      Slot s;
      auto l = SoakMemory::create(room, a_.engine.gpu);
      auto in = SoakMemory::create(room, a_.engine.gpu);
      if (!l.ok()) return fatal("slot memory", l.status());
      if (!in.ok()) return fatal("slot memory", in.status());
      s.local = std::move(l).value();
      s.inbox = std::move(in).value();
      platform::MutexLock lock(slots_mu_);
      slots_.push_back(std::move(s));
    }
    debug_.corrupt_one = a_.corrupt_one;
    debug_.hang_one = a_.hang_one;
    Watchdog watchdog(counters_, a_.margin);
    ctx_ = {engine_.get(), &counters_, &watchdog,     &roster_,     &debug_,     &stopping_,
            &ending_,      true,       source_.get(), source_seed_, desc.value()};
    emit("READY addr=" + engine_->address() + " pid=" + std::to_string(::getpid()));
    {
      Ticker ticker(counters_);
      std::thread acceptor([this] { accept_loop(); });
      control_loop();
      stopping_ = true;
      acceptor.join();
      {
        Armed armed(watchdog, "survivor: ending every session", after(a_.engine.peer_timeout + 30s));
        join_sessions(true);
      }
      {
        Armed armed(watchdog, "survivor: dereg of the source region", after(10s));
        (void)engine_->dereg(region.value());
      }
      {
        Armed armed(watchdog, "survivor: destroying the engine", after(20s));
        engine_.reset();
      }
    }
    emit("BYE");
    return 0;
  }

 private:
  int fatal(const char* what, const Status& s) {
    std::fprintf(stderr, "ferry_soak survivor: %s: %s\n", what, s.to_string().c_str());
    return 2;
  }

  void control_loop() {
    std::mt19937_64 rng(std::random_device{}());
    char line[256];
    while (std::fgets(line, sizeof(line), stdin) != nullptr) {
      std::string cmd(line);
      while (!cmd.empty() && (cmd.back() == '\n' || cmd.back() == '\r')) cmd.pop_back();
      if (cmd == "QUIT") return;
      if (cmd == "ENDING") {
        ending_ = true;
        emit("ENDING ok");
      }
      if (cmd == "DEREG") {
        // A lane between two operations holds nothing: try for up to 2 s
        // to catch one in the middle of one.
        std::string done;
        for (int i = 0; i < 40 && done.empty(); ++i) {
          done = roster_.strike(*engine_, *ctx_.watchdog, rng);
          if (done.empty()) std::this_thread::sleep_for(50ms);
        }
        counters_.add(done.empty() ? "dereg_idle" : "dereg_done");
        emit("FAULT dereg " + (done.empty() ? std::string("found no lane in an operation") : done));
      }
    }
  }

  void accept_loop() {
    name_this_thread("soak-accept");
    while (!stopping_) {
      Result<std::shared_ptr<Connection>> c = Status(Code::kDeadlineExceeded, "");
      {
        Armed armed(*ctx_.watchdog, "survivor: accept()", after(500ms));
        c = engine_->accept(after(500ms));
      }
      join_sessions(false);
      if (!c.ok()) {
        if (c.status().code() != Code::kDeadlineExceeded)
          counters_.add("accept_fail." + std::string(code_name(c.status().code())));
        continue;
      }
      counters_.add("sessions_accepted");
      platform::MutexLock lock(sessions_mu_);
      if (sessions_.size() >= kMaxSessions) {
        counters_.add("sessions_refused");
        c.value()->close();
        continue;
      }
      auto done = std::make_shared<std::atomic<bool>>(false);
      auto conn = c.value();
      sessions_.push_back({std::thread([this, conn, done] {
                             name_this_thread("soak-session");
                             session(*conn);
                             *done = true;
                           }),
                           done});
    }
  }

  void join_sessions(bool all) {
    platform::MutexLock lock(sessions_mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (all || *it->second) {
        it->first.join();
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
    counters_.set("sessions_live", sessions_.size());
  }

  Slot* take_slot() {
    platform::MutexLock lock(slots_mu_);
    for (auto& s : slots_) {
      if (!s.busy) {
        s.busy = true;
        return &s;
      }
    }
    return nullptr;
  }

  void give_slot(Slot* s) {
    platform::MutexLock lock(slots_mu_);
    s->busy = false;
  }

  void session(Connection& conn) {
    std::vector<uint8_t> ctl(kCtlBytes);
    auto ctl_region = engine_->reg(ctl.data(), ctl.size());
    if (!ctl_region.ok()) {
      conn.close();
      return;
    }
    Transfer t = conn.recv_async(ctl.data(), ctl.size());
    Status s;
    {
      Armed armed(*ctx_.watchdog, "survivor: recv of a session header", after(10s));
      s = t.wait(after(10s));
      if (s.code() == Code::kDeadlineExceeded) t.cancel();
    }
    std::string header = s.ok() ? std::string(reinterpret_cast<char*>(ctl.data()), t.bytes()) : "";
    if (!s.ok()) {
      counters_.add("header_fail." + std::string(code_name(s.code())));
    } else if (header.rfind("SOAK1 lane ", 0) == 0) {
      Slot* slot = take_slot();
      if (slot == nullptr) {
        counters_.add("lane_busy");
        static const char kBusy[] = "SOAK1 busy";
        std::memcpy(ctl.data(), kBusy, sizeof(kBusy) - 1);
        (void)conn.send_async(ctl.data(), sizeof(kBusy) - 1).wait(after(5s));
      } else {
        counters_.add("lanes");
        run_lane_as_survivor(ctx_, conn, {slot->local.get(), slot->inbox.get(), ctl.data(), ctl.size()}, header,
                             a_.max_op_bytes);
        give_slot(slot);
      }
    } else if (header == "SOAK1 hold") {
      counters_.add("holds");
      (void)hold(conn, after(60s));
    } else if (header == "SOAK1 memflood") {
      memflood(conn);
    } else {
      counters_.add("bad_header");
    }
    {
      Armed armed(*ctx_.watchdog, "survivor: close() of a session", after(10s));
      conn.close();
    }
    (void)engine_->dereg(ctl_region.value());
  }

  // Holds a connection until it fails, the run stops or `until`.
  // Polling health() ten times a second is the only way to watch a
  // connection without posting an operation on it.
  Status hold(Connection& conn, Deadline until) {
    while (!stopping_ && Clock::now() < until) {
      Status h = conn.health();
      if (!h.ok()) return h;
      std::this_thread::sleep_for(100ms);
    }
    return conn.health();
  }

  // A peer sends messages nobody receives and notifications nobody polls:
  // the connection must fail with resource_exhausted within 30 s.
  void memflood(Connection& conn) {
    Status h = hold(conn, after(30s));
    if (h.code() == Code::kResourceExhausted) {
      counters_.add("limit.memory_enforced");
      emit("LIMIT memflood refused: " + h.to_string().substr(0, 160));
    } else if (h.ok() && !stopping_) {
      counters_.add("violation");
      emit("VIOLATION a connection flooding messages and notifications was still healthy after 30 s");
    } else {
      counters_.add("limit.memory_other");
      emit("LIMIT memflood ended otherwise: " + h.to_string().substr(0, 160));
    }
  }

  const SurvivorArgs a_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<SoakMemory> source_;
  uint64_t source_seed_ = 0;
  platform::Mutex slots_mu_;
  std::vector<Slot> slots_ GUARDED_BY(slots_mu_);  // and each Slot's `busy`
  Counters counters_;
  Roster roster_;
  DebugFaults debug_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> ending_{false};
  EndContext ctx_;
  platform::Mutex sessions_mu_;
  std::list<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> sessions_ GUARDED_BY(sessions_mu_);
};

}  // namespace

int survivor_main(const SurvivorArgs& a) {
  name_this_thread("soak-survivor");
  if (a.engine.gpu >= 0) {
    Status s = gpu_usable(a.engine.gpu);
    if (!s.ok()) {
      std::fprintf(stderr, "ferry_soak: %s\n", s.to_string().c_str());
      return 2;
    }
  }
  Survivor s(a);
  return s.main();
}

}  // namespace ferry::soak
