// UseGate (platform/use_gate.h): uses enter until the gate is retired,
// retire() waits for the uses inside up to its deadline, and after it
// returns true no use is inside or can enter.
#include "platform/use_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

namespace ferry::platform {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(UseGate, RetireWaitsForTheUseInsideThenRefusesEveryLaterOne) {
  UseGate gate;
  UseGate::Use inside = gate.enter();
  ASSERT_TRUE(inside);
  EXPECT_FALSE(gate.retired());
  std::thread user([use = std::move(inside)]() mutable {
    std::this_thread::sleep_for(50ms);
    UseGate::Use gone = std::move(use);  // leaves here
  });
  const auto start = Clock::now();
  EXPECT_TRUE(gate.retire(Clock::now() + 5s));
  const auto took = Clock::now() - start;
  user.join();
  EXPECT_GE(took, 40ms) << "retire returned while a use was inside";
  EXPECT_LT(took, 4s) << "retire was not woken when the use left";
  EXPECT_TRUE(gate.retired());
  EXPECT_FALSE(gate.enter());
  EXPECT_TRUE(gate.retire(Clock::now())) << "a second retire finds none inside";
}

TEST(UseGate, AUseThatStaysPastTheDeadlineKeepsTheResource) {
  UseGate gate;
  std::optional<UseGate::Use> stays(gate.enter());
  ASSERT_TRUE(*stays);
  const auto start = Clock::now();
  EXPECT_FALSE(gate.retire(Clock::now() + 100ms));
  EXPECT_GE(Clock::now() - start, 90ms);
  EXPECT_FALSE(gate.enter()) << "retired even though a use stayed";
  stays.reset();
  EXPECT_TRUE(gate.retire(Clock::now()));
}

// Threads enter and leave as fast as they can while the gate is retired:
// once retire() returned true, no use is inside and none gets in.
TEST(UseGate, NoUseIsInsideOnceRetireReturnedTrue) {
  for (int round = 0; round < 20; ++round) {
    UseGate gate;
    std::atomic<int> inside{0};
    std::atomic<bool> retired{false}, late_entry{false};
    std::vector<std::thread> users;
    for (int t = 0; t < 3; ++t) {
      users.emplace_back([&] {
        for (;;) {
          UseGate::Use use = gate.enter();
          if (!use) return;
          inside.fetch_add(1);
          if (retired.load()) late_entry.store(true);
          inside.fetch_sub(1);
        }
      });
    }
    std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(gate.retire(Clock::now() + 5s));
    retired.store(true);
    EXPECT_EQ(inside.load(), 0);
    for (auto& u : users) u.join();
    EXPECT_FALSE(late_entry.load()) << "a use entered after retire returned";
  }
}

}  // namespace
}  // namespace ferry::platform
