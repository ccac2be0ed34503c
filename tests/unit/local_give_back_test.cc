// What a local connection, or a local handshake, holds once it cannot go on,
// and that it gives it all back by its bound (issue 51): a failed connection
// the application still holds keeps no thread, descriptor or channel
// mapping, and handshakes that dial a rendezvous someone else squats end by
// their deadline, or at once when the engine closes. The peers are made by
// hand (the handshake as an engine speaks it, then nothing), so they can
// hang up or name another rendezvous when no engine would.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../hand_made_identity.h"
#include "ferry/ferry.h"
#include "platform/socket.h"
#include "process_holdings.h"
#include "raw_local_peer.h"
#include "squatted_rendezvous.h"
#include "transport/local/copy_pool.h"
#include "transport/local/shm_channel.h"

namespace ferry::local {
namespace {

using namespace std::chrono_literals;
using ferry::testing::mappings_of;
using ferry::testing::open_descriptors;
using ferry::testing::thread_count;

// How a channel's file shows in /proc/self/maps (ShmChannel::create names it).
constexpr std::string_view kChannelFile = "memfd:ferry-local";

// 64 peers connect on the local transport and hang up, while the application
// holds every connection it accepted: once the engine saw each fail, the
// process holds no more channel mappings, descriptors or threads than before
// (the admissions came back too: the engine admits 8 at once), and every
// operation on a held connection ends at once with the failure's reason.
TEST(LocalGiveBack, HeldConnectionsThatFailGiveTheirChannelDescriptorsAndThreadsBack) {
  Options o;
  o.transport = TransportChoice::kLocal;
  o.max_connections = 8;
  o.max_connections_per_peer = 8;
  auto target = Engine::create(o).value();
  std::vector<char> buf(4096, 'x');
  ASSERT_TRUE(target->reg(buf.data(), buf.size()).ok());
  const size_t maps = mappings_of(kChannelFile), fds = open_descriptors(), threads = thread_count();
  std::vector<std::shared_ptr<Connection>> held;
  for (int i = 0; i < 64; ++i) {
    RawLocalPeer peer;
    Status dialed = peer.dial_within(target->address(), after(5s));
    ASSERT_TRUE(dialed.ok()) << "peer " << i << " (max_connections " << o.max_connections
                             << "): " << dialed.to_string();
    auto accepted = target->accept(after(5s));
    ASSERT_TRUE(accepted.ok()) << accepted.status().to_string();
    held.push_back(*accepted);
    peer.hang_up();
    ASSERT_TRUE(eventually([&] { return !held.back()->health().ok(); }, after(5s))) << "the hang-up was not noticed";
  }
  // The engine's progress worker (progress_pool.h) and copy helpers
  // (copy_pool.h) started with the first connection and serve every later
  // one: their threads, and the worker's epoll and eventfd descriptors,
  // whatever the number of connections.
  const size_t worker_threads = 1 + CopyPool::default_size(), worker_fds = 2;
  auto given_back = [&] {
    return mappings_of(kChannelFile) <= maps && open_descriptors() <= fds + worker_fds &&
           thread_count() <= threads + worker_threads + 1;
  };
  eventually(given_back, after(5s));
  EXPECT_LE(mappings_of(kChannelFile), maps) << "channel mappings of 64 failed connections the application holds";
  EXPECT_LE(open_descriptors(), fds + worker_fds) << "descriptors (" << fds << " before the 64 failed connections)";
  // One more: the last handshake's thread is joined at the next accept.
  EXPECT_LE(thread_count(), threads + worker_threads + 1)
      << "threads (" << threads << " before the 64 failed connections)";

  RemoteDescriptor nowhere{testing::hand_made_engine_id(), 1, 2, 4096};
  for (auto& c : held) {
    const Status why = c->health();
    ASSERT_EQ(why.code(), Code::kPeerLost) << why.to_string();
    EXPECT_NE(why.message().find("local connection"), std::string::npos) << why.to_string();
    EXPECT_EQ(c->send(buf.data(), 100, after(1s)).code(), why.code());
    EXPECT_EQ(c->send(buf.data(), buf.size(), after(1s)).code(), why.code());
    EXPECT_EQ(c->recv(buf.data(), buf.size(), after(1s)).status().code(), why.code());
    EXPECT_EQ(c->notify("after the failure", after(1s)).code(), why.code());
    EXPECT_EQ(c->write(buf.data(), 100, nowhere, 0, {}, after(1s)).code(), why.code());
    EXPECT_EQ(c->read(buf.data(), 100, nowhere, 0, after(1s)).code(), why.code());
    EXPECT_EQ(c->probe(after(1s)).status().code(), why.code());
    EXPECT_FALSE(c->poll_notification().has_value());
  }
  Region region = target->reg(buf.data() + 1, 100).value();
  EXPECT_TRUE(target->dereg(region).ok());
  for (auto& c : held) c->close();
  held.clear();
}

// Threads that post on a connection while its peer hangs up and the engine
// lets go of the channel: every operation ends, with the failure's reason,
// and none touches the channel after it went (the AddressSanitizer and
// ThreadSanitizer builds run this).
TEST(LocalGiveBack, OperationsPostedWhileTheChannelGoesAllEnd) {
  Options o;
  o.transport = TransportChoice::kLocal;
  auto target = Engine::create(o).value();
  std::vector<char> buf(4096, 'x');
  ASSERT_TRUE(target->reg(buf.data(), buf.size()).ok());
  const size_t maps = mappings_of(kChannelFile);
  for (int round = 0; round < 5; ++round) {
    RawLocalPeer peer;
    ASSERT_TRUE(peer.dial(target->address(), after(5s)).ok());
    auto c = target->accept(after(5s)).value();
    std::atomic<bool> stop{false};
    std::vector<std::vector<Transfer>> posted(3);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < posted.size(); ++t) {
      threads.emplace_back([&, t] {
        // The peer reads nothing.
        while (!stop.load() && posted[t].size() < 5000) {
          posted[t].push_back(t == 0   ? c->send_async(buf.data(), 100)
                              : t == 1 ? c->notify_async("n")
                                       : c->recv_async(buf.data(), buf.size()));
        }
      });
    }
    std::this_thread::sleep_for(1ms);
    peer.hang_up();
    // Until the engine let go of the channel.
    EXPECT_TRUE(eventually([&] { return mappings_of(kChannelFile) <= maps; }, after(5s)));
    stop.store(true);
    for (auto& t : threads) t.join();
    EXPECT_EQ(c->health().code(), Code::kPeerLost) << c->health().to_string();
    for (auto& list : posted) {
      for (Transfer& tr : list) {
        Status s = tr.wait(after(5s));
        ASSERT_NE(s.code(), Code::kDeadlineExceeded) << "an operation never ended";
        ASSERT_EQ(s.code(), Code::kPeerLost) << "the peer answered nothing, yet: " << s.to_string();
      }
    }
  }
}

// A local user binds the rendezvous name peers name in LOCAL_SETUP and keeps
// its backlog full, so that a connect to it never completes (a blocking
// connect pinned the handshake threads: engine.close() took 35 s). Eight
// handshakes at once left fetching from it end by themselves at their
// deadline; eight more end as soon as their peers hang up; eight more are
// cut short when the engine closes, which returns at once and leaves no
// thread behind.
TEST(LocalGiveBack, HandshakesDialingASquattedRendezvousEndByTheirDeadlineOrSooner) {
  const std::string name = "ferry-local-0123456789abcdef0123456789abcd51";
  testing::SquattedRendezvous squat(name);
  ASSERT_TRUE(squat.ok()) << std::strerror(errno);

  // A sanitizer's runtime may start a thread of its own once the process
  // starts one (ThreadSanitizer's does): it is in the count before.
  std::thread([] {}).join();
  const size_t threads = thread_count();
  Options o;
  o.transport = TransportChoice::kLocal;
  o.handshake_timeout = 2000ms;
  auto target = Engine::create(o).value();
  const size_t idle = thread_count();
  constexpr int kPeers = 8;
  auto squatted_handshakes = [&] {
    std::vector<RawLocalPeer> peers(kPeers);
    for (RawLocalPeer& p : peers) {
      Status s = p.setup(target->address(), name, Ticket{}, 1, after(5s));
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    EXPECT_GE(thread_count(), idle + kPeers) << "the handshakes ended before they could be measured";
    return peers;  // their control streams stay open
  };
  auto ms = [](Clock::duration d) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };

  auto start = Clock::now();
  std::vector<RawLocalPeer> first = squatted_handshakes();
  EXPECT_TRUE(eventually([&] { return thread_count() <= idle; }, start + o.handshake_timeout + 1s))
      << "handshakes on a squatted rendezvous outlived handshake_timeout (" << thread_count() - idle << " left)";
  std::printf("%d handshakes on a squatted rendezvous ended by themselves after %lld ms (handshake_timeout %lld ms)\n",
              kPeers, ms(Clock::now() - start), ms(o.handshake_timeout));

  // Their peers hang up: they end at once.
  start = Clock::now();
  squatted_handshakes();
  EXPECT_TRUE(eventually([&] { return thread_count() <= idle; }, start + 1s))
      << "handshakes on a squatted rendezvous outlived their peers' control streams (" << thread_count() - idle
      << " left)";
  std::printf("%d handshakes on a squatted rendezvous whose peers hung up ended after %lld ms\n", kPeers,
              ms(Clock::now() - start));

  std::vector<RawLocalPeer> second = squatted_handshakes();
  start = Clock::now();
  target.reset();
  const auto took = Clock::now() - start;
  std::printf("engine close with %d handshakes on a squatted rendezvous: %lld ms\n", kPeers, ms(took));
  EXPECT_LT(took, 1s) << "the engine's close waited for the handshakes' deadline";
  // Joined threads may stay listed for a moment after the join returns.
  EXPECT_TRUE(eventually([&] { return thread_count() <= threads; }, Clock::now() + 1s))
      << "threads left behind by the closed engine (" << thread_count() << ", " << threads << " before)";
}

}  // namespace
}  // namespace ferry::local
