// A hostile `ferry bench` initiator: speaks the bench's session protocol
// (tools/ferry/bench_session.cc) to a `ferry bench --listen` target and breaks
// it in one chosen way, so that the CLI test can check that the target
// refuses or drops that session and goes on serving.
//
//   bench_hostile_initiator ADDR close
//       connects and hangs up at once.
//   bench_hostile_initiator ADDR config TEXT
//       sends TEXT as the session's configuration; the target must answer
//       with "error: ..." or hang up, not with its buffers' descriptors.
//   bench_hostile_initiator ADDR descriptors
//       a valid configuration, then 10 bytes where 96 bytes of descriptors go.
//   bench_hostile_initiator ADDR begin
//       a valid session up to the first size, then "begin" of another size.
//   bench_hostile_initiator ADDR stall
//       a valid session up to the first size, then nothing: the target must
//       close it (its start limit); prints "stall: closed after N ms".
//   bench_hostile_initiator ADDR vanish
//       a valid --bidir write session that hangs up while the target's own
//       writes are running.
//   bench_hostile_initiator ADDR idle N SECONDS
//       opens N connections that complete the handshake and then say nothing
//       (the engine's heartbeats keep them alive), prints "idle: K held" once
//       K of them are up (the target may refuse some), and holds them for
//       SECONDS or until the target closed them all.
//
// Exits 0 when the target behaved, 1 (with a message) when it did not or the
// session could not be driven to the point of the attack.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ferry/ferry.h"

namespace {

using namespace std::chrono_literals;
using ferry::after;

constexpr auto kWait = 10s;
constexpr size_t kSize = 4 << 20;  // large enough that the target's writes are still running when we go

int fail(const std::string& what) {
  std::fprintf(stderr, "bench_hostile_initiator: %s\n", what.c_str());
  return 1;
}

// Control messages go through registered memory, as the bench's do.
struct Control {
  ferry::Connection& c;
  std::vector<char> buf = std::vector<char>(64 * 1024);

  // A reply of the target, or "" when it hung up or said nothing by the deadline.
  std::string reply() {
    auto n = c.recv(buf.data(), buf.size(), after(kWait));
    return n.ok() ? std::string(buf.data(), *n) : std::string();
  }
  bool send(const std::string& text) {
    if (text.size() > buf.size()) return false;
    std::memcpy(buf.data(), text.data(), text.size());
    return c.send(buf.data(), text.size(), after(kWait)).ok();
  }
};

// The target's answer to a configuration it must refuse.
int expect_refusal(Control& ctl, const std::string& config) {
  if (!ctl.send(config)) return fail("the target did not take the configuration message");
  std::string r = ctl.reply();
  if (r.size() == 96 && r.compare(0, 4, "FRYD") == 0) return fail("the target accepted: " + config);
  if (!r.empty() && r.compare(0, 7, "error: ") != 0) return fail("unexpected answer: " + r);
  std::printf("refused: %s\n", r.empty() ? "(hung up)" : r.c_str());
  return 0;
}

// Sessions that only keep their connection alive, to take every slot of the
// target: it must close them itself, long before its per-step timeout.
int hold_idle(const std::string& addr, int count, int seconds) {
  ferry::Options o;
  o.streams = 1;  // stay far below the target's stream limit: slots, not streams, are the point
  auto engine = ferry::Engine::create(o);
  if (!engine.ok()) return fail("engine: " + engine.status().to_string());
  std::vector<std::shared_ptr<ferry::Connection>> held;
  for (int i = 0; i < count; ++i) {
    auto conn = (*engine)->connect(addr, after(kWait));
    if (conn.ok()) held.push_back(*conn);
  }
  std::printf("idle: %zu held\n", held.size());
  std::fflush(stdout);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    size_t open = 0;
    for (auto& c : held) open += c->health().ok() ? 1 : 0;
    if (open == 0) break;
    std::this_thread::sleep_for(100ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    return fail("usage: bench_hostile_initiator ADDR close|config TEXT|descriptors|begin|stall|vanish|idle N S");
  }
  std::string addr = argv[1], attack = argv[2];
  if (attack == "idle") {
    if (argc < 5) return fail("idle needs N and SECONDS");
    return hold_idle(addr, std::atoi(argv[3]), std::atoi(argv[4]));
  }
  auto engine = ferry::Engine::create(ferry::Options());
  if (!engine.ok()) return fail("engine: " + engine.status().to_string());
  auto conn = (*engine)->connect(addr, after(kWait));
  if (!conn.ok()) return fail("connect: " + conn.status().to_string());
  ferry::Connection& c = **conn;
  Control ctl{c};
  auto ctl_region = (*engine)->reg(ctl.buf.data(), ctl.buf.size());
  if (!ctl_region.ok()) return fail("reg: " + ctl_region.status().to_string());

  if (attack == "close") {
    c.close();
    return 0;
  }
  if (attack == "config") {
    if (argc < 4) return fail("config needs its TEXT");
    return expect_refusal(ctl, argv[3]);
  }

  // The other attacks start as an honest session would.
  std::string config = attack == "vanish" ? R"({"op":"write","sizes":[4194304],"iters":1000,"warmup":0,"bidir":true,)"
                                            R"("verify":false,"inflight":4})"
                                          : R"({"op":"send","sizes":[4096],"iters":2,"warmup":0,"bidir":false,)"
                                            R"("verify":false})";
  if (!ctl.send(config)) return fail("send configuration");
  std::string theirs = ctl.reply();
  if (theirs.size() != 96) return fail("the target refused a valid configuration: " + theirs);
  if (attack == "descriptors") {
    ctl.send("not these!");
    std::string r = ctl.reply();  // the target must hang up
    return r.empty() ? 0 : fail("the target went on after bad descriptors: " + r);
  }

  std::vector<uint8_t> memory(2 * kSize);
  auto region = (*engine)->reg(memory.data(), memory.size());
  if (!region.ok()) return fail("reg: " + region.status().to_string());
  auto src = (*engine)->export_region(*region, 0, kSize);
  auto dst = (*engine)->export_region(*region, kSize, kSize);
  if (!src.ok() || !dst.ok()) return fail("export");
  if (!ctl.send(src->serialize() + dst->serialize())) return fail("send descriptors");

  if (attack == "begin") {
    ctl.send("begin 12345");
    std::string r = ctl.reply();
    return r.empty() ? 0 : fail("the target went on after a wrong begin: " + r);
  }
  if (attack == "stall") {
    auto t0 = std::chrono::steady_clock::now();
    while (c.health().ok() && std::chrono::steady_clock::now() - t0 < 30s) std::this_thread::sleep_for(10ms);
    if (c.health().ok()) return fail("the target kept a session that never began for 30 s");
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    std::printf("stall: closed after %lld ms\n", static_cast<long long>(ms));
    return 0;
  }
  if (attack == "vanish") {
    ctl.send("begin " + std::to_string(kSize));
    if (ctl.reply() != "ready") return fail("no ready");
    std::this_thread::sleep_for(50ms);  // the target's reverse writes are under way
    c.close();
    (void)(*engine)->dereg(*region);  // nothing lands in `memory` once this returns
    return 0;
  }
  return fail("unknown attack " + attack);
}
