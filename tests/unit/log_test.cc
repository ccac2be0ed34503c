// Log lines: their prefix (UTC time with milliseconds, pid, level, subsystem,
// the engine a line is about), an engine's own lines naming it, and the
// queue an application takes them from (bounded, never waited on by ferry's
// threads, safe across fork).
#include "platform/log.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// Sets the process's log level for a scope and puts the old one back; lines
// go to stderr again at the end.
class LevelGuard {
 public:
  explicit LevelGuard(LogLevel level) : old_(log::threshold().load()) { log::set_level(level); }
  ~LevelGuard() {
    log::threshold().store(old_);
    log_to_stderr();
    (void)take_log_lines(0ms);
  }

 private:
  int old_;
};

std::string short_id(uint64_t id) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08" PRIx32, static_cast<uint32_t>(id >> 32));
  return buf;
}

TEST(Log, ALineCarriesUtcTimeWithMillisecondsPidLevelSubsystemAndEngine) {
  LevelGuard level(LogLevel::kInfo);
  const std::time_t before = std::time(nullptr);
  ::testing::internal::CaptureStderr();
  FERRY_ENGINE_LOG(kInfo, "tcp", 0x1a2b3c4d5e6f7081ull, "connection %d up", 3);
  FERRY_LOG(kWarn, "options", "FERRY_X is set but is no ferry variable");
  FERRY_LOG(kDebug, "tcp", "below the threshold");
  std::string out = ::testing::internal::GetCapturedStderr();
  const std::string pid = std::to_string(::getpid());
  std::regex line(R"(^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.\d{3}Z ferry\[)" + pid +
                  R"(\] info \[tcp\] engine 1a2b3c4d: connection 3 up\n)" +
                  R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ferry\[)" + pid +
                  R"(\] warn \[options\] FERRY_X is set but is no ferry variable\n$)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(out, m, line)) << out;
  // The time is UTC and now.
  std::tm tm{};
  tm.tm_year = std::stoi(m[1]) - 1900;
  tm.tm_mon = std::stoi(m[2]) - 1;
  tm.tm_mday = std::stoi(m[3]);
  tm.tm_hour = std::stoi(m[4]);
  tm.tm_min = std::stoi(m[5]);
  tm.tm_sec = std::stoi(m[6]);
  std::time_t at = ::timegm(&tm);
  EXPECT_LE(before, at);
  EXPECT_LE(at, std::time(nullptr));
}

// An engine's own lines name it by the first 8 hex digits of Engine::id().
TEST(Log, AnEnginesLinesNameIt) {
  LevelGuard level(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  Options o;
  o.listen = "127.0.0.1:0";
  o.transport = TransportChoice::kTcp;
  o.log_level = LogLevel::kInfo;
  uint64_t id = 0;
  {
    auto a = Engine::create(o);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    auto b = Engine::create(o);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    id = (*b)->id();
    auto c = (*b)->connect((*a)->address(), after(5s));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    (*c)->close();
  }
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("[engine] engine " + short_id(id) + ": listening on "), std::string::npos) << out;
  EXPECT_NE(out.find("[tcp] engine " + short_id(id) + ": connected to "), std::string::npos) << out;
}

// While lines are queued, a flood from many threads holds at most the
// queue's capacity; the rest are counted as dropped, and no writer waits for
// a reader (there is none here).
TEST(Log, AFloodOfQueuedLinesIsBoundedAndCounted) {
  LevelGuard level(LogLevel::kInfo);
  queue_log_lines(64);
  constexpr int kThreads = 8, kLines = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kLines; ++i) FERRY_ENGINE_LOG(kInfo, "tcp", 0xabcdef0123456789ull, "line %d of %d", i, t);
    });
  }
  for (auto& t : threads) t.join();
  LogLines got = take_log_lines(0ms);
  EXPECT_TRUE(got.queued);
  ASSERT_EQ(got.lines.size(), 64u);
  EXPECT_EQ(got.dropped, uint64_t{kThreads} * kLines - 64);
  const LogLine& l = got.lines.front();
  EXPECT_EQ(l.level, LogLevel::kInfo);
  EXPECT_EQ(l.subsystem, "tcp");
  EXPECT_EQ(l.engine_id, 0xabcdef0123456789ull);
  EXPECT_EQ(l.message.rfind("engine abcdef01: line ", 0), 0u) << l.message;
  EXPECT_NE(l.text.find(" ferry[" + std::to_string(::getpid()) + "] info [tcp] " + l.message), std::string::npos)
      << l.text;
  EXPECT_LE(std::chrono::system_clock::now() - l.time, 60s);
  // Taken lines make room again.
  FERRY_LOG(kWarn, "engine", "after");
  got = take_log_lines(0ms);
  ASSERT_EQ(got.lines.size(), 1u);
  EXPECT_EQ(got.lines[0].message, "after");
  EXPECT_FALSE(got.lines[0].thread.empty());
}

// A reader blocked in take_log_lines wakes when lines go back to stderr,
// with what was still queued; later lines go to stderr.
TEST(Log, LogToStderrWakesTheReader) {
  LevelGuard level(LogLevel::kWarn);
  queue_log_lines(16);
  FERRY_LOG(kWarn, "engine", "queued");
  LogLines first = take_log_lines(10s);
  ASSERT_EQ(first.lines.size(), 1u);
  std::atomic<bool> woke{false};
  LogLines last;
  std::thread reader([&] {
    last = take_log_lines(std::chrono::minutes(1));
    woke = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(woke.load());
  auto t0 = std::chrono::steady_clock::now();
  log_to_stderr();
  reader.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_FALSE(last.queued);
  ::testing::internal::CaptureStderr();
  FERRY_LOG(kWarn, "engine", "to stderr");
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("warn [engine] to stderr"), std::string::npos);
}

// fork() while other threads log into the queue: the child neither hangs on
// the queue's lock nor sees the parent's lines; its lines go to stderr.
TEST(Log, AForkedChildLogsToStderrWhileTheParentQueues) {
  LevelGuard level(LogLevel::kInfo);
  queue_log_lines(8);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&] {
      while (!stop.load()) FERRY_LOG(kInfo, "tcp", "busy");
    });
  }
  std::thread reader([&] {
    while (!stop.load()) (void)take_log_lines(1ms);
  });
  for (int i = 0; i < 20; ++i) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(10);  // a child stuck on a lock dies instead of hanging the test
      ::dup2(fds[1], 2);
      LogLines inherited = take_log_lines(0ms);
      FERRY_LOG(kWarn, "child", "alive");
      ::_exit(inherited.lines.empty() && !inherited.queued ? 0 : 1);
    }
    ::close(fds[1]);
    std::string out;
    char buf[256];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
    ::close(fds[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child " << i << " did not exit: signal " << WTERMSIG(status) << " " << out;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << i << " saw the parent's queue";
    EXPECT_NE(out.find("warn [child] alive"), std::string::npos) << out;
  }
  stop = true;
  for (auto& t : writers) t.join();
  reader.join();
}

}  // namespace
}  // namespace ferry
