// PathGovernor against modelled links: it must keep every path when each path
// adds bandwidth, drop to one when extra paths cost throughput, find the best
// count in between, shed paths when a host gets busier and take them back
// when they pay again, and never move when told to use every path. The
// ChunkQueue must let only the governor's paths take new chunks, while chunks
// orphaned by a dead path go to anyone.
#include "transport/tcp/path_governor.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>

#include "core/registry.h"
#include "transport/tcp/chunk_queue.h"

namespace ferry::tcp {
namespace {

constexpr int64_t kSample = 25'000'000;  // ns
constexpr int64_t kStep = 1'000'000;     // one landing report per ms of busy time

// Runs `g` for `ms` of busy time against `rate(n)` (bytes per ns with n
// paths, with +-`noise` relative jitter) and returns the busy time spent at
// each path count.
std::map<int, int64_t> drive(PathGovernor& g, int live, int64_t ms, const std::function<double(int)>& rate,
                             double noise = 0.0, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  std::map<int, int64_t> time_at;
  for (int64_t t = 0; t < ms; ++t) {
    int n = g.active(live);
    time_at[n] += 1;
    g.on_landed(static_cast<uint64_t>(rate(n) * jitter(rng) * kStep), kStep);
  }
  return time_at;
}

double link_limited(int n) { return 0.125 * n; }  // 1 Gbit/s per path

// The governor judges only where the paths' workers outnumber the cores.
TEST(PathGovernor, EngagesOnlyWhenWorkersOutnumberCores) {
  EXPECT_FALSE(governor_engages(1, 2));   // one path: nothing to choose
  EXPECT_TRUE(governor_engages(2, 2));    // the 2-core lab: 4 workers
  EXPECT_TRUE(governor_engages(4, 2));
  EXPECT_FALSE(governor_engages(16, 32));  // a 32-core GPU host: 32 workers fit
  EXPECT_TRUE(governor_engages(17, 32));
  EXPECT_FALSE(governor_engages(4, 64));
}

TEST(PathGovernor, KeepsEveryPathWhenEachAddsBandwidth) {
  PathGovernor g(true, 4, kSample);
  EXPECT_EQ(g.active(4), 4) << "starts on every path";
  // Nearly all the time is spent on all four; the probes downward cost little.
  auto t = drive(g, 4, 10'000, link_limited, 0.03);
  EXPECT_EQ(g.kept(), 4);
  EXPECT_GT(t[4], 9'500) << "ms at 4 paths of 10000";
}

TEST(PathGovernor, DropsToOnePathWhenMorePathsCostThroughput) {
  // Links faster than the CPU: every extra path's threads compete.
  auto cpu_limited = [](int n) { return n == 1 ? 5.0 : n == 2 ? 4.5 : 4.2; };
  PathGovernor g(true, 4, kSample);
  drive(g, 4, 1000, cpu_limited, 0.03);
  EXPECT_EQ(g.kept(), 1) << "within the first second";
  auto t = drive(g, 4, 10'000, cpu_limited, 0.03, 2);
  EXPECT_GT(t[1], 9'500) << "ms at 1 path of 10000";
}

TEST(PathGovernor, FindsTheBestCountInBetween) {
  auto peaked = [](int n) { return n == 1 ? 1.0 : n == 2 ? 2.0 : n == 4 ? 1.5 : 1.2; };
  PathGovernor g(true, 8, kSample);
  drive(g, 8, 2000, peaked);
  EXPECT_EQ(g.kept(), 2);
  auto t = drive(g, 8, 10'000, peaked);
  EXPECT_GT(t[2], 9'000);
}

TEST(PathGovernor, ShedsPathsWhenTheyStopPayingAndTakesThemBack) {
  PathGovernor g(true, 4, kSample);
  drive(g, 4, 1000, link_limited);
  ASSERT_EQ(g.kept(), 4);
  // The host got busy: more paths now hurt.
  auto hurt = [](int n) { return 4.0 / n; };
  drive(g, 4, 20'000, hurt);
  EXPECT_EQ(g.kept(), 1);
  // Busy no more: the links are the limit again.
  drive(g, 4, 20'000, link_limited);
  EXPECT_EQ(g.kept(), 4);
}

TEST(PathGovernor, NoiseBelowTheGainThresholdNeverDropsPaths) {
  auto flat = [](int) { return 1.0; };
  PathGovernor g(true, 4, kSample);
  auto t = drive(g, 4, 20'000, flat, 0.02);
  EXPECT_EQ(g.kept(), 4);
  EXPECT_GT(t[4], 19'000);
}

// Links of 1 Gbit/s: after a step down, the dropped paths' windows keep
// landing at the old rate for a while. Reports made before they have all
// landed must not count, or the probe looks as fast as all paths and wins.
TEST(PathGovernor, JudgesAStepOnlyAfterThePipelineFlushed) {
  PathGovernor g(true, 4, kSample);
  int last = g.target();
  int64_t flush_left = 0;  // ms of old chunks still landing after a change
  for (int64_t t = 0; t < 20'000; ++t) {
    int n = g.target();
    if (n != last) flush_left = 70;
    last = n;
    bool flushed = flush_left == 0;
    // While flushing, the old count's chunks land: the rate of 4 paths, a
    // little above it even (noise), which must not make the probe win.
    double rate = flushed ? link_limited(n) : link_limited(4) * 1.2;
    if (flush_left > 0) --flush_left;
    g.on_landed(static_cast<uint64_t>(rate * kStep), kStep, flushed);
    ASSERT_EQ(g.kept(), 4) << "at " << t << " ms";
  }
}

TEST(PathGovernor, FixedPolicyAndOnePathNeverMove) {
  PathGovernor all(false, 4, kSample);
  auto t = drive(all, 4, 2000, [](int n) { return 4.0 / n; });
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t[4], 2000);
  PathGovernor one(true, 1, kSample);
  EXPECT_EQ(drive(one, 1, 2000, link_limited).size(), 1u);
}

TEST(PathGovernor, NeverExceedsTheLivePaths) {
  PathGovernor g(true, 4, kSample);
  ASSERT_EQ(g.kept(), 4);
  EXPECT_EQ(g.active(2), 2) << "two paths died";
  EXPECT_EQ(g.active(0), 1);
}

// The queue side: only the governor's paths take new chunks. A governor that
// dropped to one path is made by feeding the queue landings whose rate falls
// as paths are added.
TEST(PathGovernorQueue, OnlyActivePathsClaimNewChunksButAnyTakesOrphans) {
  core::Registry registry;
  std::vector<uint8_t> buf(1 << 20, 7);
  ASSERT_TRUE(registry.add(buf.data(), buf.size(), platform::PointerKind{}).ok());
  {
    ChunkQueue fresh(4096, /*window=*/4, /*paths=*/3, /*adaptive=*/true);
    EXPECT_EQ(fresh.active_paths(), 3) << "a new connection uses every path";
  }
  // A governor that found one path fastest.
  PathGovernor g(true, 3, kSample);
  drive(g, 3, 2000, [](int n) { return 3.0 / n; });
  ASSERT_EQ(g.kept(), 1);
  ChunkQueue q(4096, /*window=*/4, /*paths=*/3, g);
  auto op = std::make_shared<OutOp>();
  op->header.type = wire::FrameType::kData;
  auto span = registry.resolve_local(buf.data(), 64 * 4096, "test buffer");
  ASSERT_TRUE(span.ok());
  op->source.add(*span);
  ASSERT_TRUE(q.push(op));
  EXPECT_EQ(q.active_paths(), 1);
  EXPECT_FALSE(q.try_claim(1).has_value()) << "path 1 is not active";
  EXPECT_FALSE(q.try_claim(2).has_value());
  int sent = 0;
  while (q.try_claim(0)) ++sent;
  EXPECT_EQ(sent, 4) << "path 0 stops at its window";
  // Path 0 dies: its unconfirmed chunks go to whoever is alive, active or not,
  // and path 1 becomes the first live path.
  EXPECT_EQ(q.fail_path(0), 2);
  int orphans = 0;
  while (auto c = q.try_claim(2)) {
    EXPECT_LT(c->offset, 4u * 4096) << "path 2 may take only orphaned chunks";
    ++orphans;
  }
  EXPECT_EQ(orphans, 4);
  auto c = q.try_claim(1);
  ASSERT_TRUE(c.has_value()) << "the first live path takes new chunks";
  EXPECT_EQ(c->offset, 4u * 4096);
}

}  // namespace
}  // namespace ferry::tcp
