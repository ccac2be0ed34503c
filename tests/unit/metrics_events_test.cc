// The engine's rare-event metrics: handshakes refused by reason, data paths
// lost, and the bytes held for peers; each test makes the event happen for
// real and fails if its counting is taken out.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"
#include "hostile_peer.h"
#include "testing/random_data.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// Polls `pred` on `e`'s metrics until it holds or 10 s pass.
template <class Pred>
bool metrics_reach(const Engine& e, Pred pred) {
  for (auto end = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < end;) {
    if (pred(e.metrics())) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred(e.metrics());
}

TEST(MetricsEvents, HandshakesRefusedAreCountedByReason) {
  Options o;
  o.auth_token = "the right secret";
  auto target = Engine::create(o);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  Options wrong;
  wrong.auth_token = "a wrong secret";
  auto other = Engine::create(wrong);
  ASSERT_TRUE(other.ok());
  for (int i = 0; i < 3; ++i) {
    auto c = (*other)->connect((*target)->address(), after(5s));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), Code::kUnauthenticated) << c.status().to_string();
  }
  EXPECT_TRUE(metrics_reach(**target, [](const MetricsSnapshot& m) {
    auto it = m.handshakes_refused.find("unauthenticated");
    return it != m.handshakes_refused.end() && it->second == 3;
  })) << "refused handshakes not counted";
  std::string text = prometheus_text((*target)->metrics());
  EXPECT_NE(text.find("ferry_handshakes_refused_total{reason=\"unauthenticated\"} 3\n"), std::string::npos) << text;
}

TEST(MetricsEvents, StreamsClosedUnreadPastMaxHandshakesAreCountedBusy) {
  Options o;
  o.max_handshakes = 2;  // one an address group
  auto target = Engine::create(o);
  ASSERT_TRUE(target.ok());
  auto hp = platform::parse_host_port((*target)->address()).value();
  // Streams that send nothing: the first holds the group's one handshake,
  // the rest wait parked and are closed unread.
  std::vector<platform::Socket> silent;
  for (int i = 0; i < 12; ++i) {
    auto s = platform::connect_tcp(hp, after(5s));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    silent.push_back(std::move(s).value());
  }
  EXPECT_TRUE(metrics_reach(**target, [](const MetricsSnapshot& m) {
    auto it = m.handshakes_refused.find("busy");
    return it != m.handshakes_refused.end() && it->second >= 1;
  })) << "streams closed unread not counted";
}

TEST(MetricsEvents, ADataPathResetByThePeerIsCountedLost) {
  auto target = Engine::create(Options{});
  ASSERT_TRUE(target.ok());
  hostile::Peer peer;
  ASSERT_TRUE(peer.dial((*target)->address(), 3).ok());
  auto conn = (*target)->accept(after(5s));
  ASSERT_TRUE(conn.ok()) << conn.status().to_string();
  EXPECT_EQ((*target)->metrics().paths_lost.count("tcp"), 0u);
  // A reset, not an orderly close: the peer's end goes with SO_LINGER 0.
  linger hard{1, 0};
  ASSERT_EQ(::setsockopt(peer.data[1].fd(), SOL_SOCKET, SO_LINGER, &hard, sizeof(hard)), 0);
  peer.data[1].reset();
  EXPECT_TRUE(metrics_reach(**target, [](const MetricsSnapshot& m) {
    auto it = m.paths_lost.find("tcp");
    return it != m.paths_lost.end() && it->second == 1;
  })) << "a lost path not counted";
  // An orderly close of the rest is no loss.
  peer.hang_up();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ((*target)->metrics().paths_lost.at("tcp"), 1u);
}

TEST(MetricsEvents, BytesHeldForAPeerAreShownAndGivenBack) {
  EnginePair p = connect_pair("tcp");
  std::vector<uint8_t> msg(50'001);  // inline (under inline_max): it travels before a receive is posted
  testing::fill_random_bytes(msg.data(), msg.size(), /*seed=*/3);
  ASSERT_TRUE(p.a->reg(msg.data(), msg.size()).ok());
  // No receive is posted: b holds the message for a (the send completes
  // once it is received).
  Transfer sent = p.ca->send_async(msg.data(), msg.size());
  EXPECT_TRUE(metrics_reach(*p.b, [&](const MetricsSnapshot& m) { return m.held_bytes >= msg.size(); }))
      << "held: " << p.b->metrics().held_bytes;
  std::vector<uint8_t> got(msg.size());
  ASSERT_TRUE(p.b->reg(got.data(), got.size()).ok());
  ASSERT_TRUE(p.cb->recv_async(got.data(), got.size()).wait(after(10s)).ok());
  ASSERT_TRUE(sent.wait(after(10s)).ok());
  EXPECT_EQ(got, msg);
  MetricsSnapshot m = p.b->metrics();
  EXPECT_EQ(m.held_bytes, 0u);
  EXPECT_GE(m.held_bytes_peak, msg.size());
}

// Each connection's transfers show under its peer's address, on both ends
// and both transports, with the exact bytes moved; two peers are told apart,
// and a closed connection's series leave with it.
TEST(MetricsEvents, TransfersAreCountedByPeer) {
  for (const char* transport : {"tcp", "local"}) {
    SCOPED_TRACE(transport);
    EnginePair one = connect_pair(transport);
    ASSERT_TRUE(one.ca && one.cb);
    // A second peer of the same target: a third engine connecting to one.b.
    Options o;
    o.transport = parse_transport(transport).value();
    o.local_same_process = true;
    auto other = Engine::create(o).value();
    std::shared_ptr<Connection> theirs;
    std::thread t([&] {
      auto c = one.b->accept(after(10s));
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      theirs = std::move(c).value();
    });
    auto mine = other->connect(one.b->address(), after(10s));
    t.join();
    ASSERT_TRUE(mine.ok() && theirs) << mine.status().to_string();

    // Odd sizes, random bytes, from each peer to the target.
    const size_t sizes[2] = {70'001, 3'000'017};
    std::shared_ptr<Connection> from[2] = {one.ca, *mine}, at[2] = {one.cb, theirs};
    for (int i = 0; i < 2; ++i) {
      std::vector<uint8_t> out(sizes[i]), in(sizes[i] + 5);
      testing::fill_random_bytes(out.data(), out.size(), /*seed=*/40 + i);
      ASSERT_TRUE((i == 0 ? one.a : other)->reg(out.data(), out.size()).ok());
      ASSERT_TRUE(one.b->reg(in.data(), in.size()).ok());
      Transfer r = at[i]->recv_async(in.data() + 5, sizes[i]);
      ASSERT_TRUE(from[i]->send(out.data(), out.size(), after(20s)).ok());
      ASSERT_TRUE(r.wait(after(20s)).ok());
      ASSERT_TRUE(std::equal(out.begin(), out.end(), in.begin() + 5));
    }
    MetricsSnapshot target = one.b->metrics();
    for (int i = 0; i < 2; ++i) {
      auto it = target.peers.find({at[i]->peer_address(), "recv"});
      ASSERT_NE(it, target.peers.end()) << "no recv series for " << at[i]->peer_address();
      EXPECT_EQ(it->second.succeeded, 1u);
      EXPECT_EQ(it->second.failed, 0u);
      EXPECT_EQ(it->second.bytes, sizes[i]);
      EXPECT_EQ(target.peers.count({at[i]->peer_address(), "send"}), 0u);
    }
    MetricsSnapshot sender = other->metrics();
    ASSERT_EQ(sender.peers.count({(*mine)->peer_address(), "send"}), 1u);
    EXPECT_EQ(sender.peers.at({(*mine)->peer_address(), "send"}).bytes, sizes[1]);
    std::string text = prometheus_text(target);
    EXPECT_NE(text.find("ferry_peer_transfer_bytes_total{peer=\"" + theirs->peer_address() + "\",op=\"recv\"} " +
                        std::to_string(sizes[1])),
              std::string::npos)
        << text;

    // The second peer's connection ends: its series go, the first's stay.
    const std::string gone = theirs->peer_address();
    (*mine)->close();
    theirs->close();
    theirs.reset();
    at[1].reset();
    from[1].reset();
    mine = Result<std::shared_ptr<Connection>>(Status(Code::kCancelled, "closed"));
    other.reset();
    EXPECT_TRUE(metrics_reach(*one.b, [&](const MetricsSnapshot& m) { return m.peers.count({gone, "recv"}) == 0; }));
    EXPECT_EQ(one.b->metrics().peers.count({one.cb->peer_address(), "recv"}), 1u);
  }
}

// What the TCP data streams carried, by local NIC and direction: a bulk
// write's bytes exactly, sent on one end and received on the other ("any":
// the streams of an engine that names no NIC).
TEST(MetricsEvents, DataStreamBytesAreCountedByNic) {
  EnginePair p = connect_pair("tcp");
  ASSERT_TRUE(p.ca && p.cb);
  std::vector<uint8_t> src(5'000'011), dst(src.size());
  testing::fill_random_bytes(src.data(), src.size(), /*seed=*/9);
  ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
  auto region = p.b->reg(dst.data(), dst.size());
  ASSERT_TRUE(region.ok());
  auto desc = p.b->export_region(*region);
  ASSERT_TRUE(desc.ok());
  ASSERT_TRUE(p.ca->write(src.data(), src.size(), *desc, 0, {}, after(20s)).ok());
  EXPECT_EQ(src, dst);
  // The writer's last chunk is counted once its worker is back from the
  // socket, which may be just after the write finished.
  auto sent = [&](const MetricsSnapshot& m) { return m.nics.count("any") ? m.nics.at("any").sent : 0; };
  EXPECT_TRUE(metrics_reach(*p.a, [&](const MetricsSnapshot& m) { return sent(m) >= src.size(); }));
  MetricsSnapshot a = p.a->metrics(), b = p.b->metrics();
  ASSERT_EQ(a.nics.count("any"), 1u);
  ASSERT_EQ(b.nics.count("any"), 1u);
  EXPECT_EQ(a.nics.at("any").sent, src.size());
  EXPECT_EQ(b.nics.at("any").received, src.size());
  EXPECT_EQ(b.nics.at("any").sent, 0u);
  EXPECT_NE(prometheus_text(b).find("ferry_nic_bytes_total{nic=\"any\",direction=\"received\"} " +
                                    std::to_string(src.size())),
            std::string::npos);
}

}  // namespace
}  // namespace ferry
