// ferry bench --gate: a barrier across processes. A pass returns only once
// every process of the count has arrived at that round, and a missing
// process fails the pass by its deadline, saying how many came.
#include "ferry/bench_gate.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

namespace ferry::cli {
namespace {

using namespace std::chrono_literals;

std::string fresh_dir() {
  char tmpl[] = "/tmp/ferry-gate-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  return d != nullptr ? d : "";
}

TEST(BenchGate, ParseRefusesBadSpecs) {
  std::string dir = fresh_dir();
  ASSERT_FALSE(dir.empty());
  EXPECT_TRUE(FileGate::parse(dir + ":2").ok());
  for (const std::string& bad : std::vector<std::string>{"nodir", dir + ":", ":2", dir + ":0", dir + ":x", dir + ":-1",
                                                         dir + ":99999", dir + "/missing:2"}) {
    auto g = FileGate::parse(bad);
    EXPECT_FALSE(g.ok()) << bad;
    EXPECT_EQ(g.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(g.status().message().find("--gate"), std::string::npos) << g.status().message();
  }
  std::filesystem::remove_all(dir);
}

TEST(BenchGate, PassWaitsForTheOtherProcessEachRound) {
  std::string dir = fresh_dir();
  ASSERT_FALSE(dir.empty());
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Two rounds, each entered only when the parent says so.
    auto g = FileGate::parse(dir + ":2");
    char c;
    for (int round = 0; round < 2; ++round) {
      if (::read(to_child[0], &c, 1) != 1) _exit(2);
      if (!g.ok() || !g->pass(after(20s)).ok()) _exit(3);
      if (::write(to_parent[1], "p", 1) != 1) _exit(4);
    }
    _exit(0);
  }
  auto g = FileGate::parse(dir + ":2");
  ASSERT_TRUE(g.ok());
  for (int round = 0; round < 2; ++round) {
    // Alone, the pass cannot return: it fails by its deadline, naming the count.
    if (round == 0) {
      Status alone = FileGate(*g).pass(after(200ms));
      EXPECT_EQ(alone.code(), Code::kDeadlineExceeded);
      EXPECT_NE(alone.message().find("1 of 2"), std::string::npos) << alone.message();
    }
    auto t0 = std::chrono::steady_clock::now();
    std::thread release([&] {
      std::this_thread::sleep_for(300ms);
      ASSERT_EQ(::write(to_child[1], "g", 1), 1);
    });
    Status s = g->pass(after(20s));
    auto waited = std::chrono::steady_clock::now() - t0;
    release.join();
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_GE(waited, 290ms) << "round " << round << " passed before the other process arrived";
    char c;
    ASSERT_EQ(::read(to_parent[0], &c, 1), 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::cli
