// Status/Result and their macros; TransferState completion, waiting, hooks and cancellation.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "core/transfer_state.h"
#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// ---- Status / Result ------------------------------------------------------

TEST(Status, Basics) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.code(), Code::kOk);
  EXPECT_TRUE(ok.message().empty());
  EXPECT_EQ(ok.to_string(), "ok");
  EXPECT_EQ(Status::Ok(), ok);

  Status s(Code::kPeerLost, "connection 3 to 10.0.0.2:7000 closed");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kPeerLost);
  EXPECT_EQ(s.message(), "connection 3 to 10.0.0.2:7000 closed");
  EXPECT_EQ(s.to_string(), "peer_lost: connection 3 to 10.0.0.2:7000 closed");
  EXPECT_EQ(s, Status(Code::kPeerLost, "connection 3 to 10.0.0.2:7000 closed"));
  EXPECT_FALSE(s == Status(Code::kPeerLost, "other"));
  EXPECT_FALSE(s == Status(Code::kUnavailable, s.message()));
}

TEST(Status, CodeNames) {
  const std::pair<Code, const char*> names[] = {
      {Code::kOk, "ok"},
      {Code::kCancelled, "cancelled"},
      {Code::kInvalidArgument, "invalid_argument"},
      {Code::kDeadlineExceeded, "deadline_exceeded"},
      {Code::kNotFound, "not_found"},
      {Code::kOutOfRange, "out_of_range"},
      {Code::kPermissionDenied, "permission_denied"},
      {Code::kUnauthenticated, "unauthenticated"},
      {Code::kResourceExhausted, "resource_exhausted"},
      {Code::kUnavailable, "unavailable"},
      {Code::kPeerLost, "peer_lost"},
      {Code::kBufferTooSmall, "buffer_too_small"},
      {Code::kUnimplemented, "unimplemented"},
      {Code::kDataLoss, "data_loss"},
      {Code::kInternal, "internal"},
  };
  std::set<std::string_view> seen;
  for (const auto& [code, name] : names) {
    EXPECT_EQ(code_name(code), name);
    seen.insert(code_name(code));
  }
  EXPECT_EQ(seen.size(), std::size(names));
  EXPECT_EQ(static_cast<int>(Code::kInternal) + 1, static_cast<int>(std::size(names)));
  EXPECT_EQ(code_name(static_cast<Code>(200)), "unknown");
}

TEST(Status, WithContext) {
  Status s(Code::kNotFound, "region 4 is not registered");
  Status c = s.with_context("write to peer b");
  EXPECT_EQ(c.code(), Code::kNotFound);
  EXPECT_EQ(c.message(), "write to peer b: region 4 is not registered");
  EXPECT_EQ(s.message(), "region 4 is not registered");  // the original is untouched
  EXPECT_EQ(c.with_context("op 9").message(), "op 9: write to peer b: region 4 is not registered");
  EXPECT_TRUE(Status().with_context("anything").ok());
  EXPECT_TRUE(Status().with_context("anything").message().empty());
}

TEST(Result, HoldsAValueOrAnError) {
  Result<int> v(42);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.value(), 42);
  EXPECT_EQ(*v, 42);
  EXPECT_TRUE(v.status().ok());

  Result<int> e(Status(Code::kOutOfRange, "too far"));
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status(), Status(Code::kOutOfRange, "too far"));

  Result<std::string> s(std::string("hello"));
  EXPECT_EQ(s->size(), 5u);
  std::string moved = std::move(s).value();
  EXPECT_EQ(moved, "hello");
}

TEST(Result, FromAnOkStatusIsInternal) {
  Result<int> r{Status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
  EXPECT_FALSE(r.status().message().empty());
}

Status step(bool fail, int& counter) {
  ++counter;
  return fail ? Status(Code::kUnavailable, "step failed") : Status();
}

Status two_steps(bool fail_first, int& counter) {
  FERRY_RETURN_IF_ERROR(step(fail_first, counter));
  FERRY_RETURN_IF_ERROR(step(false, counter));
  return Status(Code::kCancelled, "reached the end");
}

TEST(Macros, ReturnIfError) {
  int counter = 0;
  Status s = two_steps(true, counter);
  EXPECT_EQ(s, Status(Code::kUnavailable, "step failed"));
  EXPECT_EQ(counter, 1) << "did not return early";
  counter = 0;
  s = two_steps(false, counter);
  EXPECT_EQ(s.code(), Code::kCancelled);
  EXPECT_EQ(counter, 2);
}

Result<int> number(int v, int& calls) {
  ++calls;
  if (v < 0) return Status(Code::kInvalidArgument, "negative: " + std::to_string(v));
  return v;
}

Result<int> sum(int a, int b, int& calls, int& reached_end) {
  FERRY_ASSIGN_OR_RETURN(int x, number(a, calls));
  FERRY_ASSIGN_OR_RETURN(const int y, number(b, calls));
  ++reached_end;
  return x + y;
}

Status assign_into_existing(int& out, int v, int& calls) {
  FERRY_ASSIGN_OR_RETURN(out, number(v, calls));
  return Status();
}

TEST(Macros, AssignOrReturn) {
  int calls = 0, end = 0;
  auto r = sum(2, 3, calls, end);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), 5);
  EXPECT_EQ(calls, 2);  // each expression evaluated once
  EXPECT_EQ(end, 1);

  calls = end = 0;
  r = sum(-1, 3, calls, end);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status(), Status(Code::kInvalidArgument, "negative: -1"));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(end, 0);

  calls = end = 0;
  r = sum(1, -7, calls, end);
  EXPECT_EQ(r.status().message(), "negative: -7");
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(end, 0);

  int out = 0;
  EXPECT_TRUE(assign_into_existing(out, 9, calls).ok());
  EXPECT_EQ(out, 9);
  EXPECT_EQ(assign_into_existing(out, -2, calls).code(), Code::kInvalidArgument);
  EXPECT_EQ(out, 9);
}

// ---- TransferState --------------------------------------------------------

TEST(TransferState, LastPartFinishesWithTheFirstError) {
  TransferState st(7, 3);
  EXPECT_EQ(st.id(), 7u);
  EXPECT_FALSE(st.finish_part(Status()));
  EXPECT_FALSE(st.done());
  EXPECT_EQ(st.status().code(), Code::kDeadlineExceeded);  // still running
  EXPECT_FALSE(st.finish_part(Status(Code::kOutOfRange, "first")));
  EXPECT_FALSE(st.done());
  EXPECT_TRUE(st.finish_part(Status(Code::kPeerLost, "second")));
  EXPECT_TRUE(st.done());
  EXPECT_EQ(st.status(), Status(Code::kOutOfRange, "first"));
  EXPECT_EQ(st.wait(kNoDeadline), Status(Code::kOutOfRange, "first"));
  EXPECT_FALSE(st.finish_part(Status()));  // nothing left to finish
  EXPECT_FALSE(st.finish(Status(Code::kCancelled, "late")));
  EXPECT_EQ(st.status().message(), "first");
}

TEST(TransferState, AllPartsOkFinishesOk) {
  TransferState st(1, 2);
  EXPECT_FALSE(st.finish_part(Status()));
  EXPECT_TRUE(st.finish_part(Status()));
  EXPECT_TRUE(st.status().ok());
}

TEST(TransferState, FinishWinsOnce) {
  TransferState st(1, 3);
  EXPECT_TRUE(st.finish(Status(Code::kCancelled, "cancelled by user")));
  EXPECT_TRUE(st.done());
  EXPECT_FALSE(st.finish(Status()));
  EXPECT_FALSE(st.finish(Status(Code::kPeerLost, "lost")));
  EXPECT_FALSE(st.finish_part(Status(Code::kDataLoss, "x")));
  EXPECT_EQ(st.status(), Status(Code::kCancelled, "cancelled by user"));
}

TEST(TransferState, FinishKeepsAnEarlierPartError) {
  TransferState st(1, 2);
  EXPECT_FALSE(st.finish_part(Status(Code::kOutOfRange, "part")));
  EXPECT_TRUE(st.finish(Status(Code::kPeerLost, "lost")));
  EXPECT_EQ(st.status(), Status(Code::kOutOfRange, "part"));
}

TEST(TransferState, WaitWithPastDeadlineOnUnfinishedState) {
  TransferState st(3, 1);
  Status s = st.wait(Clock::now() - 1s);
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded);
  EXPECT_FALSE(st.done());
  auto t0 = Clock::now();
  s = st.wait(after(20ms));
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded);
  EXPECT_GE(Clock::now() - t0, 20ms);
  // A finished state answers at once even with a past deadline.
  ASSERT_TRUE(st.finish(Status()));
  EXPECT_TRUE(st.wait(Clock::now() - 1s).ok());
}

TEST(TransferState, WaitFromAnotherThreadIsWokenByFinish) {
  auto st = std::make_shared<TransferState>(4, 1);
  std::promise<void> started;
  auto waiter = std::async(std::launch::async, [st, &started] {
    started.set_value();
    return st->wait(after(10s));  // deadline only as a safety net
  });
  started.get_future().wait();
  EXPECT_EQ(waiter.wait_for(5ms), std::future_status::timeout);
  auto t0 = Clock::now();
  ASSERT_TRUE(st->finish_part(Status(Code::kBufferTooSmall, "need 10")));
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_EQ(waiter.get(), Status(Code::kBufferTooSmall, "need 10"));
}

TEST(TransferState, OnFinishRunsExactlyOnce) {
  TransferState st(5, 2);
  int calls = 0;
  Status seen;
  st.on_finish([&](const Status& s) {
    ++calls;
    seen = s;
  });
  EXPECT_EQ(calls, 0);
  st.finish_part(Status(Code::kDataLoss, "garbage"));
  EXPECT_EQ(calls, 0);
  st.finish_part(Status());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, Status(Code::kDataLoss, "garbage"));
  st.finish(Status(Code::kCancelled, "again"));
  st.finish_part(Status());
  EXPECT_EQ(calls, 1);
}

TEST(TransferState, OnFinishViaFinishRunsOnce) {
  TransferState st(5, 2);
  int calls = 0;
  st.on_finish([&](const Status& s) {
    ++calls;
    EXPECT_EQ(s.code(), Code::kPeerLost);
  });
  st.finish(Status(Code::kPeerLost, "x"));
  st.finish(Status(Code::kPeerLost, "y"));
  EXPECT_EQ(calls, 1);
}

TEST(TransferState, OnFinishInstalledAfterFinishingRunsAtOnce) {
  TransferState st(6, 1);
  ASSERT_TRUE(st.finish_part(Status(Code::kUnavailable, "gone")));
  int calls = 0;
  Status seen;
  st.on_finish([&](const Status& s) {
    ++calls;
    seen = s;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, Status(Code::kUnavailable, "gone"));
  st.finish(Status());
  EXPECT_EQ(calls, 1);
}

// A transport's own hook (a write's notification) and the application's
// (an event loop's wake-up) both run, in the order they were added.
TEST(TransferState, SeveralHooksAllRunInOrder) {
  auto st = std::make_shared<TransferState>(9, 1);
  Transfer t(st);
  std::vector<int> order;
  st->on_finish([&](const Status&) { order.push_back(1); });
  t.on_finish([&](const Status& s) {
    order.push_back(2);
    EXPECT_EQ(s.code(), Code::kOutOfRange);
  });
  st->finish(Status(Code::kOutOfRange, "past the end"));
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  t.on_finish([&](const Status&) { order.push_back(3); });  // already finished: at once
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  int empty_calls = 0;
  Transfer().on_finish([&](const Status& s) {
    ++empty_calls;
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
  });
  EXPECT_EQ(empty_calls, 1);
}

TEST(TransferState, CancelCallsTheCanceller) {
  TransferState st(8, 1);
  EXPECT_FALSE(st.cancel(true));  // no canceller yet
  int calls = 0;
  st.set_canceller([&] {
    ++calls;
    return st.finish(Status(Code::kCancelled, "withdrawn"));
  });
  EXPECT_TRUE(st.cancel(true));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(st.done());
  EXPECT_EQ(st.status().code(), Code::kCancelled);
  // Finishing dropped the canceller: nothing to call any more.
  EXPECT_FALSE(st.cancel(true));
  EXPECT_EQ(calls, 1);
}

TEST(TransferState, CancellerIsDroppedOnceFinishedAndIgnoredAfter) {
  TransferState st(9, 1);
  int calls = 0;
  st.set_canceller([&] {
    ++calls;
    return true;
  });
  ASSERT_TRUE(st.finish_part(Status()));
  EXPECT_FALSE(st.cancel(true));
  st.set_canceller([&] {
    ++calls;
    return true;
  });
  EXPECT_FALSE(st.cancel(true));
  EXPECT_EQ(calls, 0);
}

TEST(TransferState, BytesAndTransferHandle) {
  auto st = std::make_shared<TransferState>(11, 1);
  st->set_bytes(123);
  Transfer t(st);
  EXPECT_EQ(t.id(), 11u);
  EXPECT_EQ(t.bytes(), 123u);
  EXPECT_FALSE(t.test());
  EXPECT_EQ(t.wait(Clock::now()).code(), Code::kDeadlineExceeded);
  st->finish(Status());
  EXPECT_TRUE(t.test());
  EXPECT_TRUE(t.wait().ok());
  EXPECT_TRUE(t.status().ok());

  Transfer empty;
  EXPECT_TRUE(empty.test());
  EXPECT_EQ(empty.id(), 0u);
  EXPECT_EQ(empty.bytes(), 0u);
  EXPECT_EQ(empty.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(empty.wait().code(), Code::kInvalidArgument);
  EXPECT_FALSE(empty.cancel());
}

// value() of a failed Result prints the status, so a program that skipped
// ok() still says why it stopped (it used to end in bad_variant_access).
TEST(ResultDeathTest, ValueOfAnErrorPrintsTheStatusAndAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Result<int> failed(Status(Code::kNotFound, "buffer at 0x1000 is not registered"));
  EXPECT_DEATH((void)failed.value(),
               "ferry: value\\(\\) of a failed Result: not_found: buffer at 0x1000 is not registered");
  EXPECT_DEATH((void)*failed, "not_found");
  Result<std::string> moved(Status(Code::kPeerLost, "peer 10.0.0.2:7000 went silent"));
  EXPECT_DEATH((void)std::move(moved).value(), "peer_lost: peer 10.0.0.2:7000 went silent");
  const Result<int> ok(7);
  EXPECT_EQ(ok.value(), 7);
}

}  // namespace
}  // namespace ferry
