// PathGovernor against modelled links and hosts: it climbs to every path
// while the CPUs have room and each path adds bandwidth, stays on one when one
// path already keeps the CPUs busy, finds the best count in between, sheds
// paths when a host gets busier and takes them back when it calms down, and
// never moves when told to use every path. The ChunkQueue must let only the
// governor's paths take new chunks, while chunks orphaned by a dead path go to
// anyone.
#include "transport/tcp/path_governor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "core/registry.h"
#include "transport/tcp/chunk_queue.h"

namespace ferry::tcp {
namespace {

constexpr int64_t kSample = 25'000'000;  // ns
constexpr int64_t kStep = 1'000'000;     // one landing report per ms of busy time
constexpr int64_t kWarmupMs = PathGovernor::kWarmupNs / kStep;

// A modelled host: throughput and CPU load as functions of the path count in
// use. The governor reads the CPU through a meter that asks the model.
struct Host {
  std::function<double(int)> rate;      // bytes per ns with n paths
  std::function<double(int)> cpu;       // host busy fraction with n paths
  std::function<double(int)> own = {};  // this process's share; empty: all of the load is ours
  int in_use = 1;
};

PathGovernor governor(int paths, const std::shared_ptr<Host>& host) {
  return PathGovernor(true, paths, kSample, [host] {
    double busy = host->cpu(host->in_use);
    return std::optional<platform::CpuReading>({busy, host->own ? host->own(host->in_use) : busy});
  });
}

// Runs `g` for `ms` of busy time on `host` (rates with +-`noise` relative
// jitter) and returns the busy time spent at each path count.
std::map<int, int64_t> drive(PathGovernor& g, Host& host, int64_t ms, double noise = 0.0, uint32_t seed = 1) {
  const int live = 64;  // every path alive
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  std::map<int, int64_t> time_at;
  for (int64_t t = 0; t < ms; ++t) {
    int n = g.active(live);
    host.in_use = n;
    time_at[n] += 1;
    g.on_landed(static_cast<uint64_t>(host.rate(n) * jitter(rng) * kStep), kStep);
  }
  return time_at;
}

double link_limited(int n) { return 0.125 * n; }  // 1 Gbit/s per path
double light(int n) { return 0.05 * n; }          // a 2-core host: 5% per rate-limited path
double saturated(int) { return 0.9; }             // one path already keeps the cores busy

// A governor on `host` after a second in which the CPUs stayed quiet (so it
// climbed as far as it would); the host's CPU model is put back after.
PathGovernor after_a_quiet_second(int paths, const std::shared_ptr<Host>& host) {
  auto cpu = host->cpu;
  host->cpu = light;
  PathGovernor g = governor(paths, host);
  drive(g, *host, 1000);
  host->cpu = cpu;
  return g;
}

// The governor judges only where the paths' workers outnumber the cores.
TEST(PathGovernor, EngagesOnlyWhenWorkersOutnumberCores) {
  EXPECT_FALSE(governor_engages(1, 2));  // one path: nothing to choose
  EXPECT_TRUE(governor_engages(2, 2));   // the 2-core lab: 4 workers
  EXPECT_TRUE(governor_engages(4, 2));
  EXPECT_FALSE(governor_engages(16, 32));  // a 32-core GPU host: 32 workers fit
  EXPECT_TRUE(governor_engages(17, 32));
  EXPECT_FALSE(governor_engages(4, 64));
}

// An engaged governor starts on the most paths whose workers fit the cores,
// as a power of two: one on the 2-core lab, 16 of 24 on a 32-core host.
TEST(PathGovernor, StartsOnThePathsTheCoresRunWithoutCrowding) {
  EXPECT_EQ(governor_start(4, 2), 1);
  EXPECT_EQ(governor_start(2, 3), 1);
  EXPECT_EQ(governor_start(24, 32), 16);
  EXPECT_EQ(governor_start(17, 32), 16);
  EXPECT_EQ(governor_start(24, 20), 8);
  EXPECT_EQ(governor_start(5, 64), 4) << "never more than the paths";
  // From there it climbs and steps down as from one.
  auto host = std::make_shared<Host>(Host{link_limited, light});
  PathGovernor up(
      true, 24, kSample,
      [host] {
        return std::optional<platform::CpuReading>({0.1, 0.1});
      },
      16);
  EXPECT_EQ(up.active(24), 16);
  drive(up, *host, 10'000, 0.03);
  EXPECT_EQ(up.kept(), 24) << "quiet cores: climbs to every path";
  auto cpu_limited = [](int n) { return n <= 1 ? 5.0 : 5.0 - 0.1 * n; };
  auto busy = std::make_shared<Host>(Host{cpu_limited, saturated});
  PathGovernor down(
      true, 24, kSample,
      [busy] {
        return std::optional<platform::CpuReading>({0.9, 0.9});
      },
      16);
  drive(down, *busy, 20'000, 0.03);
  EXPECT_LT(down.kept(), 16) << "saturated cores, fewer paths move more: steps down";
}

// Rate-limited links on a quiet host: one path, then two, then all four, a
// CPU reading apart (also in the warm-up); nearly all the time is on all four.
TEST(PathGovernor, ClimbsToEveryPathWhileTheCoresHaveRoom) {
  auto host = std::make_shared<Host>(Host{link_limited, light});
  PathGovernor g = governor(4, host);
  EXPECT_EQ(g.active(4), 1) << "starts on one path";
  auto t = drive(g, *host, 10'000, 0.03);
  EXPECT_EQ(g.kept(), 4);
  EXPECT_LE(t[1] + t[2], 2 * kSample / kStep + 2) << "ms below 4 paths: two readings";
  EXPECT_GT(t[4], 9'900);
}

// Rate-limited links on a host that other work keeps busy: this process's
// own share is small, so more paths cost the host little: climb.
TEST(PathGovernor, ClimbsWhenOtherWorkKeepsTheCoresBusy) {
  auto host = std::make_shared<Host>(Host{link_limited, saturated, light});
  PathGovernor g = governor(4, host);
  auto t = drive(g, *host, 10'000, 0.03);
  EXPECT_EQ(g.kept(), 4);
  EXPECT_GT(t[4], 9'750);
}

// Links faster than the CPU: one path keeps the cores busy, and the count
// never leaves one, so K links cost nothing against one.
TEST(PathGovernor, StaysOnOnePathWhenItKeepsTheCoresBusy) {
  auto cpu_limited = [](int n) { return n == 1 ? 5.0 : n == 2 ? 4.5 : 4.2; };
  auto host = std::make_shared<Host>(Host{cpu_limited, saturated});
  PathGovernor g = governor(4, host);
  auto t = drive(g, *host, 10'000, 0.03);
  EXPECT_EQ(g.kept(), 1);
  EXPECT_EQ(t[1], 10'000);
}

// A connection that sat idle: the first CPU reading after the pause spans it
// and shows a quiet host. Told of that idle time, the governor drops that
// reading and stays on one path on links faster than the CPU (the next quiet
// reading alone is no climb); not told, it climbs on two quiet readings.
TEST(PathGovernor, DropsCpuReadingsThatSpanIdleTime) {
  auto cpu_limited = [](int n) { return n == 1 ? 5.0 : n == 2 ? 4.5 : 4.2; };
  for (bool told : {true, false}) {
    auto host = std::make_shared<Host>(Host{cpu_limited, saturated});
    auto quiet = std::make_shared<int>(0);  // readings still to report as quiet
    PathGovernor g(true, 4, kSample, [host, quiet] {
      bool q = *quiet > 0;
      if (q) --*quiet;
      double busy = q ? 0.5 : host->cpu(host->in_use);
      return std::optional<platform::CpuReading>({busy, q ? 0.11 : busy});
    });
    auto before = drive(g, *host, 500, 0.03);
    ASSERT_EQ(before[1], 500);
    *quiet = 2;
    if (told) g.on_idle(200'000'000);  // 200 ms with nothing to send
    auto t = drive(g, *host, 1'000, 0.03);
    ASSERT_EQ(*quiet, 0);
    if (told) {
      EXPECT_EQ(t[1], 1'000) << "the dropped reading still moved the count";
    } else {
      EXPECT_GT(t[2], 0) << "two quiet readings should have climbed (else this test proves nothing)";
    }
  }
}

// The first transfer of a connection runs slowly whatever the path count, and
// the sender's share of busy CPUs reads low meanwhile (here for its first
// 130 ms). Readings of it in the warm-up, or begun in it, do not count, so
// links faster than the CPU stay on one path.
TEST(PathGovernor, JudgesNothingInTheWarmUp) {
  auto cpu_limited = [](int n) { return n == 1 ? 5.0 : n == 2 ? 4.5 : 4.2; };
  auto host = std::make_shared<Host>(Host{cpu_limited, saturated});
  auto now_ms = std::make_shared<int64_t>(0);
  PathGovernor g(true, 4, kSample, [host, now_ms] {
    bool starting = *now_ms < 130;
    double busy = starting ? 0.5 : host->cpu(host->in_use);
    return std::optional<platform::CpuReading>({busy, starting ? 0.2 : busy});
  });
  std::map<int, int64_t> time_at;
  for (*now_ms = 0; *now_ms < 2'000; ++*now_ms) {
    int n = g.active(4);
    host->in_use = n;
    time_at[n] += 1;
    g.on_landed(static_cast<uint64_t>(cpu_limited(n) * kStep), kStep);
  }
  EXPECT_EQ(time_at[1], 2'000);
}

// Short gaps between back-to-back transfers do not drop readings: with 1 ms
// idle after every 20 ms of sending, rate-limited links still reach every path.
TEST(PathGovernor, ShortGapsBetweenTransfersKeepReadings) {
  auto host = std::make_shared<Host>(Host{link_limited, light});
  PathGovernor g = governor(4, host);
  for (int transfer = 0; transfer < 50; ++transfer) {
    drive(g, *host, 20);
    g.on_idle(kStep);
  }
  EXPECT_EQ(g.kept(), 4);
}

// Two paths fill the cores; four are slower. From 2 it tries 1 (slower, kept
// at 2) and never climbs to 4 (the cores are busy).
TEST(PathGovernor, FindsTheBestCountInBetween) {
  auto peaked = [](int n) { return n == 1 ? 1.0 : n == 2 ? 2.0 : n == 4 ? 1.5 : 1.2; };
  auto cpu = [](int n) { return n == 1 ? 0.45 : 0.9; };
  auto host = std::make_shared<Host>(Host{peaked, cpu});
  PathGovernor g = governor(8, host);
  drive(g, *host, 2000);
  EXPECT_EQ(g.kept(), 2);
  auto t = drive(g, *host, 10'000);
  EXPECT_GT(t[2], 9'000);
}

TEST(PathGovernor, ShedsPathsWhenTheHostGetsBusyAndTakesThemBack) {
  auto host = std::make_shared<Host>(Host{link_limited, light});
  PathGovernor g = after_a_quiet_second(4, host);
  ASSERT_EQ(g.kept(), 4);
  // The host got busy: more paths now hurt.
  host->rate = [](int n) { return 4.0 / n; };
  host->cpu = saturated;
  drive(g, *host, 20'000);
  EXPECT_EQ(g.kept(), 1);
  // Quiet again, and the links are the limit.
  host->rate = link_limited;
  host->cpu = light;
  drive(g, *host, 20'000);
  EXPECT_EQ(g.kept(), 4);
}

// A count that measured slower than the one below it is not climbed back to
// at every quiet reading: the host alternates between room at 2 paths and
// saturation at 4, where 4 is slower; most of the time goes to 2.
TEST(PathGovernor, DoesNotKeepClimbingToACountThatMeasuredSlower) {
  auto rate = [](int n) { return n >= 4 ? 1.0 : 2.0; };
  auto cpu = [](int n) { return n >= 4 ? 0.9 : 0.4; };
  auto host = std::make_shared<Host>(Host{rate, cpu});
  PathGovernor g = governor(4, host);
  auto t = drive(g, *host, 20'000);
  EXPECT_GT(t[2], 17'000) << "ms at 2 paths of 20000";
}

// The CPUs saturated by this process, and one path moves as much as four:
// the governor settles on one (fewer threads for the same bytes) and stays.
TEST(PathGovernor, FewerPathsThatMoveAsMuchAreKept) {
  auto flat = [](int) { return 1.0; };
  auto host = std::make_shared<Host>(Host{flat, saturated});
  PathGovernor g = after_a_quiet_second(4, host);
  ASSERT_EQ(g.kept(), 4);
  auto t = drive(g, *host, 20'000, 0.02);
  EXPECT_EQ(g.kept(), 1);
  EXPECT_GT(t[1], 19'000);
}

// ... but a step down that moves 10% less is undone every time it is tried.
TEST(PathGovernor, AStepDownThatMovesLessIsUndone) {
  auto rate = [](int n) { return n >= 4 ? 1.0 : 0.9; };
  auto host = std::make_shared<Host>(Host{rate, saturated});
  PathGovernor g = after_a_quiet_second(4, host);
  ASSERT_EQ(g.kept(), 4);
  auto t = drive(g, *host, 20'000, 0.02);
  EXPECT_EQ(g.kept(), 4);
  EXPECT_GT(t[4], 19'000);
}

// One path ran slowly for a while (another load), then the host changed: a
// probe of one path is judged on what it moves now, not on those old samples,
// so the governor comes down to one path at its first probe.
TEST(PathGovernor, AProbeIsJudgedOnWhatItMovesNow) {
  auto host = std::make_shared<Host>(Host{[](int n) { return n == 1 ? 0.3 : 1.0; }, saturated});
  PathGovernor g = governor(4, host);
  auto slow = drive(g, *host, 500, 0.02);  // samples at one path: 0.3
  ASSERT_EQ(slow[1], 500);
  host->cpu = light;
  // Idle cores: climbs to every path, once the next reading comes (steady
  // readings before came up to kMaxReadingSamples samples apart).
  drive(g, *host, PathGovernor::kMaxReadingSamples * kSample / kStep + 200, 0.02);
  ASSERT_EQ(g.kept(), 4);
  host->rate = [](int) { return 1.0; };
  host->cpu = saturated;
  auto t = drive(g, *host, 2'000, 0.02);
  EXPECT_EQ(g.kept(), 1);
  EXPECT_GT(t[1], 1'500) << "ms at one path of 2000";
}

// Links of 1 Gbit/s on a busy host: after a step down, the dropped paths'
// windows keep landing at the old rate for a while. Reports made before they
// have all landed must not count, or the probe looks as fast as all paths and
// wins.
TEST(PathGovernor, JudgesAStepOnlyAfterThePipelineFlushed) {
  auto host = std::make_shared<Host>(Host{link_limited, saturated});
  PathGovernor g = after_a_quiet_second(4, host);
  ASSERT_EQ(g.kept(), 4);
  int last = g.target();
  int64_t flush_left = 0;  // ms of old chunks still landing after a change
  for (int64_t t = 0; t < 20'000; ++t) {
    int n = g.target();
    host->in_use = n;
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

TEST(PathGovernor, FixedPolicyOnePathOrNoCpuReadingNeverMove) {
  PathGovernor all(false, 4, kSample);
  auto host = std::make_shared<Host>(Host{[](int n) { return 4.0 / n; }, saturated});
  auto t = drive(all, *host, 2000);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t[4], 2000);
  PathGovernor one = governor(1, host);
  EXPECT_EQ(drive(one, *host, 2000).size(), 1u);
  PathGovernor blind(true, 4, kSample);  // no CPU meter: every path
  EXPECT_EQ(drive(blind, *host, 2000).size(), 1u);
  EXPECT_EQ(blind.kept(), 4);
}

// A meter that has no reading yet (too few /proc/stat ticks) lets the window
// grow; the governor neither climbs nor steps down meanwhile.
TEST(PathGovernor, WaitsForACpuReading) {
  int calls = 0;
  PathGovernor g(true, 4, kSample, [&calls]() -> std::optional<platform::CpuReading> {
    ++calls;
    return calls < 5 ? std::nullopt : std::optional<platform::CpuReading>({0.1, 0.1});
  });
  // A window is full after kSample of busy time; from then on every report
  // asks again until there is an answer.
  for (int i = 0; i < kSample / kStep + 3; ++i) g.on_landed(1000, kStep);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(g.kept(), 1);
  g.on_landed(1000, kStep);
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(g.kept(), 2) << "idle cores, even in the warm-up: climb at once";
}

// Busy cores, mostly others' load: a climb needs two such readings in a row,
// both taken after the warm-up.
TEST(PathGovernor, ClimbsForOthersLoadOnlyAfterTheWarmUpAndTwoReadings) {
  int calls = 0;
  PathGovernor g(true, 4, kSample, [&calls]() -> std::optional<platform::CpuReading> {
    ++calls;
    return std::optional<platform::CpuReading>({0.9, 0.1});
  });
  for (int i = 0; i < kWarmupMs; ++i) g.on_landed(1000, kStep);
  EXPECT_EQ(calls, kWarmupMs / (kSample / kStep));
  EXPECT_EQ(g.kept(), 1) << "no climb for others' load in the warm-up";
  int before = calls;
  while (calls < before + 1) g.on_landed(1000, kStep);
  EXPECT_EQ(g.kept(), 1) << "one reading after the warm-up is not two";
  while (calls < before + 2) g.on_landed(1000, kStep);
  EXPECT_EQ(g.kept(), 2) << "two readings in a row after the warm-up: climb";
}

// A saturated host whose every fifth reading dips (the sender held back for a
// moment): no two readings in a row show room, so the count stays at one.
TEST(PathGovernor, OneQuietReadingDoesNotClimb) {
  auto cpu_limited = [](int n) { return n == 1 ? 5.0 : n == 2 ? 4.5 : 4.2; };
  auto host = std::make_shared<Host>(Host{cpu_limited, saturated});
  auto readings = std::make_shared<int>(0);
  PathGovernor g(true, 4, kSample, [host, readings] {
    bool dip = (*readings)++ % 5 == 0;
    return std::optional<platform::CpuReading>({dip ? 0.5 : 0.9, dip ? 0.13 : 0.55});
  });
  auto t = drive(g, *host, 5'000, 0.03);
  EXPECT_GE(*readings, 40) << "too few readings to have seen dips";
  EXPECT_EQ(t[1], 5'000);
}

// Reading the CPU load costs the transfer, so readings that keep telling the
// same come less often: on a saturated host at one path the interval doubles
// to kMaxReadingSamples samples. A change of class brings it back to one
// sample, and the governor still climbs within that bound once cores idle.
TEST(PathGovernor, SteadyReadingsComeLessOftenAndAChangeIsSeenInBoundedTime) {
  auto cpu_limited = [](int n) { return n == 1 ? 5.0 : 4.0; };
  auto host = std::make_shared<Host>(Host{cpu_limited, saturated});
  auto readings = std::make_shared<int>(0);
  PathGovernor g(true, 4, kSample, [host, readings] {
    ++*readings;
    double busy = host->cpu(host->in_use);
    return std::optional<platform::CpuReading>({busy, busy});
  });
  const int64_t max_ms = PathGovernor::kMaxReadingSamples * kSample / kStep;
  drive(g, *host, 10'000);
  EXPECT_EQ(g.kept(), 1);
  EXPECT_EQ(g.reading_interval(), PathGovernor::kMaxReadingSamples * kSample);
  // One per sample through the warm-up, then doubling, then one per max_ms.
  int64_t most = kWarmupMs / (kSample / kStep) + 5 + 10'000 / max_ms + 1;
  EXPECT_LE(*readings, most) << "readings in 10 s at one sample each would be " << 10'000 / (kSample / kStep);
  EXPECT_GE(*readings, 10'000 / max_ms);

  host->cpu = light;
  int before = *readings;
  drive(g, *host, max_ms + 3 * kSample / kStep);
  EXPECT_EQ(g.kept(), 4) << "idle cores seen within one long interval, then 1 -> 2 -> 4 a sample apart";
  EXPECT_GE(*readings - before, 2);
}

TEST(PathGovernor, NeverExceedsTheLivePaths) {
  PathGovernor g(false, 4, kSample);
  ASSERT_EQ(g.kept(), 4);
  EXPECT_EQ(g.active(2), 2) << "two paths died";
  EXPECT_EQ(g.active(0), 1);
}

// The queue side: only the governor's paths take new chunks.
TEST(PathGovernorQueue, OnlyActivePathsClaimNewChunksButAnyTakesOrphans) {
  core::Registry registry;
  std::vector<uint8_t> buf(1 << 20, 7);
  ASSERT_TRUE(registry.add(buf.data(), buf.size(), platform::PointerKind{}).ok());
  {
    ChunkQueue fresh(4096, /*window=*/4, /*paths=*/3, /*adaptive=*/true);
    EXPECT_EQ(fresh.active_paths(), 1) << "a governed connection starts on one path";
    ChunkQueue all(4096, /*window=*/4, /*paths=*/3, /*adaptive=*/false);
    EXPECT_EQ(all.active_paths(), 3);
  }
  // A governor that stays on one path: its host is busy.
  auto host = std::make_shared<Host>(Host{[](int n) { return 3.0 / n; }, saturated});
  PathGovernor g = governor(3, host);
  drive(g, *host, 2000);
  ASSERT_EQ(g.kept(), 1);
  ChunkQueue q(4096, /*window=*/4, /*paths=*/3, g);
  auto op = std::make_shared<OutOp>();
  op->frame = wire::DataChunk{};
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

// The queue reads the CPU meter (/proc/stat) without holding its lock, so
// the transmit workers are not kept waiting on it, and still uses what it read.
TEST(PathGovernorQueue, ReadsTheCpuOutsideItsLock) {
  core::Registry registry;
  std::vector<uint8_t> buf(1 << 16, 7);
  ASSERT_TRUE(registry.add(buf.data(), buf.size(), platform::PointerKind{}).ok());
  ChunkQueue* queue = nullptr;
  int readings = 0;
  bool lock_free = false;
  std::future<int> other;  // outlives the reading: its thread may need the lock the reading held
  auto meter = [&]() -> std::optional<platform::CpuReading> {
    ++readings;
    // Another thread takes the queue's lock; it would wait for this
    // reading to end if the reading held it.
    other = std::async(std::launch::async, [&] { return queue->active_paths(); });
    lock_free = other.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    return platform::CpuReading{0.1, 0.1};  // idle cores: climb at once
  };
  // A reading is due after every nanosecond of busy time.
  ChunkQueue q(4096, /*window=*/4, /*paths=*/2, PathGovernor(true, 2, /*sample_ns=*/1, meter, /*start=*/1));
  queue = &q;
  ASSERT_EQ(q.active_paths(), 1);
  auto op = std::make_shared<OutOp>();
  op->frame = wire::DataChunk{};
  auto span = registry.resolve_local(buf.data(), 4 * 4096, "test buffer");
  ASSERT_TRUE(span.ok());
  op->source.add(*span);
  ASSERT_TRUE(q.push(op));
  ASSERT_TRUE(q.try_claim(0).has_value());
  // Busy time well above the moment of idle time before the push, so the
  // reading is not dropped as spanning idle time.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.on_landed(0, 1);
  if (other.valid()) other.wait();
  EXPECT_EQ(readings, 1);
  EXPECT_TRUE(lock_free) << "the queue held its lock while reading the CPU";
  EXPECT_EQ(q.active_paths(), 2) << "the reading reached the governor";
}

}  // namespace
}  // namespace ferry::tcp
