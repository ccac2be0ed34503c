// The notification queue's entries: a write that failed or was cancelled
// gives its number up with its tag, which is queued in its place as not
// delivered (Connection::wait_note); a number given up without a tag queues
// nothing; the string forms drop what was not delivered; and every byte a
// peer makes the queue hold, tags included, counts against its budget; once
// refused, nothing more is queued.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <tuple>

#include "core/notification_queue.h"

namespace ferry::core {
namespace {

using Entry = NotificationQueue::Entry;

std::optional<Entry> next(NotificationQueue& q) { return q.poll(/*delivered_only=*/false); }

TEST(NotificationQueue, AFailedWritesTagTakesItsPlaceAsNotDelivered) {
  ByteBudget budget(1 << 20);
  NotificationQueue q(&budget);
  ASSERT_TRUE(q.push_numbered(3, false, "three").ok());       // early: waits for 1 and 2
  ASSERT_TRUE(q.push_numbered(2, true, "blocks 2").ok());     // a failed write's tag
  EXPECT_FALSE(next(q).has_value()) << "number 1 is due first";
  ASSERT_TRUE(q.push_numbered(1, false, "one").ok());
  auto a = next(q), b = next(q), c = next(q);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->text, "one");
  EXPECT_TRUE(a->delivered);
  EXPECT_EQ(b->text, "blocks 2");
  EXPECT_FALSE(b->delivered);
  EXPECT_EQ(c->text, "three");
  EXPECT_TRUE(c->delivered);
  EXPECT_FALSE(next(q).has_value());
  EXPECT_EQ(budget.held(), 0u) << "every byte held goes back once taken";
}

// Once its connection failed the queue takes nothing more from the peer; what
// it holds stays for the application, and what it refused holds no budget.
TEST(NotificationQueue, NothingIsQueuedAfterRefuseNew) {
  ByteBudget budget(1 << 20);
  NotificationQueue q(&budget);
  ASSERT_TRUE(q.push_numbered(1, false, "one").ok());
  ASSERT_TRUE(q.push_numbered(3, false, "three").ok());  // waits for 2
  q.refuse_new();
  const size_t held = budget.held();
  for (auto [seq, skip, text] : {std::tuple{2, false, "two"}, {4, false, "four"}, {0, false, "unnumbered"},
                                 {5, true, "a failed write's tag"}}) {
    bool ran = false;
    Status s = q.push_numbered(seq, skip, text, [&] { ran = true; });
    EXPECT_EQ(s.code(), Code::kCancelled) << text;
    EXPECT_FALSE(ran) << text << ": confirmed to its sender although refused";
  }
  EXPECT_EQ(budget.held(), held);
  auto one = next(q);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->text, "one");
  EXPECT_FALSE(next(q).has_value()) << "three waits for a two that never comes";
}

TEST(NotificationQueue, ASkipWithoutATagQueuesNothingAndASecondOneIsIgnored) {
  ByteBudget budget(1 << 20);
  NotificationQueue q(&budget);
  ASSERT_TRUE(q.push_numbered(2, true, {}).ok());
  ASSERT_TRUE(q.push_numbered(1, false, "one").ok());
  ASSERT_TRUE(q.push_numbered(2, true, "late tag").ok());  // already given up: ignored
  ASSERT_TRUE(q.push_numbered(3, true, "three").ok());
  ASSERT_TRUE(q.push_numbered(3, false, "three again").ok());  // arrived: a second copy wins
  auto a = next(q), b = next(q);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->text, "one");
  EXPECT_EQ(b->text, "three");
  EXPECT_FALSE(b->delivered) << "3 was given up before a copy of its note came";
  EXPECT_FALSE(next(q).has_value());
  EXPECT_EQ(budget.held(), 0u);
}

TEST(NotificationQueue, TheStringFormsDropWhatWasNotDelivered) {
  NotificationQueue q;
  ASSERT_TRUE(q.push_numbered(1, true, "failed").ok());
  ASSERT_TRUE(q.push_numbered(2, false, "landed").ok());
  ASSERT_TRUE(q.push_numbered(3, true, "failed too").ok());
  auto got = q.poll(/*delivered_only=*/true);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->text, "landed");
  std::atomic<bool> stopped{false};
  Entry e;
  EXPECT_EQ(q.wait(after(std::chrono::milliseconds(20)), stopped, e, /*delivered_only=*/true),
            NotificationQueue::Wait::kDeadline);
  EXPECT_FALSE(q.poll(false).has_value()) << "the wait dropped the last tag on its way";
}

TEST(NotificationQueue, TagsCountAgainstTheBudget) {
  ByteBudget budget(10 * (NotificationQueue::kNoteOverhead + 1000));
  NotificationQueue q(&budget);
  const std::string tag(1000, 't');
  Status s;
  uint64_t seq = 1;
  for (; seq < 100 && s.ok(); ++seq) s = q.push_numbered(seq, true, tag);
  EXPECT_EQ(s.code(), Code::kResourceExhausted) << "a peer failing writes cannot make the queue hold more";
  EXPECT_LE(budget.held(), budget.limit());
  while (next(q)) {
  }
  EXPECT_EQ(budget.held(), 0u);
}

}  // namespace
}  // namespace ferry::core
