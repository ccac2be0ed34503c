// QueueGate (gpu/queue_gate.h): a wait is queued only once no copier is
// queuing in the application's context, and a copier that finds a wait
// queued or coming queues elsewhere. Crossing the two is the deadlock the
// gate exists for (a copy behind a wait that waits for it), so the last test
// plays both sides on threads and counts every crossing.
#include "gpu/queue_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <thread>
#include <vector>

namespace ferry::testing {
namespace {

using platform::QueueGate;

TEST(QueueGate, APassIsClearOnlyWhileNoCloserIsCounted) {
  QueueGate gate;
  {
    QueueGate::Pass p(gate);
    EXPECT_TRUE(p.clear());
  }
  gate.close();
  EXPECT_TRUE(gate.closed());
  {
    QueueGate::Pass p(gate);
    EXPECT_FALSE(p.clear());
  }
  gate.close();  // two waits armed
  gate.open();
  {
    QueueGate::Pass p(gate);
    EXPECT_FALSE(p.clear()) << "one wait is still armed";
  }
  gate.open();
  EXPECT_FALSE(gate.closed());
  QueueGate::Pass p(gate);
  EXPECT_TRUE(p.clear());
}

TEST(QueueGate, CloseWaitsForAClearPassToBeLetGo) {
  QueueGate gate;
  std::optional<QueueGate::Pass> held(std::in_place, gate);
  ASSERT_TRUE(held->clear());
  auto closing = std::async(std::launch::async, [&] { gate.close(); });
  // The closer counted itself (its pass below must not be clear) ...
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!gate.closed() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  ASSERT_TRUE(gate.closed());
  {
    QueueGate::Pass late(gate);
    EXPECT_FALSE(late.clear()) << "a pass taken while a closer waits must queue elsewhere";
  }
  // ... and still waits for the pass held.
  EXPECT_EQ(closing.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout)
      << "close() returned while a copier was still queuing";
  held.reset();
  ASSERT_EQ(closing.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  gate.open();
}

TEST(QueueGate, NoCopyIsQueuedInTheApplicationContextWhileAWaitIs) {
  QueueGate gate;
  std::atomic<bool> wait_queued{false};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> crossings{0}, clear_passes{0};
  std::vector<std::thread> copiers;
  for (int i = 0; i < 3; ++i) {
    copiers.emplace_back([&] {
      while (!stop.load()) {
        QueueGate::Pass p(gate);
        if (p.clear()) {
          ++clear_passes;
          // "Queuing": a wait must not be queued meanwhile.
          for (int k = 0; k < 50; ++k) {
            if (wait_queued.load()) ++crossings;
          }
        }
      }
    });
  }
  // A count of waits, each short; bounded in time too (a loaded machine).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int waits = 0;
  while (waits < 200 && std::chrono::steady_clock::now() < deadline) {
    gate.close();
    wait_queued.store(true);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    wait_queued.store(false);
    gate.open();
    ++waits;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  stop.store(true);
  for (auto& t : copiers) t.join();
  EXPECT_EQ(crossings.load(), 0u) << "copies queued while a wait was queued";
  EXPECT_EQ(waits, 200);
  EXPECT_GT(clear_passes.load(), 0u);
}

}  // namespace
}  // namespace ferry::testing
