// HostCpuLoad on fixture files shaped like /proc/stat: busy time over total
// time between readings, no reading before enough ticks or within the pacing
// interval, none from a missing file, and a counter that goes back restarts
// the window; on this host, this process's own share rises while it computes.
#include "platform/cpu_load.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

namespace ferry::platform {
namespace {

class StatFile {
 public:
  StatFile() {
    char tmpl[] = "/tmp/ferry-stat-XXXXXX";
    int fd = ::mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    ::close(fd);
    path_ = tmpl;
  }
  ~StatFile() { ::unlink(path_.c_str()); }
  // user nice system idle iowait irq softirq steal
  void write(unsigned user, unsigned system, unsigned idle, unsigned iowait, unsigned softirq) {
    FILE* f = std::fopen(path_.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "cpu  %u 0 %u %u %u 0 %u 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 12345\n", user, system, idle, iowait,
                 softirq);
    std::fclose(f);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(HostCpuLoad, BusyFractionBetweenReadings) {
  StatFile stat;
  stat.write(100, 50, 1000, 10, 5);
  HostCpuLoad load(stat.path());
  ASSERT_TRUE(load.available());
  // +30 user, +10 system, +5 softirq busy; +50 idle, +5 iowait: 45 of 100.
  stat.write(130, 60, 1050, 15, 10);
  auto f = load.since_last();
  ASSERT_TRUE(f.has_value());
  EXPECT_DOUBLE_EQ(f->host_busy, 0.45);
  EXPECT_GE(f->self, 0.0);
  EXPECT_LE(f->self, 1.0);
  // Only idle time passes: 0.
  stat.write(130, 60, 1070, 15, 10);
  auto idle = load.since_last();
  ASSERT_TRUE(idle.has_value());
  EXPECT_DOUBLE_EQ(idle->host_busy, 0.0);
  EXPECT_FALSE(load.since_last(0).has_value()) << "no tick since the last reading";
}

TEST(HostCpuLoad, NoReadingUntilEnoughTicksPassed) {
  StatFile stat;
  stat.write(100, 0, 100, 0, 0);
  HostCpuLoad load(stat.path());
  stat.write(102, 0, 101, 0, 0);  // 3 ticks
  EXPECT_FALSE(load.since_last(4).has_value());
  stat.write(104, 0, 102, 0, 0);  // 6 ticks since the last reading that counted
  auto f = load.since_last(4);
  ASSERT_TRUE(f.has_value());
  EXPECT_DOUBLE_EQ(f->host_busy, 4.0 / 6.0);
}

TEST(HostCpuLoad, PacedReadsWaitForTheirInterval) {
  StatFile stat;
  stat.write(100, 50, 1000, 10, 5);
  HostCpuLoad load(stat.path(), /*min_interval_ns=*/500'000'000);
  stat.write(130, 60, 1050, 15, 10);
  EXPECT_FALSE(load.since_last().has_value()) << "read again within the interval";
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto f = load.since_last();
  ASSERT_TRUE(f.has_value()) << "no reading once the interval passed";
  EXPECT_DOUBLE_EQ(f->host_busy, 0.45);
  EXPECT_FALSE(load.since_last(0).has_value()) << "the interval restarts at each read";
}

TEST(HostCpuLoad, IntervalForTicksSpansAllCpus) {
  // Every online CPU ticks CLK_TCK times a second.
  double ticks_per_s = static_cast<double>(::sysconf(_SC_CLK_TCK) * ::sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_NEAR(static_cast<double>(HostCpuLoad::interval_for_ticks(4)), 4e9 / ticks_per_s, 1.0);
  EXPECT_EQ(HostCpuLoad::interval_for_ticks(0), 0);
}

TEST(HostCpuLoad, CountersGoingBackRestartTheWindow) {
  StatFile stat;
  stat.write(500, 0, 500, 0, 0);
  HostCpuLoad load(stat.path());
  stat.write(10, 0, 10, 0, 0);
  EXPECT_FALSE(load.since_last().has_value());
  stat.write(20, 0, 20, 0, 0);
  EXPECT_DOUBLE_EQ(load.since_last().value_or(CpuReading{-1, 0}).host_busy, 0.5);
}

TEST(HostCpuLoad, MissingOrGarbledFileHasNoReading) {
  HostCpuLoad none("/nonexistent/stat");
  EXPECT_FALSE(none.available());
  EXPECT_FALSE(none.since_last().has_value());
  StatFile stat;
  FILE* f = std::fopen(stat.path().c_str(), "w");
  std::fputs("intr 1 2 3\n", f);
  std::fclose(f);
  HostCpuLoad garbled(stat.path());
  EXPECT_FALSE(garbled.available());
}

TEST(HostCpuLoad, ThisHostAnswersAndCountsThisProcess) {
  HostCpuLoad load;
  ASSERT_TRUE(load.available()) << "/proc/stat";
  // Compute until a reading comes (4 ticks: up to 40 ms on one CPU), at most 2 s.
  std::optional<CpuReading> r;
  volatile uint64_t sink = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!r && std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 100000; ++i) sink = sink + static_cast<uint64_t>(i) * 7;
    r = load.since_last();
  }
  ASSERT_TRUE(r.has_value());
  EXPECT_GT(r->host_busy, 0.0);
  EXPECT_LE(r->host_busy, 1.0);
  EXPECT_GT(r->self, 0.0) << "this thread computed the whole window";
  EXPECT_LE(r->self, 1.0);
}

}  // namespace
}  // namespace ferry::platform
