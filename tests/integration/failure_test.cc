// Bad input and bad peers: each gives a clear status in bounded time, nothing
// lands where it should not, and the engine keeps serving.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cinttypes>

#include "integration/fixture.h"
#include "wire/frame.h"
#include "wire/handshake.h"

namespace ferry::test {
namespace {

// A raw TCP client for sending garbage.
int raw_connect(const std::string& address) {
  auto colon = address.rfind(':');
  struct sockaddr_in sa {};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<struct sockaddr*>(&sa), sizeof(sa)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True if the engine closes `fd` within `within` (read sees EOF or reset).
bool closed_by_engine(int fd, std::chrono::milliseconds within) {
  struct timeval tv = {static_cast<time_t>(within.count() / 1000),
                       static_cast<suseconds_t>((within.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

std::string peer_reply(Connection& c, uint8_t* buf, const std::string& cmd) { return command(c, buf, 1 << 20, cmd); }

TEST(BadInput, UnregisteredDeregisteredAndOutOfRegionMemory) {
  PeerProcess peer({"--listen", "127.0.0.1:0", "--mode", "echo"});
  ASSERT_FALSE(peer.address().empty());
  LocalSide me(1 << 20);
  auto conn = connect_to(*me.engine, peer);
  ASSERT_TRUE(conn);
  std::vector<uint8_t> stray(4096, 1);
  Status s = conn->send(stray.data(), stray.size(), after(5s));
  EXPECT_EQ(s.code(), Code::kNotFound) << s.to_string();
  EXPECT_NE(s.message().find("not inside any registered region"), std::string::npos) << s.message();
  EXPECT_CODE(conn->recv_async(stray.data(), stray.size()).wait(after(5s)), Code::kNotFound);
  // Runs past the end of the registered block.
  s = conn->send(me.at((1 << 20) - 10), 20, after(5s));
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.to_string();
  // Registered, then deregistered.
  std::vector<uint8_t> other(8192, 2);
  auto r = me.engine->reg(other.data(), other.size());
  ASSERT_TRUE(r.ok());
  ASSERT_OK(me.engine->dereg(r.value()));
  EXPECT_CODE(conn->send(other.data(), 100, after(5s)), Code::kNotFound);
  EXPECT_CODE(me.engine->dereg(r.value()), Code::kNotFound);
  EXPECT_CODE(me.engine->reg(nullptr, 10).status(), Code::kInvalidArgument);
  // The connection is untouched by all of that.
  fill_random(me.at(0), 1000, 4);
  Transfer back = conn->recv_async(me.at(4096), 1000);
  ASSERT_OK(conn->send(me.at(0), 1000, after(5s)));
  ASSERT_OK(back.wait(after(5s)));
  EXPECT_EQ(std::memcmp(me.at(0), me.at(4096), 1000), 0);
  EXPECT_TRUE(conn->health().ok());
}

TEST(BadInput, RemoteBoundsKeysAndIdsAreCheckedByTheTarget) {
  const uint64_t size = 1 << 20;
  PeerProcess peer({"--listen", "127.0.0.1:0", "--mode", "target", "--size", std::to_string(size), "--seed", "21"});
  ASSERT_FALSE(peer.address().empty());
  LocalSide me(4 << 20);
  auto conn = connect_to(*me.engine, peer);
  ASSERT_TRUE(conn);
  uint8_t* ctl = me.at(3 << 20);
  auto got_desc = recv_descriptor(*conn, ctl);
  ASSERT_TRUE(got_desc.ok()) << got_desc.status().to_string();
  RemoteDescriptor desc = got_desc.value();
  fill_random(me.at(0), 64 << 10, 8);

  // Caught before anything is sent.
  EXPECT_CODE(conn->write(me.at(0), 20, desc, size - 10, {}, after(5s)), Code::kOutOfRange);
  EXPECT_CODE(conn->read(me.at(0), 20, desc, size, after(5s)), Code::kOutOfRange);
  RemoteDescriptor foreign = desc;
  foreign.engine_id ^= 1;
  EXPECT_CODE(conn->write(me.at(0), 20, foreign, 0, {}, after(5s)), Code::kInvalidArgument);

  // A tampered descriptor gets past the local checks; the target refuses.
  RemoteDescriptor longer = desc;
  longer.length += 1 << 20;
  for (uint64_t len : {uint64_t{100}, uint64_t{200000}}) {  // inline and chunked
    Status s = conn->write(me.at(0), len, longer, size - 50, {}, after(5s));
    EXPECT_EQ(s.code(), Code::kOutOfRange) << s.to_string();
    EXPECT_NE(s.message().find("reports"), std::string::npos) << "should say the peer refused: " << s.message();
    EXPECT_CODE(conn->read(me.at(0), len, longer, size - 50, after(5s)), Code::kOutOfRange);
  }
  RemoteDescriptor wrong_key = desc;
  wrong_key.key ^= 0x5a5a;
  EXPECT_CODE(conn->write(me.at(0), 4096, wrong_key, 0, {}, after(5s)), Code::kPermissionDenied);
  EXPECT_CODE(conn->write(me.at(0), 300000, wrong_key, 0, "note", after(5s)), Code::kPermissionDenied);
  EXPECT_CODE(conn->read(me.at(0), 4096, wrong_key, 0, after(5s)), Code::kPermissionDenied);
  RemoteDescriptor wrong_id = desc;
  wrong_id.export_id += 1000;
  EXPECT_CODE(conn->write(me.at(0), 4096, wrong_id, 0, {}, after(5s)), Code::kNotFound);

  // Nothing landed: the target's memory still holds its seeded bytes.
  std::vector<uint8_t> expect(size);
  fill_random(expect.data(), size, 21);
  std::string cmd = "DUMP 0 " + std::to_string(size);
  std::memcpy(ctl, cmd.data(), cmd.size());
  ASSERT_OK(conn->send(ctl, cmd.size(), after(5s)));
  auto got = conn->recv(me.at(1 << 20), 1 << 20, after(10s));
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got.value(), size);
  EXPECT_EQ(std::memcmp(me.at(1 << 20), expect.data(), size), 0);
  EXPECT_TRUE(conn->health().ok());
}

TEST(BadInput, ReceiveBufferTooSmallFailsBothSides) {
  PeerProcess peer({"--listen", "127.0.0.1:0", "--mode", "target", "--size", std::to_string(2 << 20), "--seed", "1"});
  ASSERT_FALSE(peer.address().empty());
  LocalSide me(4 << 20);
  auto conn = connect_to(*me.engine, peer);
  ASSERT_TRUE(conn);
  uint8_t* ctl = me.at(3 << 20);
  ASSERT_TRUE(conn->recv(ctl, 1 << 20, after(10s)).ok());
  for (uint64_t msg : {uint64_t{1000}, uint64_t{1} << 20}) {  // eager and rendezvous
    std::string cmd = "SMALLRECV 100";
    std::memcpy(ctl, cmd.data(), cmd.size());
    ASSERT_OK(conn->send(ctl, cmd.size(), after(5s)));
    Status s = conn->send(me.at(0), msg, after(5s));
    EXPECT_EQ(s.code(), Code::kBufferTooSmall) << s.to_string();
    auto reply = conn->recv(ctl, 1 << 20, after(5s));
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(std::string(reinterpret_cast<char*>(ctl), reply.value()), "buffer_too_small");
  }
  EXPECT_EQ(peer_reply(*conn, ctl, "DUMP 0 10").size(), 10u);
}

TEST(BadPeer, ConnectToNobodyFailsWithinItsDeadline) {
  LocalSide me(4096);
  // A port nobody listens on.
  int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa {};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(probe, reinterpret_cast<struct sockaddr*>(&sa), sizeof(sa)), 0);
  socklen_t len = sizeof(sa);
  ::getsockname(probe, reinterpret_cast<struct sockaddr*>(&sa), &len);
  std::string addr = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  ::close(probe);
  auto t0 = Clock::now();
  auto c = me.engine->connect(addr, after(2s));
  EXPECT_EQ(c.status().code(), Code::kUnavailable) << c.status().to_string();
  EXPECT_LT(Clock::now() - t0, 2s);
  // A port that accepts TCP but never speaks: the deadline decides.
  int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sa.sin_port = 0;
  ASSERT_EQ(::bind(silent, reinterpret_cast<struct sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(silent, 8), 0);
  len = sizeof(sa);
  ::getsockname(silent, reinterpret_cast<struct sockaddr*>(&sa), &len);
  t0 = Clock::now();
  c = me.engine->connect("127.0.0.1:" + std::to_string(ntohs(sa.sin_port)), after(500ms));
  auto took = Clock::now() - t0;
  EXPECT_EQ(c.status().code(), Code::kDeadlineExceeded) << c.status().to_string();
  EXPECT_GE(took, 450ms);
  EXPECT_LT(took, 1500ms);
  ::close(silent);
  // Malformed addresses are argument errors.
  EXPECT_CODE(me.engine->connect("no-port-here", after(1s)).status(), Code::kInvalidArgument);
  EXPECT_CODE(me.engine->connect("127.0.0.1:99999", after(1s)).status(), Code::kInvalidArgument);
}

TEST(BadPeer, WrongOrMissingSharedSecretIsRefused) {
  PeerProcess peer({"--listen", "127.0.0.1:0", "--mode", "echo"}, {"FERRY_AUTH_TOKEN=correct horse"});
  ASSERT_FALSE(peer.address().empty());
  Options wrong;
  wrong.auth_token = "battery staple";
  LocalSide bad(4096, wrong);
  auto c = bad.engine->connect(peer.address(), after(5s));
  EXPECT_EQ(c.status().code(), Code::kUnauthenticated) << c.status().to_string();
  EXPECT_NE(c.status().message().find("does not match"), std::string::npos) << c.status().message();
  LocalSide none(4096);
  c = none.engine->connect(peer.address(), after(5s));
  EXPECT_EQ(c.status().code(), Code::kUnauthenticated) << c.status().to_string();
  // The right secret still gets in, and data flows.
  Options right;
  right.auth_token = "correct horse";
  LocalSide good(1 << 20, right);
  auto conn = connect_to(*good.engine, peer);
  ASSERT_TRUE(conn);
  fill_random(good.at(0), 5000, 6);
  Transfer back = conn->recv_async(good.at(8192), 5000);
  ASSERT_OK(conn->send(good.at(0), 5000, after(5s)));
  ASSERT_OK(back.wait(after(5s)));
  EXPECT_EQ(std::memcmp(good.at(0), good.at(8192), 5000), 0);
}

TEST(BadPeer, ASecretHereRefusesAPeerThatDoesNotAuthenticate) {
  PeerProcess peer({"--listen", "127.0.0.1:0", "--mode", "echo"});
  ASSERT_FALSE(peer.address().empty());
  Options o;
  o.auth_token = "s3cret";
  LocalSide me(4096, o);
  EXPECT_CODE(me.engine->connect(peer.address(), after(5s)).status(), Code::kUnauthenticated);
}

TEST(BadPeer, GarbageAndTruncatedHandshakesAreDroppedAndServiceGoesOn) {
  Options o;
  o.handshake_timeout = 1000ms;
  LocalSide me(1 << 20, o);
  std::string addr = me.engine->address();
  std::vector<uint8_t> junk(4096);
  fill_random(junk.data(), junk.size(), 99);
  int garbage = raw_connect(addr);
  ASSERT_GE(garbage, 0);
  ASSERT_EQ(::send(garbage, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
  // A real hello cut short, then silence.
  wire::Hello hello;
  hello.engine_id = 42;
  hello.streams = 2;
  hello.host_id = "test";
  wire::EncodedFrame f = wire::encode(hello);
  wire::HeaderBytes hb;
  wire::encode_header(f.header, hb);
  int truncated = raw_connect(addr);
  ASSERT_EQ(::send(truncated, hb.data(), 30, MSG_NOSIGNAL), 30);
  // A whole header promising aux bytes that never come.
  int stalled = raw_connect(addr);
  ASSERT_EQ(::send(stalled, hb.data(), hb.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hb.size()));
  // A data stream naming a connection that does not exist.
  wire::Hello data_hello;
  data_hello.role = wire::StreamRole::kData;
  data_hello.cookie = 12345;
  wire::encode_header(wire::encode(data_hello).header, hb);
  int orphan = raw_connect(addr);
  ASSERT_EQ(::send(orphan, hb.data(), hb.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hb.size()));

  // Meanwhile a real peer connects and works.
  PeerProcess peer({"--dial", addr, "--mode", "echo"});
  EXPECT_EQ(peer.line(), "CONNECTED");
  auto conn = me.engine->accept(after(10s));
  ASSERT_TRUE(conn.ok()) << conn.status().to_string();
  fill_random(me.at(0), 70000, 12);
  Transfer back = (*conn)->recv_async(me.at(100000), 70000);
  ASSERT_OK((*conn)->send(me.at(0), 70000, after(5s)));
  ASSERT_OK(back.wait(after(5s)));
  EXPECT_EQ(std::memcmp(me.at(0), me.at(100000), 70000), 0);

  // Every bad stream was closed by the engine, the stalled ones by the handshake timeout.
  EXPECT_TRUE(closed_by_engine(garbage, 3000ms));
  EXPECT_TRUE(closed_by_engine(orphan, 3000ms));
  EXPECT_TRUE(closed_by_engine(truncated, 3000ms));
  EXPECT_TRUE(closed_by_engine(stalled, 3000ms));
  for (int fd : {garbage, truncated, stalled, orphan}) ::close(fd);
}

// Posts `count` sends of `size` bytes each, all at once.
std::vector<Transfer> flood(Connection& c, uint8_t* src, size_t size, int count) {
  std::vector<Transfer> t;
  for (int i = 0; i < count; ++i) t.push_back(c.send_async(src, size));
  return t;
}

TEST(BadPeer, PeerKilledMidTransferFailsPendingWithinTwoSeconds) {
  LocalSide me(64 << 20);
  std::shared_ptr<Connection> conn;
  {
    PeerProcess peer({"--dial", me.engine->address(), "--mode", "sink"});
    ASSERT_EQ(peer.line(), "CONNECTED");
    auto c = me.engine->accept(after(10s));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    conn = c.value();
    std::vector<Transfer> sends = flood(*conn, me.at(0), 64 << 20, 60);
    Transfer write_pending = conn->notify_async("x");
    std::this_thread::sleep_for(50ms);
    peer.signal(SIGKILL);
    auto killed_at = Clock::now();
    int failed = 0;
    for (auto& t : sends) {
      Status s = t.wait(killed_at + 2s);
      ASSERT_NE(s.code(), Code::kDeadlineExceeded) << "a transfer was still pending 2 s after the peer died";
      if (!s.ok()) {
        EXPECT_EQ(s.code(), Code::kPeerLost) << s.to_string();
        ++failed;
      }
    }
    EXPECT_GT(failed, 0) << "the peer died mid-transfer, some sends must have failed";
    EXPECT_LT(Clock::now() - killed_at, 2s);
    EXPECT_EQ(conn->health().code(), Code::kPeerLost);
    // New operations on the dead connection fail at once.
    EXPECT_CODE(conn->send(me.at(0), 10, after(1s)), Code::kPeerLost);
  }
  // The survivor accepts a new peer and works with it.
  PeerProcess next({"--dial", me.engine->address(), "--mode", "echo"});
  ASSERT_EQ(next.line(), "CONNECTED");
  auto c2 = me.engine->accept(after(10s));
  ASSERT_TRUE(c2.ok()) << c2.status().to_string();
  fill_random(me.at(0), 3 << 20, 13);
  Transfer back = (*c2)->recv_async(me.at(32 << 20), 3 << 20);
  ASSERT_OK((*c2)->send(me.at(0), 3 << 20, after(10s)));
  ASSERT_OK(back.wait(after(10s)));
  EXPECT_EQ(std::memcmp(me.at(0), me.at(32 << 20), 3 << 20), 0);
}

TEST(BadPeer, PeerFrozenFailsAtDeadlineOrHeartbeatTimeoutAndNothingHangs) {
  Options o;
  o.heartbeat_interval = 100ms;
  o.peer_timeout = 1000ms;
  LocalSide me(64 << 20, o);
  PeerProcess peer({"--dial", me.engine->address(), "--mode", "sink"});
  ASSERT_EQ(peer.line(), "CONNECTED");
  auto c = me.engine->accept(after(10s));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto conn = c.value();
  std::vector<Transfer> sends = flood(*conn, me.at(0), 64 << 20, 60);
  std::this_thread::sleep_for(50ms);
  peer.signal(SIGSTOP);
  auto stopped_at = Clock::now();
  // A deadline shorter than the heartbeat timeout comes first...
  EXPECT_CODE(sends.back().wait(after(200ms)), Code::kDeadlineExceeded);
  // ...and then the heartbeat declares the peer lost: every transfer ends.
  for (auto& t : sends) {
    Status s = t.wait(stopped_at + 3s);
    ASSERT_NE(s.code(), Code::kDeadlineExceeded) << "still pending 3 s after the peer froze";
  }
  EXPECT_EQ(sends.back().status().code(), Code::kPeerLost) << sends.back().status().to_string();
  EXPECT_NE(conn->health().message().find("no traffic from the peer"), std::string::npos) << conn->health().to_string();
  auto took = Clock::now() - stopped_at;
  EXPECT_GE(took, 900ms);
  EXPECT_LT(took, 2500ms);
  conn->close();
  peer.signal(SIGCONT);
  EXPECT_EQ(peer.wait_exit(10s), 0) << "the thawed peer should see its connection gone and exit";
}

// The sender gives up on a receiver stopped past peer_timeout and reuses its
// buffer; when the receiver runs again it must not complete the receive with
// the reused bytes (on the local transport the receiver copies from the
// sender's memory itself, and used to finish that copy and succeed).
TEST(BadPeer, ReceiverThawedAfterSenderGaveUpNeverTakesReusedBytes) {
  Options o;
  o.heartbeat_interval = 100ms;
  o.peer_timeout = 1000ms;
  constexpr uint64_t kSize = (32ull << 20) + 4093;
  constexpr uint64_t kOffset = 1 << 20;
  LocalSide me(kOffset + kSize + 4096, o);
  PeerProcess peer({"--dial", me.engine->address(), "--mode", "frozen-recv", "--size", std::to_string(kSize),
                    "--seed", "71"},
                   {"FERRY_PEER_TIMEOUT_MS=1000", "FERRY_HEARTBEAT_MS=100"});
  ASSERT_EQ(peer.line(), "CONNECTED");
  auto c = me.engine->accept(after(10s));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto conn = c.value();
  auto posted = conn->recv(me.at(0), 4096, after(10s));
  ASSERT_TRUE(posted.ok()) << posted.status().to_string();
  ASSERT_EQ(std::string(reinterpret_cast<char*>(me.at(0)), *posted), "POSTED");
  peer.signal(SIGSTOP);
  fill_random(me.at(kOffset), kSize, 71);
  Transfer send = conn->send_async(me.at(kOffset), kSize);
  Status s = send.wait(after(5s));
  EXPECT_EQ(s.code(), Code::kPeerLost) << "the send to a stopped receiver must fail: " << s.to_string();
  // What an application does with a buffer whose send failed: reuse it.
  fill_random(me.at(kOffset), kSize, 72);
  peer.signal(SIGCONT);
  int rc = peer.wait_exit(20s);
  EXPECT_NE(rc, 3) << "the thawed receiver completed its receive with the sender's reused bytes";
  EXPECT_EQ(rc, 0) << "the receive should fail like the send did (exit code " << rc << ")";
  conn->close();
}

}  // namespace
}  // namespace ferry::test
