// A TCP engine facing a hand-made peer that speaks the handshake and then
// misbehaves on the control stream: what it sends is refused with a clear
// error, and nothing the engine's application waits on is left pending.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <thread>
#include <vector>

#include "ferry/ferry.h"
#include "platform/socket.h"
#include "transport/tcp/handshake_io.h"
#include "wire/handshake.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// Connects as an engine would (one data stream, no secret); then frames.
struct HandMadePeer {
  platform::Socket ctl, data;

  bool dial(const std::string& address) {
    auto hp = platform::parse_host_port(address);
    if (!hp.ok()) return false;
    Deadline d = after(5s);
    auto c = platform::connect_tcp(hp.value(), d);
    if (!c.ok()) return false;
    ctl = std::move(c).value();
    wire::Hello hello;
    hello.engine_id = 0x1234;
    hello.host_id = "hand-made-peer";
    if (!tcp::write_handshake_frame(ctl.fd(), wire::encode(hello), d).ok()) return false;
    if (!tcp::read_handshake_frame(ctl.fd(), d).ok()) return false;  // WELCOME
    wire::Auth auth;
    auth.streams = 1;
    if (!tcp::write_handshake_frame(ctl.fd(), wire::encode(auth), d).ok()) return false;
    auto f = tcp::read_handshake_frame(ctl.fd(), d);
    if (!f.ok()) return false;
    auto accepted = wire::decode_accepted(f->header, f->aux);
    if (!accepted.ok()) return false;
    auto s = platform::connect_tcp(hp.value(), d);
    if (!s.ok()) return false;
    data = std::move(s).value();
    wire::Hello stream;
    stream.role = wire::StreamRole::kData;
    stream.cookie = accepted->cookie;
    stream.stream_index = 0;
    if (!tcp::write_handshake_frame(data.fd(), wire::encode(stream), d).ok()) return false;
    auto ready = tcp::read_handshake_frame(ctl.fd(), d);
    return ready.ok() && ready->header.type == wire::FrameType::kReady;
  }

  bool frame(const wire::FrameHeader& h, const void* payload = nullptr, size_t n = 0) {
    wire::HeaderBytes hb;
    wire::encode_header(h, hb);
    if (::send(ctl.fd(), hb.data(), hb.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hb.size())) return false;
    return n == 0 || ::send(ctl.fd(), payload, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
};

struct Target {
  std::unique_ptr<Engine> engine;
  std::shared_ptr<Connection> conn;
  HandMadePeer peer;

  void open() {
    Options o;
    o.transport = "tcp";
    o.listen = "127.0.0.1:0";
    engine = Engine::create(o).value();
    ASSERT_TRUE(peer.dial(engine->address()));
    auto c = engine->accept(after(5s));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    conn = std::move(c).value();
  }
};

// A connector of another protocol version (an engine built before
// notifications carried sequence numbers) is turned away at the handshake
// with a reason that names both versions, and no connection is accepted.
TEST(TcpPeerGarbage, AnotherProtocolVersionIsRefusedAtTheHandshake) {
  Options o;
  o.transport = "tcp";
  o.listen = "127.0.0.1:0";
  auto engine = Engine::create(o).value();
  auto hp = platform::parse_host_port(engine->address());
  ASSERT_TRUE(hp.ok());
  Deadline d = after(5s);
  auto c = platform::connect_tcp(hp.value(), d);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  wire::Hello hello;
  hello.version = wire::kProtocolVersion - 1;
  hello.engine_id = 0x1234;
  hello.host_id = "older-peer";
  ASSERT_TRUE(tcp::write_handshake_frame(c->fd(), wire::encode(hello), d).ok());
  auto f = tcp::read_handshake_frame(c->fd(), d);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto rejected = wire::decode_rejected(f->header, f->aux);
  ASSERT_TRUE(rejected.ok()) << "expected REJECTED, got frame type " << static_cast<int>(f->header.type);
  EXPECT_EQ(rejected->code, Code::kUnimplemented);
  EXPECT_NE(rejected->message.find("version " + std::to_string(wire::kProtocolVersion)), std::string::npos)
      << rejected->message;
  EXPECT_NE(rejected->message.find(std::to_string(wire::kProtocolVersion - 1)), std::string::npos)
      << rejected->message;
  EXPECT_FALSE(engine->accept(after(200ms)).ok());
}

// An inline message header larger than any engine sends inline would have
// the engine allocate up to the frame limit before a byte arrived: refused.
TEST(TcpPeerGarbage, AnInlineMessageLargerThanAnyEngineSendsFailsTheConnection) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  wire::FrameHeader h;
  h.type = wire::FrameType::kEager;
  h.id = 1;
  h.a = h.payload_len = 1u << 30;
  ASSERT_TRUE(t.peer.frame(h));
  auto until = after(5s);
  while (t.conn->health().ok() && Clock::now() < until) std::this_thread::sleep_for(5ms);
  Status health = t.conn->health();
  EXPECT_EQ(health.code(), Code::kDataLoss) << health.to_string();
  EXPECT_NE(health.message().find("inline"), std::string::npos) << health.to_string();
}

// A receive matched by an inline message whose sender dies mid-payload ends
// with the connection's failure instead of waiting forever.
TEST(TcpPeerGarbage, AReceiveWhoseInlineMessageBreaksOffFails) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  std::vector<uint8_t> buf(1 << 20);
  ASSERT_TRUE(t.engine->reg(buf.data(), buf.size()).ok());
  Transfer r = t.conn->recv_async(buf.data(), buf.size());
  wire::FrameHeader h;
  h.type = wire::FrameType::kEager;
  h.id = 1;
  h.a = h.payload_len = 60000;
  char part[100] = {};
  ASSERT_TRUE(t.peer.frame(h, part, sizeof part));  // 100 of 60,000 bytes, then gone
  t.peer.ctl.reset();
  t.peer.data.reset();
  Status s = r.wait(after(10s));
  EXPECT_NE(s.code(), Code::kDeadlineExceeded) << "the receive was left pending";
  EXPECT_FALSE(s.ok());
}

// A write the sender aborted (its source deregistered) while other chunks of
// it were still on their way: those chunks are dropped, not landed in an
// entry for a write that can never complete.
TEST(TcpPeerGarbage, ChunksOfAnAbortedWriteThatArriveLateAreDropped) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  std::vector<uint8_t> mem(8192, 0);
  Region r = t.engine->reg(mem.data(), mem.size()).value();
  auto desc = t.engine->export_region(r, 0, 0).value();
  wire::FrameHeader h;
  h.type = wire::FrameType::kWrite;
  h.id = 7;
  h.a = desc.export_id;
  h.b = desc.key;
  h.d = 8192;
  h.flags = 2;  // aborted: no payload
  ASSERT_TRUE(t.peer.frame(h));
  std::vector<uint8_t> late(4096, 0x77);
  h.flags = 0;
  h.c = 4096;
  h.payload_len = static_cast<uint32_t>(late.size());
  ASSERT_TRUE(t.peer.frame(h, late.data(), late.size()));
  // A notification after them shows both frames were read.
  wire::FrameHeader n;
  n.type = wire::FrameType::kNotify;
  n.e = 1;
  const char text[] = "after";
  n.aux_len = sizeof text - 1;
  ASSERT_TRUE(t.peer.frame(n, text, sizeof text - 1));
  auto note = t.conn->wait_notification(after(5s));
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(note.value(), "after");
  EXPECT_EQ(mem[4096], 0) << "a chunk of the aborted write landed";
  EXPECT_TRUE(t.conn->health().ok());
}

}  // namespace
}  // namespace ferry
