// An idle TCP connection costs no frames (protocol 6): with nothing in flight
// neither side heartbeats nor counts the other's silence, so a target holding
// a thousand idle peers spends nothing on them. Once something waits on the
// peer, heartbeats that ask for an answer go out and silence past
// peer_timeout fails the connection as before. A peer asking for answers
// faster than half a heartbeat interval gets no more of them. (Peers of
// protocol 5, which heartbeat all the time, are refused since 7.)
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "hostile_peer.h"

namespace ferry::hostile {
namespace {

constexpr auto kInterval = 20ms;
constexpr auto kPeerTimeout = 400ms;

Options quick_options() {
  Options o = Target::options();
  o.heartbeat_interval = kInterval;
  o.peer_timeout = kPeerTimeout;
  return o;
}

// Every control frame the engine sends within `window`, by type, the
// heartbeats' flags kept.
struct Heard {
  int heartbeats = 0;
  int asking = 0;  // heartbeats with kHeartbeatWantsAnswer
  int others = 0;
};

Heard listen(Peer& p, std::chrono::milliseconds window) {
  Heard h;
  const Deadline end = after(window);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) return h;
    pollfd q{p.ctl.fd(), POLLIN, 0};
    if (::poll(&q, 1, static_cast<int>(left)) <= 0) continue;
    wire::HeaderBytes hb;
    if (!platform::recv_exact(p.ctl.fd(), hb.data(), hb.size()).ok()) return h;
    auto f = wire::decode_header(hb.data(), hb.size());
    if (!f.ok()) return h;
    std::vector<char> rest(f->aux_len + f->payload_len);
    if (!rest.empty() && !platform::recv_exact(p.ctl.fd(), rest.data(), rest.size()).ok()) return h;
    if (f->type == wire::FrameType::kHeartbeat) {
      ++h.heartbeats;
      h.asking += (f->flags & wire::kHeartbeatWantsAnswer) != 0 ? 1 : 0;
    } else {
      ++h.others;
    }
  }
}

void ask(Peer& p) {
  wire::FrameHeader hb;
  hb.type = wire::FrameType::kHeartbeat;
  hb.flags = wire::kHeartbeatWantsAnswer;
  ASSERT_TRUE(p.frame(hb));
}

// Nothing in flight: no frame for many heartbeat intervals, and a peer that
// says nothing for longer than peer_timeout is not declared lost.
TEST(TcpQuietIdle, AnIdleConnectionSendsNothingAndDoesNotCountSilence) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(quick_options()));
  Heard h = listen(t.peer, 3 * kPeerTimeout);
  EXPECT_EQ(h.heartbeats, 0) << "an idle connection heartbeat";
  EXPECT_EQ(h.others, 0);
  EXPECT_TRUE(t.conn->health().ok()) << t.conn->health().to_string();
}

// A heartbeat that asks is answered, and a flood of them gets at most one
// answer per half interval.
TEST(TcpQuietIdle, AHeartbeatThatAsksIsAnsweredAndAFloodGetsFewAnswers) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(quick_options()));
  ASSERT_NO_FATAL_FAILURE(ask(t.peer));
  Heard one = listen(t.peer, 200ms);
  EXPECT_EQ(one.heartbeats, 1);
  EXPECT_EQ(one.asking, 0) << "an idle engine's answer asks for nothing back";
  int asked = 0;
  std::thread flood([&] {
    wire::FrameHeader hb;
    hb.type = wire::FrameType::kHeartbeat;
    hb.flags = wire::kHeartbeatWantsAnswer;
    const Deadline end = after(500ms);
    while (Clock::now() < end && t.peer.frame(hb)) ++asked;
  });
  Heard many = listen(t.peer, 700ms);
  flood.join();
  // Asks read within the 700 ms listened to: one answer per 10 ms at most.
  constexpr int kMost = 700 / 10 + 2;
  EXPECT_GE(many.heartbeats, 1);
  EXPECT_LE(many.heartbeats, kMost) << "answers were not limited (" << asked << " asked)";
  EXPECT_GT(asked, 4 * kMost) << "the flood was too thin to tell";
  EXPECT_TRUE(t.conn->health().ok()) << t.conn->health().to_string();
}

// Something waits on a silent peer (a posted receive): heartbeats that ask
// go out, and with none answered the connection fails within about
// peer_timeout of the post, not of the last frame heard long before.
TEST(TcpQuietIdle, ASilentPeerIsLostWithinPeerTimeoutOnceSomethingWaitsOnIt) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(quick_options()));
  Heard idle = listen(t.peer, 2 * kPeerTimeout);
  ASSERT_EQ(idle.heartbeats, 0);
  std::vector<char> buf(4096);
  ASSERT_TRUE(t.engine->reg(buf.data(), buf.size()).ok());
  const auto posted = Clock::now();
  Transfer r = t.conn->recv_async(buf.data(), buf.size());
  Heard waiting = listen(t.peer, kPeerTimeout / 2);
  EXPECT_GE(waiting.asking, 3) << "nothing asked the silent peer while a receive waited on it";
  Status s = r.wait(after(5s));
  const double took = std::chrono::duration<double>(Clock::now() - posted).count();
  EXPECT_EQ(s.code(), Code::kPeerLost) << s.to_string();
  EXPECT_NE(s.message().find("no traffic from the peer"), std::string::npos) << s.to_string();
  EXPECT_GE(took, 0.35) << "the silence before the post was counted";
  EXPECT_LT(took, 1.5);
}

// A peer that answers keeps a waiting connection up past peer_timeout.
TEST(TcpQuietIdle, APeerThatAnswersKeepsAWaitingConnectionUp) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(quick_options()));
  std::vector<char> buf(4096);
  ASSERT_TRUE(t.engine->reg(buf.data(), buf.size()).ok());
  Transfer r = t.conn->recv_async(buf.data(), buf.size());
  const Deadline end = after(3 * kPeerTimeout);
  int answered = 0;
  while (Clock::now() < end) {
    Heard h = listen(t.peer, kInterval);
    for (int i = 0; i < h.asking; ++i) {
      wire::FrameHeader hb;
      hb.type = wire::FrameType::kHeartbeat;
      ASSERT_TRUE(t.peer.frame(hb));
      ++answered;
    }
  }
  EXPECT_GE(answered, 10);
  EXPECT_TRUE(t.conn->health().ok()) << t.conn->health().to_string();
  EXPECT_FALSE(r.test()) << "the receive ended though nothing was sent";
}

// The kernel's timer on the engine's end of the control stream (its row of
// /proc/net/tcp, found by the peer's local port): "tr" (2: keepalive) and
// "tm->when" in clock ticks. {-1, -1} when the row is not found.
std::pair<int, long> control_stream_timer(const Peer& p) {
  sockaddr_in mine{};
  socklen_t len = sizeof(mine);
  if (::getsockname(p.ctl.fd(), reinterpret_cast<sockaddr*>(&mine), &len) != 0) return {-1, -1};
  char want[16];
  std::snprintf(want, sizeof want, ":%04X", ntohs(mine.sin_port));
  FILE* f = std::fopen("/proc/net/tcp", "r");
  if (f == nullptr) return {-1, -1};
  char line[512];
  std::pair<int, long> found{-1, -1};
  while (std::fgets(line, sizeof line, f) != nullptr) {
    char local[64], remote[64];
    unsigned state = 0, timer = 0;
    unsigned long when = 0;
    if (std::sscanf(line, " %*d: %63s %63s %x %*s %x:%lx", local, remote, &state, &timer, &when) != 5) continue;
    std::string r(remote);
    if (r.size() >= 5 && r.substr(r.size() - 5) == want) found = {static_cast<int>(timer), static_cast<long>(when)};
  }
  std::fclose(f);
  return found;
}

// A quiet connection's control stream has the kernel's keepalive armed
// after about peer_timeout (one second, its whole seconds rounded up).
TEST(TcpQuietIdle, AQuietConnectionsControlStreamHasKeepaliveArmed) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(quick_options()));
  auto [timer, when] = control_stream_timer(t.peer);
  ASSERT_NE(timer, -1) << "the engine's end of the control stream is not in /proc/net/tcp";
  EXPECT_EQ(timer, 2) << "no keepalive timer on a quiet connection's control stream";
  EXPECT_LE(when, ::sysconf(_SC_CLK_TCK)) << "the first probe is later than peer_timeout rounded up to a second";
}

// Two engines: an idle connection stays up past peer_timeout many times
// over with no traffic, and then moves bytes at once.
TEST(TcpQuietIdle, TwoEnginesIdleLongerThanPeerTimeoutThenTransfer) {
  auto a = Engine::create(quick_options());
  auto b = Engine::create(quick_options());
  ASSERT_TRUE(a.ok() && b.ok());
  auto out = (*a)->connect((*b)->address(), after(5s));
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto in = (*b)->accept(after(5s));
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  std::this_thread::sleep_for(4 * kPeerTimeout);
  EXPECT_TRUE((*out)->health().ok()) << (*out)->health().to_string();
  EXPECT_TRUE((*in)->health().ok()) << (*in)->health().to_string();
  std::vector<char> src(100'003), dst(100'003);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 131 + 7);
  ASSERT_TRUE((*a)->reg(src.data(), src.size()).ok());
  ASSERT_TRUE((*b)->reg(dst.data(), dst.size()).ok());
  Transfer r = (*in)->recv_async(dst.data(), dst.size());
  ASSERT_TRUE((*out)->send(src.data(), src.size(), after(5s)).ok());
  ASSERT_TRUE(r.wait(after(5s)).ok());
  EXPECT_EQ(src, dst);
}

}  // namespace
}  // namespace ferry::hostile
