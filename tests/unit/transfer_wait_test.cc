// Transfer::wait_or_cancel: the one policy of every blocking call, in C++
// and in Python. Past the deadline, under kCancelOrFinish (receive, write,
// read) an operation that can still be withdrawn is cancelled
// (kDeadlineExceeded), one moving data is stopped by its stopper (after its
// grace, a receive's, if it has one), and one that cannot stop runs to its
// end and returns its own result; under kLeave (send, notification) it is
// left running, never withdrawn. A wait its `block` stops cancels what
// kCancelOrFinish would and leaves the rest running.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "core/transfer_state.h"
#include "ferry/transfer.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// A transfer that a canceller can stop while `stoppable` says so.
struct Op {
  std::shared_ptr<TransferState> state = std::make_shared<TransferState>(7, 1);
  std::atomic<int> cancels{0};
  Transfer handle{state};

  explicit Op(bool stoppable) {
    state->set_canceller([this, stoppable] {
      ++cancels;
      return stoppable && state->finish(Status(Code::kCancelled, "cancelled"));
    });
  }
};

// Finishes `state` with `s` after `delay`, on its own thread.
std::thread finish_later(std::shared_ptr<TransferState> state, Clock::duration delay, Status s = Status()) {
  return std::thread([state, delay, s] {
    std::this_thread::sleep_for(delay);
    state->finish(s);
  });
}

TEST(TransferWait, FinishedBeforeTheDeadlineReturnsItsOwnResult) {
  for (PastDeadline rule : {PastDeadline::kCancelOrFinish, PastDeadline::kLeave}) {
    Op ok(true), failed(true);
    std::thread t1 = finish_later(ok.state, 10ms);
    std::thread t2 = finish_later(failed.state, 10ms, Status(Code::kPeerLost, "gone"));
    EXPECT_TRUE(ok.handle.wait_or_cancel(after(10s), rule).ok());
    EXPECT_EQ(failed.handle.wait_or_cancel(after(10s), rule).code(), Code::kPeerLost);
    t1.join();
    t2.join();
    EXPECT_EQ(ok.cancels, 0);
  }
}

TEST(TransferWait, AReceiveThatCanStopIsCancelledAtTheDeadline) {
  Op op(true);
  auto start = Clock::now();
  Status s = op.handle.wait_or_cancel(after(30ms), PastDeadline::kCancelOrFinish);
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.to_string();
  EXPECT_NE(s.message().find("cancelled"), std::string::npos) << s.to_string();
  EXPECT_GE(Clock::now() - start, 30ms);
  EXPECT_EQ(op.cancels, 1);
  EXPECT_EQ(op.handle.status().code(), Code::kCancelled);
}

TEST(TransferWait, OneMovingDataThatCannotStopRunsToItsEnd) {
  Op op(false);
  std::thread t = finish_later(op.state, 150ms, Status(Code::kBufferTooSmall, "its own result"));
  Status s = op.handle.wait_or_cancel(after(20ms), PastDeadline::kCancelOrFinish);
  EXPECT_TRUE(op.handle.test()) << "returned while the operation still used the caller's memory";
  EXPECT_EQ(s.code(), Code::kBufferTooSmall) << s.to_string();
  EXPECT_EQ(op.cancels, 1);
  t.join();
}

// A stopper that stops it after `takes` (as a stop waits for the chunk
// still landing), counting its calls.
void stoppable_while_moving(Op& op, std::atomic<int>& stops, Clock::duration takes) {
  op.state->set_stopper([&op, &stops, takes] {
    ++stops;
    std::this_thread::sleep_for(takes);
    return op.state->finish(Status(Code::kCancelled, "stopped"));
  });
}

TEST(TransferWait, OneMovingDataIsStoppedAtItsDeadline) {
  Op op(false);
  std::atomic<int> stops{0};
  stoppable_while_moving(op, stops, 30ms);
  auto start = Clock::now();
  Status s = op.handle.wait_or_cancel(after(20ms), PastDeadline::kCancelOrFinish);
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.to_string();
  EXPECT_NE(s.message().find("none of it lands"), std::string::npos) << s.to_string();
  EXPECT_TRUE(op.handle.test()) << "returned before the stop ended";
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_EQ(op.cancels, 1);
  EXPECT_EQ(stops, 1);
}

TEST(TransferWait, AReceiveGetsItsGraceToFinishThenIsStopped) {
  {
    // Finishes within its grace: its own result, not stopped.
    Op op(false);
    std::atomic<int> stops{0};
    stoppable_while_moving(op, stops, 0ms);
    op.state->set_past_deadline_grace(2s);
    std::thread t = finish_later(op.state, 100ms);
    Status s = op.handle.wait_or_cancel(after(20ms), PastDeadline::kCancelOrFinish);
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(stops, 0);
    t.join();
  }
  {
    // Still moving when its grace ends: stopped then.
    Op op(false);
    std::atomic<int> stops{0};
    stoppable_while_moving(op, stops, 0ms);
    op.state->set_past_deadline_grace(100ms);
    auto start = Clock::now();
    Status s = op.handle.wait_or_cancel(after(20ms), PastDeadline::kCancelOrFinish);
    EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.to_string();
    EXPECT_GE(Clock::now() - start, 120ms);
    EXPECT_EQ(stops, 1);
  }
}

TEST(TransferWait, ASendIsLeftRunningAtItsDeadlineNeverWithdrawn) {
  // Even one that could stop: the peer may be receiving the message.
  for (bool stoppable : {false, true}) {
    Op op(stoppable);
    auto start = Clock::now();
    Status s = op.handle.wait_or_cancel(after(20ms), PastDeadline::kLeave);
    EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.to_string();
    EXPECT_NE(s.message().find("goes on"), std::string::npos) << s.to_string();
    EXPECT_LT(Clock::now() - start, 5s);
    EXPECT_FALSE(op.handle.test());
    EXPECT_EQ(op.cancels, 0);
    op.state->finish(Status());
    EXPECT_TRUE(op.handle.wait(after(1s)).ok()) << "the handle follows it";
  }
}

TEST(TransferWait, AStoppedWaitCancelsWhatCanStopAndLeavesTheRest) {
  // `block` gives up at once, as a binding's wait on Ctrl-C does.
  auto interrupt = [](Deadline) { return false; };
  Op stoppable(true);
  EXPECT_EQ(stoppable.handle.wait_or_cancel(kNoDeadline, PastDeadline::kCancelOrFinish, interrupt).code(),
            Code::kCancelled);
  EXPECT_EQ(stoppable.handle.status().code(), Code::kCancelled);
  Op moving(false);
  Status s = moving.handle.wait_or_cancel(kNoDeadline, PastDeadline::kCancelOrFinish, interrupt);
  EXPECT_EQ(s.code(), Code::kCancelled);
  EXPECT_NE(s.message().find("goes on"), std::string::npos) << s.to_string();
  EXPECT_FALSE(moving.handle.test());
  moving.state->finish(Status());
  Op send(true);
  EXPECT_EQ(send.handle.wait_or_cancel(kNoDeadline, PastDeadline::kLeave, interrupt).code(), Code::kCancelled);
  EXPECT_EQ(send.cancels, 0) << "a send is not withdrawn on an interrupt either";
  send.state->finish(Status());
  // Stopped after the deadline, while waiting for the end.
  Op late(false);
  int calls = 0;
  auto second_stops = [&](Deadline until) {
    if (++calls == 2) return false;
    (void)late.handle.wait(until);
    return true;
  };
  s = late.handle.wait_or_cancel(after(10ms), PastDeadline::kCancelOrFinish, second_stops);
  EXPECT_EQ(s.code(), Code::kCancelled) << s.to_string();
  EXPECT_EQ(calls, 2);
  late.state->finish(Status());
}

TEST(TransferWait, BlockIsHowItWaits) {
  Op op(false);
  std::thread t = finish_later(op.state, 60ms);
  std::vector<Deadline> asked;
  auto block = [&](Deadline until) {
    asked.push_back(until);
    while (!op.handle.test() && Clock::now() < until) std::this_thread::sleep_for(1ms);
    return true;
  };
  Deadline deadline = after(10ms);
  EXPECT_TRUE(op.handle.wait_or_cancel(deadline, PastDeadline::kCancelOrFinish, block).ok());
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0], deadline);
  EXPECT_EQ(asked[1], kNoDeadline);
  t.join();
}

TEST(TransferWait, AnEmptyHandleIsInvalid) {
  EXPECT_EQ(Transfer().wait_or_cancel(after(1ms), PastDeadline::kLeave).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
