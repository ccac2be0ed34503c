// A TCP engine serving a fleet: its threads do not grow with its
// connections (the engine-wide data plane serves every stream), and one
// connection's bulk transfer does not starve another's small messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "ferry/ferry.h"
#include "platform/fiber.h"
#include "process_holdings.h"
#include "sanitizer_build.h"
#include "transport/tcp/io_pool.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

Options fleet_options() {
  Options o;
  o.transport = TransportChoice::kTcp;
  o.listen = "127.0.0.1:0";
  o.streams = 2;
  o.max_connections = 256;
  o.max_connections_per_peer = 256;
  o.max_streams = 1024;
  return o;
}

// Buffers of 4 KiB round trips between a dialer and a target engine,
// registered with both.
struct Pings {
  Pings(Engine& dialer, Engine& target)
      : out(4096, 'x'), in(4096), echo(4096), r1(dialer.reg(out.data(), out.size()).value()),
        r2(dialer.reg(echo.data(), echo.size()).value()), r3(target.reg(in.data(), in.size()).value()) {}
  std::vector<char> out, in, echo;
  Region r1, r2, r3;
};

// One 4 KiB round trip: `a` sends, `b` receives and sends it back.
void round_trip(Connection& a, Connection& b, Pings& p) {
  Transfer r = b.recv_async(p.in.data(), p.in.size());
  Status sent = a.send(p.out.data(), p.out.size(), after(30s));
  ASSERT_TRUE(sent.ok()) << sent.to_string();
  ASSERT_TRUE(r.wait(after(30s)).ok());
  Transfer back = a.recv_async(p.echo.data(), p.echo.size());
  Status echoed = b.send(p.in.data(), p.in.size(), after(30s));
  ASSERT_TRUE(echoed.ok()) << echoed.to_string();
  Status got = back.wait(after(30s));
  ASSERT_TRUE(got.ok()) << got.to_string();
}

// 64 connections cost the process no more threads than one, give or take a
// few (the bench's or a test framework's own): an engine's threads depend on
// its NICs and cores, not on its peers.
TEST(TcpFleet, ThreadsDoNotGrowWithConnections) {
  auto target = Engine::create(fleet_options()).value();
  auto dialer = Engine::create(fleet_options()).value();
  Pings pings(*dialer, *target);
  std::vector<std::shared_ptr<Connection>> mine, theirs;
  auto add = [&] {
    auto c = dialer->connect(target->address(), after(10s));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    auto a = target->accept(after(10s));
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    mine.push_back(std::move(c).value());
    theirs.push_back(std::move(a).value());
    round_trip(*mine.back(), *theirs.back(), pings);
  };
  add();
  const size_t one = testing::thread_count();
  for (int i = 1; i < 64; ++i) {
    add();
    if (HasFatalFailure()) return;
  }
  for (size_t i = 0; i < mine.size(); ++i) round_trip(*mine[i], *theirs[i], pings);
  const size_t sixty_four = testing::thread_count();
  EXPECT_LE(sixty_four, one + 4) << "threads with 1 connection: " << one << ", with 64: " << sixty_four;
  for (auto& c : mine) c->close();
  for (auto& c : theirs) c->close();
}

// While one connection writes 256 MiB, another's 4 KiB round trips go on:
// each takes a small part of the write's time, not the whole of it (the
// workers serve streams round-robin, a quantum a turn). The bound is loose
// for a loaded 2-CPU machine and sanitizers; a round trip that waited for
// the write would take all of it.
TEST(TcpFleet, ABulkWriteDoesNotStarveAnotherConnectionsSmallMessages) {
  if (sanitizer_build::kThread || sanitizer_build::kAddress) GTEST_SKIP() << sanitizer_build::kTimingTest;
  auto target = Engine::create(fleet_options()).value();
  auto dialer = Engine::create(fleet_options()).value();
  auto bulk = dialer->connect(target->address(), after(10s)).value();
  auto bulk_there = target->accept(after(10s)).value();
  auto small = dialer->connect(target->address(), after(10s)).value();
  auto small_there = target->accept(after(10s)).value();
  Pings pings(*dialer, *target);

  constexpr size_t kBulk = 256u << 20;
  std::vector<char> src(kBulk, 'b'), dst(kBulk);
  auto src_region = dialer->reg(src.data(), src.size()).value();
  auto dst_region = target->reg(dst.data(), dst.size()).value();
  auto remote = target->export_region(dst_region).value();
  round_trip(*small, *small_there, pings);

  for (int rep = 0; rep < 2; ++rep) {
    std::atomic<bool> writing{true};
    std::chrono::nanoseconds worst{0};
    int trips = 0;
    std::thread pinger([&] {
      while (writing.load()) {
        auto t0 = std::chrono::steady_clock::now();
        round_trip(*small, *small_there, pings);
        worst = std::max<std::chrono::nanoseconds>(worst, std::chrono::steady_clock::now() - t0);
        ++trips;
      }
    });
    std::this_thread::sleep_for(5ms);  // the pings run before the write starts
    auto t0 = std::chrono::steady_clock::now();
    Status s = bulk->write(src.data(), src.size(), remote, 0, {}, after(120s));
    auto took = std::chrono::steady_clock::now() - t0;
    writing = false;
    pinger.join();
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_GE(trips, 2) << "round trips during a write of " << std::chrono::duration<double>(took).count() << " s";
    EXPECT_LT(worst, took / 2) << "a 4 KiB round trip took " << std::chrono::duration<double>(worst).count()
                               << " s while a 256 MiB write took " << std::chrono::duration<double>(took).count()
                               << " s";
  }
  (void)src_region;
  bulk->close();
  small->close();
}

// Each stream's fiber holds a stack, and each stack two of the process's
// memory mappings, which the kernel caps (vm.max_map_count) for malloc and
// CUDA as well. Past the process's fiber budget a new connection is refused
// with a status that says why; the connections already up go on, the
// refused one's stacks are given back, and once there is room again a new
// connection comes up.
TEST(TcpFleet, FiberStacksPastTheProcessBudgetFailOneConnectionNotTheProcess) {
  auto target = Engine::create(fleet_options()).value();
  auto dialer = Engine::create(fleet_options()).value();
  Pings pings(*dialer, *target);
  auto first = dialer->connect(target->address(), after(10s));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto first_there = target->accept(after(10s));
  ASSERT_TRUE(first_there.ok()) << first_there.status().to_string();
  round_trip(**first, **first_there, pings);
  const size_t held = platform::Fiber::stacks_held();
  ASSERT_GT(held, 0u);
  ASSERT_LT(held, platform::Fiber::stack_budget());

  // Room for 3 more stacks; a connection of 2 streams wants 6 on each side.
  platform::Fiber::set_stack_budget_for_testing(held + 3);
  auto second = dialer->connect(target->address(), after(10s));
  auto second_there = target->accept(after(3s));
  platform::Fiber::set_stack_budget_for_testing(0);
  std::vector<Status> seen;
  if (!second.ok()) seen.push_back(second.status());
  if (!second_there.ok()) seen.push_back(second_there.status());
  if (second.ok() && second_there.ok()) {
    // Both ends came back: one of them failed as its fibers started, which
    // its next operation says.
    std::vector<char> byte(1);
    seen.push_back((*second)->send(byte.data(), byte.size(), after(10s)));
  }
  ASSERT_FALSE(seen.empty()) << "a connection came up with fewer stacks than its streams need";
  bool named = false;
  for (const Status& s : seen) {
    EXPECT_FALSE(s.ok());
    named |= s.code() == Code::kResourceExhausted && s.message().find("vm.max_map_count") != std::string::npos;
  }
  if (!second.ok()) EXPECT_TRUE(named) << second.status().to_string();

  // The first connection is untouched; the refused one's stacks come back.
  round_trip(**first, **first_there, pings);
  if (second.ok()) (*second)->close();
  if (second_there.ok()) (*second_there)->close();
  auto until = std::chrono::steady_clock::now() + 10s;
  while (platform::Fiber::stacks_held() > held && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(platform::Fiber::stacks_held(), held);
  auto third = dialer->connect(target->address(), after(10s));
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  auto third_there = target->accept(after(10s));
  ASSERT_TRUE(third_there.ok()) << third_there.status().to_string();
  round_trip(**third, **third_there, pings);
}

// Without Options::workers, a group has a worker for each stream a
// connection opens by default (auto_streams: half the usable CPUs, 2..16), at
// most the CPUs bound to its NIC (or usable, for the default group);
// Options::workers names the count whatever the CPUs. It depends on cores
// and NICs, never peers.
TEST(TcpFleet, WorkersPerGroup) {
  using tcp::IoPool;
  Options o;
  EXPECT_EQ(IoPool::workers_per_group(o, 0, 2), 2u);
  EXPECT_EQ(IoPool::workers_per_group(o, 0, 1), 1u);
  EXPECT_EQ(IoPool::workers_per_group(o, 0, 16), 8u);
  EXPECT_EQ(IoPool::workers_per_group(o, 0, 32), 16u);
  EXPECT_EQ(IoPool::workers_per_group(o, 0, 128), 16u);
  EXPECT_EQ(IoPool::workers_per_group(o, 3, 32), 3u);  // three CPUs bound to the NIC
  o.workers = 16;
  EXPECT_EQ(IoPool::workers_per_group(o, 0, 2), 16u);
  EXPECT_EQ(IoPool::workers_per_group(o, 3, 32), 16u);
}

// Options::workers names how many threads serve each direction (what
// ferry.p2p's num_cpus sets), whatever the CPU count; a connection's streams
// still move data over that many.
TEST(TcpFleet, WorkersOptionSetsThePoolsThreads) {
  auto named = [](const char* prefix) {
    return testing::threads_named([prefix](const std::string& n) { return n.rfind(prefix, 0) == 0; });
  };
  // A worker names itself once it runs: the count the process shows within a
  // few seconds (more than `want` returns at once).
  auto named_soon = [&named](const char* prefix, size_t want) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    size_t n = named(prefix);
    while (n < want && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
      n = named(prefix);
    }
    return n;
  };
  const size_t rx_before = named("ferry-rx-any-"), tx_before = named("ferry-tx-any-");
  for (int workers : {1, 3, 6}) {
    Options o = fleet_options();
    o.workers = workers;
    o.streams = 4;
    auto target = Engine::create(o).value();
    auto dialer = Engine::create(o).value();
    // Two engines, each with `workers` per direction.
    const size_t want = 2 * static_cast<size_t>(workers);
    EXPECT_EQ(named_soon("ferry-rx-any-", rx_before + want), rx_before + want) << workers;
    EXPECT_EQ(named_soon("ferry-tx-any-", tx_before + want), tx_before + want) << workers;
    Pings pings(*dialer, *target);
    auto c = dialer->connect(target->address(), after(10s));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    auto a = target->accept(after(10s));
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    round_trip(**c, **a, pings);
    // A transfer that spans the streams lands whole.
    std::vector<unsigned char> src(3 * 1024 * 1024 + 17), dst(src.size());
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + workers);
    [[maybe_unused]] Region rs = dialer->reg(src.data(), src.size()).value();
    [[maybe_unused]] Region rd = target->reg(dst.data(), dst.size()).value();
    Transfer r = (*a)->recv_async(dst.data(), dst.size());
    ASSERT_TRUE((*c)->send(src.data(), src.size(), after(30s)).ok());
    ASSERT_TRUE(r.wait(after(30s)).ok());
    EXPECT_EQ(src, dst) << workers;
  }
}

}  // namespace
}  // namespace ferry
