// What a local connection costs, and gives back, when its peer stops
// playing its part (issue 51): a peer that leaves its channel unread costs
// the engine no core while messages wait for room, and its hang-up is seen
// at once; a connection that failed after a large copy keeps no copy helper
// thread, although the application still holds it. The peers are made by
// hand (raw_local_peer.h), so they can stop reading when no engine would.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/ferry.h"
#include "process_holdings.h"
#include "raw_local_peer.h"
#include "transport/local/copy_pool.h"
#include "transport/local/shared_span.h"
#include "wire/frame.h"

namespace ferry::local {
namespace {

using namespace std::chrono_literals;
using ferry::testing::threads_named;

// CPU time this process has used so far, all its threads.
std::chrono::microseconds cpu_used() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto us = [](const timeval& t) { return std::chrono::seconds(t.tv_sec) + std::chrono::microseconds(t.tv_usec); };
  return us(u.ru_utime) + us(u.ru_stime);
}

long long ms(Clock::duration d) {
  return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

// A peer that never reads its channel while the application sends more
// than its ring holds: the rest waits in the outbox, and the progress thread
// waits for room without burning a core (it polled for it without a pause:
// a whole core until peer_timeout). When the peer then hangs up, the
// connection fails at once, not at peer_timeout.
TEST(LocalStuckPeer, APeerThatStopsReadingCostsNoCoreAndItsHangUpIsSeenAtOnce) {
  Options o;
  o.transport = TransportChoice::kLocal;
  o.peer_timeout = 30s;
  auto target = Engine::create(o).value();
  std::vector<char> buf(o.inline_max, 'x');
  ASSERT_TRUE(target->reg(buf.data(), buf.size()).ok());
  RawLocalPeer peer;
  ASSERT_TRUE(peer.dial(target->address(), after(5s)).ok());
  auto c = target->accept(after(5s)).value();

  // The peer's ring (4 MiB) holds about 63 of these inline messages.
  std::vector<Transfer> sends;
  for (int i = 0; i < 100; ++i) sends.push_back(c->send_async(buf.data(), buf.size()));
  // Past the progress thread's spin windows (20 ms at most).
  std::this_thread::sleep_for(100ms);
  const auto cpu_before = cpu_used();
  const auto start = Clock::now();
  std::this_thread::sleep_for(1500ms);
  const auto cpu = cpu_used() - cpu_before;
  const auto wall = Clock::now() - start;
  std::printf("a full ring, messages waiting: %lld ms of CPU in %lld ms\n", ms(cpu), ms(wall));
  // A spinning thread takes a core (about 1,500 ms here, half that on a
  // busy two-core machine); waiting costs a few ms.
  EXPECT_LT(cpu, 250ms) << "the engine burnt CPU while its peer left the channel unread";
  ASSERT_TRUE(c->health().ok()) << c->health().to_string();

  peer.hang_up();
  const auto hung_up = Clock::now();
  EXPECT_TRUE(eventually([&] { return !c->health().ok(); }, hung_up + 2s))
      << "a peer that hung up with its ring full was not noticed within 2 s (peer_timeout "
      << o.peer_timeout.count() << " ms)";
  std::printf("hang-up with a full ring seen after %lld ms\n", ms(Clock::now() - hung_up));
  EXPECT_EQ(c->health().code(), Code::kPeerLost) << c->health().to_string();
  for (Transfer& t : sends) {
    Status s = t.wait(after(5s));
    ASSERT_NE(s.code(), Code::kDeadlineExceeded) << "a send never ended";
  }
}

// A large host copy into the peer's memory runs on the engine's copy
// helpers (ferry-lcopy-<i>, started with its first local connection and
// shared by all of them); once the peer hangs up, the failed connection the
// application still holds starts no more of them, and every operation on it
// gives the failure's reason.
TEST(LocalStuckPeer, AFailedConnectionTheApplicationHoldsStartsNoCopyHelper) {
  auto helpers = [] {
    return threads_named([](const std::string& name) { return name.rfind("ferry-lcopy-", 0) == 0; });
  };
  Options o;
  o.transport = TransportChoice::kLocal;
  o.peer_timeout = 30s;
  auto target = Engine::create(o).value();
  const size_t size = 32u << 20;
  std::vector<uint8_t> src(size), dst(size);
  for (size_t i = 0; i < size; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  ASSERT_TRUE(target->reg(src.data(), src.size()).ok());
  RawLocalPeer peer;
  ASSERT_TRUE(peer.dial(target->address(), after(5s)).ok());
  auto c = target->accept(after(5s)).value();
  EXPECT_LE(helpers(), CopyPool::kMaxHelpers) << "more copy helpers than an engine has";

  // The send's RTS, answered by a CTS that describes the peer's memory: the
  // engine copies into it, on its helpers.
  Transfer send = c->send_async(src.data(), size);
  std::string body;
  auto rts = peer.next(body, after(5s));
  ASSERT_TRUE(rts.ok()) << rts.status().to_string();
  ASSERT_EQ(rts->type, wire::FrameType::kLocalRts);
  SharedSpan span;
  span.address = reinterpret_cast<uint64_t>(dst.data());
  span.length = size;
  std::string spans;
  encode_spans({span}, spans);
  wire::FrameHeader cts;
  cts.type = wire::FrameType::kLocalCts;
  cts.id = rts->id;
  cts.a = 77;
  ASSERT_TRUE(peer.post(cts, {}, spans));
  Status sent = send.wait(after(10s));
  ASSERT_TRUE(sent.ok()) << sent.to_string();
  EXPECT_EQ(src, dst);
  auto done = peer.next(body, after(5s));
  ASSERT_TRUE(done.ok()) << done.status().to_string();
  EXPECT_EQ(done->type, wire::FrameType::kLocalDone);
  EXPECT_EQ(done->id, 77u);
  const size_t started = helpers();
  EXPECT_GT(started, 0u) << "the copy started no helper: this test proves nothing";

  EXPECT_LE(started, CopyPool::kMaxHelpers) << "more copy helpers than an engine has";

  peer.hang_up();
  const auto hung_up = Clock::now();
  ASSERT_TRUE(eventually([&] { return !c->health().ok(); }, hung_up + 2s)) << "the hang-up was not noticed";

  const Status why = c->health();
  ASSERT_EQ(why.code(), Code::kPeerLost) << why.to_string();
  EXPECT_NE(why.message().find("local connection"), std::string::npos) << why.to_string();
  EXPECT_EQ(c->send(src.data(), size, after(1s)).code(), why.code());
  EXPECT_EQ(c->send(src.data(), 100, after(1s)).code(), why.code());
  EXPECT_EQ(c->recv(src.data(), size, after(1s)).status().code(), why.code());
  EXPECT_EQ(c->notify("after the failure", after(1s)).code(), why.code());
  EXPECT_LE(helpers(), started) << "an operation on the failed connection started a helper";
}

}  // namespace
}  // namespace ferry::local
