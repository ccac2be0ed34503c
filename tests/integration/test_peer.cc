// ferry_test_peer: the other process of the integration tests.
//
//   ferry_test_peer (--listen ADDR | --dial ADDR) --mode MODE [--size N] [--seed S]
//
// Prints "ADDR host:port" (listening) or "CONNECTED" (dialed) on stdout once
// ready, then serves one connection:
//   echo    sends every message back; "QUIT" ends
//   sink    receives messages forever (for kill/stop tests)
//   frozen-recv
//           posts one receive of --size bytes, sends "POSTED", and exits 0 if
//           the receive fails, 3 if it completes with bytes other than
//           fill_random(--seed), 4 if it completes with exactly them (the
//           test stops this process and changes the sender's buffer)
//   target  registers --size bytes filled from --seed, exports them, sends the
//           descriptor, then obeys text commands:
//             DUMP off len     send back region[off, off+len)
//             NOTES k          wait for k notifications "off len hash" and
//                              reply "good/k" after checking each range's hash
//             SMALLRECV n      post a receive of n bytes, reply with its status
//             QUIT
// The exit code is 0 when the session ended as the tests expect.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/ferry.h"
#include "integration/test_data.h"

using namespace std::chrono_literals;

namespace {

struct Args {
  std::string listen, dial, mode;
  uint64_t size = 1 << 20;
  uint64_t seed = 1;
};

[[noreturn]] void fail(const char* what, const ferry::Status& s) {
  std::fprintf(stderr, "test_peer: %s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

int serve(ferry::Engine& engine, ferry::Connection& conn, const Args& a) {
  constexpr size_t kCtl = 1 << 20;
  const uint64_t cap = a.mode == "target" ? a.size : ferry::test::kMaxMessage;
  std::vector<uint8_t> mem(kCtl + cap);
  auto region = engine.reg(mem.data(), mem.size());
  if (!region.ok()) fail("reg", region.status());
  // Deregistered before `mem` is freed on the way out: replies to the test's
  // reads may still be on their way, and dereg waits for bytes moving in it.
  struct Dereg {
    ferry::Engine& engine;
    ferry::Region region;
    ~Dereg() { (void)engine.dereg(region); }
  } dereg{engine, region.value()};
  uint8_t* ctl = mem.data();
  uint8_t* data = mem.data() + kCtl;
  auto recv_text = [&]() -> ferry::Result<std::string> {
    auto n = conn.recv(ctl, kCtl, ferry::after(60s));
    if (!n.ok()) return n.status();
    return std::string(reinterpret_cast<char*>(ctl), n.value());
  };
  auto send_bytes = [&](const void* p, size_t n) {
    ferry::Status s = conn.send(p, n, ferry::after(60s));
    if (!s.ok()) fail("send", s);
  };
  auto send_text = [&](const std::string& t) {
    std::memcpy(ctl, t.data(), t.size());
    send_bytes(ctl, t.size());
  };

  if (a.mode == "echo" || a.mode == "sink") {
    for (;;) {
      auto n = conn.recv(data, cap, ferry::after(120s));
      if (!n.ok()) return n.status().code() == ferry::Code::kPeerLost ? 0 : 1;
      if (n.value() == 4 && std::memcmp(data, "QUIT", 4) == 0) return 0;
      if (a.mode == "echo") send_bytes(data, n.value());
    }
  }
  if (a.mode == "frozen-recv") {
    ferry::Transfer t = conn.recv_async(data, a.size);
    // Not waited for: the test may stop this process before the answer comes.
    std::memcpy(ctl, "POSTED", 6);
    ferry::Transfer posted = conn.send_async(ctl, 6);
    ferry::Status s = t.wait(ferry::after(120s));
    std::fprintf(stderr, "test_peer: frozen-recv: %s\n", s.to_string().c_str());
    if (!s.ok()) return 0;
    std::vector<uint8_t> expected(t.bytes());
    ferry::test::fill_random(expected.data(), expected.size(), a.seed);
    return std::memcmp(expected.data(), data, expected.size()) == 0 ? 4 : 3;
  }
  if (a.mode != "target") return 2;

  ferry::test::fill_random(data, a.size, a.seed);
  auto desc = engine.export_region(region.value(), kCtl, a.size);
  if (!desc.ok()) fail("export", desc.status());
  send_text(desc->serialize());
  for (;;) {
    auto cmd = recv_text();
    if (!cmd.ok()) return cmd.status().code() == ferry::Code::kPeerLost ? 0 : 1;
    const std::string& c = cmd.value();
    uint64_t x = 0, y = 0;
    if (c == "QUIT") return 0;
    if (std::sscanf(c.c_str(), "DUMP %" SCNu64 " %" SCNu64, &x, &y) == 2) {
      send_bytes(data + x, y);
    } else if (std::sscanf(c.c_str(), "NOTES %" SCNu64, &x) == 1) {
      uint64_t good = 0;
      for (uint64_t i = 0; i < x; ++i) {
        auto note = conn.wait_notification(ferry::after(30s));
        if (!note.ok()) fail("wait_notification", note.status());
        uint64_t off = 0, len = 0, hash = 0;
        if (std::sscanf(note->c_str(), "%" SCNu64 " %" SCNu64 " %" SCNx64, &off, &len, &hash) == 3 &&
            off + len <= a.size && ferry::test::fnv1a(data + off, len) == hash) {
          ++good;
        }
      }
      send_text(std::to_string(good) + "/" + std::to_string(x));
    } else if (c == "NOTE_THEN_EXIT") {
      // Exit the moment a notification is seen (the engine closes on the way out).
      auto note = conn.wait_notification(ferry::after(30s));
      if (!note.ok()) fail("wait_notification", note.status());
      return 0;
    } else if (std::sscanf(c.c_str(), "SMALLRECV %" SCNu64, &x) == 1) {
      auto n = conn.recv(data, x, ferry::after(30s));
      send_text(std::string(ferry::code_name(n.status().code())));
    } else {
      send_text("unknown command: " + c);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--listen")
      a.listen = v;
    else if (k == "--dial")
      a.dial = v;
    else if (k == "--mode")
      a.mode = v;
    else if (k == "--size")
      a.size = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--seed")
      a.seed = std::strtoull(v.c_str(), nullptr, 10);
    else {
      std::fprintf(stderr, "test_peer: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  ferry::Options o;
  if (!a.listen.empty()) o.listen = a.listen;
  auto engine = ferry::Engine::create(o);
  if (!engine.ok()) fail("engine", engine.status());
  std::shared_ptr<ferry::Connection> conn;
  if (!a.listen.empty()) {
    std::printf("ADDR %s\n", (*engine)->address().c_str());
    std::fflush(stdout);
    auto c = (*engine)->accept(ferry::after(60s));
    if (!c.ok()) fail("accept", c.status());
    conn = c.value();
  } else {
    auto c = (*engine)->connect(a.dial, ferry::after(10s));
    if (!c.ok()) fail("connect", c.status());
    conn = c.value();
    std::printf("CONNECTED\n");
    std::fflush(stdout);
  }
  int rc = serve(**engine, *conn, a);
  conn->close();
  return rc;
}
