// The peer: the other end of the survivor's lanes, killed, stopped and
// restarted by the supervisor. Its other modes are faults and checks of
// their own:
//   lane      --lanes N threads, each connecting and running lanes until QUIT
//   probe     one short lane with small operations; exit 0 only if it
//             completed (the survivor still serves new connections)
//   hold      opens --hold-count connections at once and holds them 2 s:
//             past max_connections_per_peer the survivor must refuse
//   memflood  floods one connection with messages and notifications nobody
//             takes: the survivor must fail it with resource_exhausted
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "ferry/ferry.h"
#include "soak/lane.h"
#include "soak/memory.h"
#include "soak/pattern.h"
#include "soak/report_line.h"
#include "soak/roles.h"
#include "soak/watchdog.h"

namespace ferry::soak {

using namespace std::chrono_literals;

namespace {

class Peer {
 public:
  explicit Peer(const PeerArgs& a) : a_(a), watchdog_(counters_, a.margin) {}

  int main() {
    auto engine = Engine::create(engine_options(a_.engine, "127.0.0.1:0"));
    if (!engine.ok()) {
      std::fprintf(stderr, "ferry_soak peer: %s\n", engine.status().to_string().c_str());
      return 2;
    }
    engine_ = std::move(engine).value();
    if (a_.mode == "hold" || a_.mode == "memflood") {
      Ticker ticker(counters_);
      return a_.mode == "hold" ? hold() : memflood();
    }
    const uint64_t max = a_.mode == "probe" ? std::min<uint64_t>(a_.max_op_bytes, 1u << 20) : a_.max_op_bytes;
    const uint64_t room = buffer_bytes(max);
    auto src = SoakMemory::create(room, a_.engine.gpu);
    if (!src.ok()) return fatal("source memory", src.status());
    source_ = std::move(src).value();
    uint64_t source_seed = mix64(a_.seed ^ 0x50eed);
    if (Status s = source_->fill(0, room, source_seed, 0); !s.ok()) return fatal("fill source", s);
    auto region = engine_->reg(source_->data(), room);
    if (!region.ok()) return fatal("reg source", region.status());
    auto desc = engine_->export_region(region.value());
    if (!desc.ok()) return fatal("export source", desc.status());
    debug_.corrupt_one = a_.corrupt_one;
    ctx_ = {engine_.get(), &counters_, &watchdog_,    &roster_,    &debug_,     &stopping_,
            &ending_,      false,      source_.get(), source_seed, desc.value()};
    int rc = 0;
    {
      Ticker ticker(counters_);
      if (a_.mode == "probe") {
        rc = probe(max);
      } else {
        std::vector<std::thread> lanes;
        for (int i = 0; i < a_.lanes; ++i) lanes.emplace_back([this, i, max] { lane_loop(i, max); });
        control_loop();
        stopping_ = true;
        for (auto& t : lanes) t.join();
      }
      (void)engine_->dereg(region.value());
      Armed armed(watchdog_, "peer: destroying the engine", after(20s));
      engine_.reset();
    }
    emit("BYE");
    return rc;
  }

 private:
  int fatal(const char* what, const Status& s) {
    std::fprintf(stderr, "ferry_soak peer: %s: %s\n", what, s.to_string().c_str());
    return 2;
  }

  Result<std::shared_ptr<Connection>> connect() {
    Deadline d = after(5s);
    Armed armed(watchdog_, "peer: connect to " + a_.connect, d);
    return engine_->connect(a_.connect, d);
  }

  void control_loop() {
    std::mt19937_64 rng(a_.seed);
    char line[256];
    while (std::fgets(line, sizeof(line), stdin) != nullptr) {
      std::string cmd(line);
      while (!cmd.empty() && (cmd.back() == '\n' || cmd.back() == '\r')) cmd.pop_back();
      if (cmd == "QUIT") {
        ending_ = true;
        return;
      }
      if (cmd == "DEREG") {
        std::string done;
        for (int i = 0; i < 40 && done.empty(); ++i) {
          done = roster_.strike(*engine_, watchdog_, rng);
          if (done.empty()) std::this_thread::sleep_for(50ms);
        }
        counters_.add(done.empty() ? "dereg_idle" : "dereg_done");
        emit("FAULT dereg " + (done.empty() ? std::string("found no lane in an operation") : done));
      }
    }
  }

  struct LaneBuffers {
    std::unique_ptr<SoakMemory> local, inbox;
    std::vector<uint8_t> ctl = std::vector<uint8_t>(kCtlBytes);
    Region ctl_region;
  };

  Result<LaneBuffers> lane_buffers(uint64_t max) {
    LaneBuffers b;
    auto l = SoakMemory::create(buffer_bytes(max), a_.engine.gpu);
    if (!l.ok()) return l.status();
    auto in = SoakMemory::create(buffer_bytes(max), a_.engine.gpu);
    if (!in.ok()) return in.status();
    b.local = std::move(l).value();
    b.inbox = std::move(in).value();
    auto r = engine_->reg(b.ctl.data(), b.ctl.size());
    if (!r.ok()) return r.status();
    b.ctl_region = r.value();
    return b;
  }

  void lane_loop(int index, uint64_t max) {
    name_this_thread("soak-lane-" + std::to_string(index));
    auto b = lane_buffers(max);
    if (!b.ok()) {
      emit("NOTE lane buffers: " + b.status().to_string());
      return;
    }
    std::mt19937_64 rng(mix64(a_.seed + index));
    auto backoff = 100ms;
    while (!stopping_) {
      auto c = connect();
      if (!c.ok()) {
        counters_.add("connect_fail." + std::string(code_name(c.status().code())));
        std::this_thread::sleep_for(backoff);
        backoff = std::min<std::chrono::milliseconds>(backoff * 2, 2s);
        continue;
      }
      backoff = 100ms;
      counters_.add("lanes");
      run_lane_as_peer(ctx_, *c.value(), {b->local.get(), b->inbox.get(), b->ctl.data(), b->ctl.size()}, rng(), max, 0);
    }
    (void)engine_->dereg(b->ctl_region);
  }

  int probe(uint64_t max) {
    auto b = lane_buffers(max);
    if (!b.ok()) return fatal("probe buffers", b.status());
    Deadline give_up = after(30s);
    std::mt19937_64 rng(a_.seed);
    std::string last = "no attempt";
    while (Clock::now() < give_up) {
      auto c = connect();
      if (c.ok()) {
        uint64_t done = run_lane_as_peer(
            ctx_, *c.value(), {b->local.get(), b->inbox.get(), b->ctl.data(), b->ctl.size()}, rng(), max, a_.probe_ops);
        if (done == a_.probe_ops && counters_.get("corrupt") == 0 && counters_.get("violation") == 0) {
          (void)engine_->dereg(b->ctl_region);
          emit("PROBE ok " + std::to_string(done) + " operations");
          return 0;
        }
        last = "lane ended after " + std::to_string(done) + " operations";
      } else {
        last = c.status().to_string();
      }
      std::this_thread::sleep_for(300ms);
    }
    (void)engine_->dereg(b->ctl_region);
    emit("PROBE failed: " + last);
    return 1;
  }

  // Sends a session header on a fresh connection.
  Status header(Connection& c, const std::string& text, std::vector<uint8_t>& buf) {
    std::memcpy(buf.data(), text.data(), text.size());
    Deadline d = after(5s);
    Armed armed(watchdog_, "peer: send of a header", d);
    return c.send_async(buf.data(), text.size()).wait(d);
  }

  int hold() {
    std::vector<uint8_t> buf(kCtlBytes);
    auto r = engine_->reg(buf.data(), buf.size());
    if (!r.ok()) return fatal("reg", r.status());
    std::vector<std::shared_ptr<Connection>> held;
    int refused = 0, other = 0;
    std::string other_what;
    for (int i = 0; i < a_.hold_count; ++i) {
      auto c = connect();
      if (c.ok()) {
        if (header(*c.value(), "SOAK1 hold", buf).ok()) held.push_back(c.value());
      } else if (c.status().code() == Code::kResourceExhausted) {
        ++refused;
      } else {
        ++other;
        other_what = c.status().to_string();
      }
    }
    std::this_thread::sleep_for(2s);
    for (auto& c : held) {
      Armed armed(watchdog_, "peer: close() of a held connection", after(10s));
      c->close();
    }
    held.clear();
    (void)engine_->dereg(r.value());
    emit("LIMIT conns opened=" + std::to_string(a_.hold_count - refused - other) +
         " refused=" + std::to_string(refused) + " other=" + std::to_string(other) +
         (other_what.empty() ? "" : " (" + other_what.substr(0, 120) + ")"));
    engine_.reset();
    if (refused == 0 && other == 0) {
      emit("VIOLATION " + std::to_string(a_.hold_count) + " connections from one address were all admitted (limit " +
           std::to_string(a_.engine.max_connections_per_peer) + " a peer)");
    }
    return refused > 0 ? 0 : 1;
  }

  int memflood() {
    const size_t msg = 64 * 1024;  // the inline limit: kept by the survivor until received
    std::vector<uint8_t> buf(msg);
    auto r = engine_->reg(buf.data(), buf.size());
    if (!r.ok()) return fatal("reg", r.status());
    std::shared_ptr<Connection> c;
    for (Deadline d = after(15s); !c && Clock::now() < d;) {
      auto x = connect();
      if (x.ok()) {
        c = x.value();
      } else {
        std::this_thread::sleep_for(300ms);
      }
    }
    if (!c) {
      emit("LIMIT memflood could not connect");
      return 1;
    }
    std::vector<uint8_t> hbuf(kCtlBytes);
    auto hr = engine_->reg(hbuf.data(), hbuf.size());
    int rc = 1;
    if (hr.ok() && header(*c, "SOAK1 memflood", hbuf).ok()) {
      std::string note(Connection::kMaxNotification, 'n');
      std::vector<Transfer> posted;
      Deadline d = after(30s);
      uint64_t bytes = 0;
      while (Clock::now() < d && c->health().ok() && bytes < (1ull << 30)) {
        for (int i = 0; i < 32; ++i) {
          posted.push_back(i % 2 ? c->notify_async(note) : c->send_async(buf.data(), buf.size()));
          bytes += msg;
        }
        // Paced, so that the survivor's limit, not this process, ends it.
        std::this_thread::sleep_for(2ms);
      }
      emit("LIMIT memflood posted " + std::to_string(bytes >> 20) +
           " MiB, connection: " + c->health().to_string().substr(0, 160));
      rc = c->health().ok() ? 1 : 0;
    }
    {
      Armed armed(watchdog_, "peer: close() of the flood connection", after(10s));
      c->close();
    }
    if (hr.ok()) (void)engine_->dereg(hr.value());
    (void)engine_->dereg(r.value());
    return rc;
  }

  const PeerArgs a_;
  Counters counters_;
  Watchdog watchdog_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<SoakMemory> source_;
  Roster roster_;
  DebugFaults debug_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> ending_{false};
  EndContext ctx_;
};

}  // namespace

int peer_main(const PeerArgs& a) {
  name_this_thread("soak-peer");
  if (a.engine.gpu >= 0) {
    Status s = gpu_usable(a.engine.gpu);
    if (!s.ok()) {
      std::fprintf(stderr, "ferry_soak: %s\n", s.to_string().c_str());
      return 2;
    }
  }
  Peer p(a);
  return p.main();
}

}  // namespace ferry::soak
