// ferry_tcp_gpu_peer: the other process of the GPU-over-TCP tests.
//
//   ferry_tcp_gpu_peer --listen ADDR --gpu N --size BYTES
//
// Serves one connection over TCP (FERRY_TRANSPORT=tcp is forced) with BYTES
// of memory on GPU N (host memory for N < 0), exported; prints "ADDR
// host:port" when listening, sends the descriptor first, then obeys text
// commands (each answered with one text message):
//   FILL seed off len    fill [off, off+len) with random bytes from seed -> "ok"
//   HASH off len         -> hex hash of [off, off+len)
//   RECV off cap         receive one message there -> "ok <bytes>" or the code
//   RECVV off len ...    receive one message scattered over the parts
//   SEND off len         send [off, off+len) as a message (before the reply)
//   NOTE                 wait for a notification -> its text
//   QUIT
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "gpu/tcp_gpu_util.h"

using namespace std::chrono_literals;

namespace {

[[noreturn]] void die(const char* what, const ferry::Status& s) {
  std::fprintf(stderr, "tcp_gpu_peer: %s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  int gpu = 0;
  uint64_t size = 1 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--listen") listen = v;
    if (k == "--gpu") gpu = std::atoi(v.c_str());
    if (k == "--size") size = std::strtoull(v.c_str(), nullptr, 10);
  }
  ferry::Options o;
  o.listen = listen;
  o.transport = ferry::TransportChoice::kTcp;
  auto engine = ferry::Engine::create(o);
  if (!engine.ok()) die("engine", engine.status());
  ferry::test::Memory mem(gpu, size);
  if (!mem.ok())
    die("allocate", ferry::Status(ferry::Code::kResourceExhausted, "memory on GPU " + std::to_string(gpu)));
  std::vector<uint8_t> ctl(1 << 20);
  auto ctl_region = (*engine)->reg(ctl.data(), ctl.size());
  auto region = (*engine)->reg(mem.data(), mem.size());
  if (!ctl_region.ok() || !region.ok()) die("reg", region.ok() ? ctl_region.status() : region.status());
  if (region->kind != (gpu >= 0 ? ferry::MemoryKind::kCuda : ferry::MemoryKind::kHost)) {
    die("reg", ferry::Status(ferry::Code::kInternal, "registered with the wrong memory kind"));
  }
  std::printf("ADDR %s\n", (*engine)->address().c_str());
  std::fflush(stdout);
  auto conn = (*engine)->accept(ferry::after(60s));
  if (!conn.ok()) die("accept", conn.status());
  ferry::Connection& c = **conn;
  auto reply = [&](const std::string& t) {
    std::memcpy(ctl.data(), t.data(), t.size());
    ferry::Status s = c.send(ctl.data(), t.size(), ferry::after(60s));
    if (!s.ok()) die("reply", s);
  };
  auto desc = (*engine)->export_region(region.value());
  if (!desc.ok()) die("export", desc.status());
  reply(desc->serialize());
  for (;;) {
    auto n = c.recv(ctl.data(), ctl.size(), ferry::after(300s));
    if (!n.ok()) return n.status().code() == ferry::Code::kPeerLost ? 0 : 1;
    std::istringstream in(std::string(reinterpret_cast<char*>(ctl.data()), n.value()));
    std::string cmd;
    in >> cmd;
    uint64_t a = 0, b = 0, seed = 0;
    if (cmd == "QUIT") break;
    if (cmd == "FILL") {
      in >> seed >> a >> b;
      std::vector<uint8_t> tmp(b);
      ferry::test::fill_random(tmp.data(), b, seed);
      mem.put(a, tmp.data(), b);
      reply("ok");
    } else if (cmd == "HASH") {
      in >> a >> b;
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%016" PRIx64, ferry::test::hash_of(mem, a, b));
      reply(buf);
    } else if (cmd == "RECV" || cmd == "RECVV") {
      std::vector<ferry::MutableBuffer> parts;
      if (cmd == "RECV") {
        in >> a >> b;
        parts.push_back({mem.data() + a, b});
      } else {
        while (in >> a >> b) parts.push_back({mem.data() + a, b});
      }
      auto got = c.recvv(parts, ferry::after(120s));
      reply(got.ok() ? "ok " + std::to_string(got.value()) : std::string(ferry::code_name(got.status().code())));
    } else if (cmd == "SEND") {
      in >> a >> b;
      ferry::Status s = c.send(mem.data() + a, b, ferry::after(120s));
      reply(s.ok() ? "ok" : std::string(ferry::code_name(s.code())));
    } else if (cmd == "NOTE") {
      auto note = c.wait_notification(ferry::after(60s));
      reply(note.ok() ? note.value() : std::string(ferry::code_name(note.status().code())));
    } else {
      reply("unknown command " + cmd);
    }
  }
  c.close();
  return 0;
}
