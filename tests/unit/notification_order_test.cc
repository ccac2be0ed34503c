// Notifications arrive in the order they were posted, over both transports
// between two engines of this process: a write's notification, delivered
// only once the write's data has landed, is not overtaken by a standalone
// notification posted after it; a write that fails gives up its place, and
// the notifications after it still arrive.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// Waits (up to `within`) for `heard` to reach `n`.
bool heard_within(const std::atomic<int>& heard, int n, std::chrono::milliseconds within) {
  auto until = Clock::now() + within;
  while (heard.load() < n && Clock::now() < until) std::this_thread::sleep_for(1ms);
  return heard.load() >= n;
}

class NotificationOrder : public PairTest {};

TEST_P(NotificationOrder, AStandaloneNoteDoesNotOvertakeAnEarlierWritesNote) {
  const size_t n = (size_t{32} << 20) + 5;
  std::vector<uint8_t> src(n, 0x3c), dst(n + 9, 0);
  ASSERT_TRUE(a_->reg(src.data(), src.size()).ok());
  Region r = b_->reg(dst.data(), dst.size()).value();
  auto desc = b_->export_region(r, 9, n).value();
  for (int round = 0; round < 3; ++round) {
    Transfer w = ca_->write_async(src.data(), n, desc, 0, "write " + std::to_string(round));
    Transfer s = ca_->notify_async("after " + std::to_string(round));
    auto first = cb_->wait_notification(after(20s));
    auto second = cb_->wait_notification(after(20s));
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ(first.value(), "write " + std::to_string(round));
    EXPECT_EQ(second.value(), "after " + std::to_string(round));
    ASSERT_TRUE(w.wait(after(20s)).ok());
    ASSERT_TRUE(s.wait(after(20s)).ok());
    EXPECT_EQ(dst[9], 0x3c);
    EXPECT_EQ(dst[9 + n - 1], 0x3c);
  }
}

TEST_P(NotificationOrder, AFailedWriteGivesUpItsPlace) {
  std::vector<uint8_t> src(4096, 1), dst(1 << 20, 0);
  ASSERT_TRUE(a_->reg(src.data(), src.size()).ok());
  Region r = b_->reg(dst.data(), dst.size()).value();
  auto desc = b_->export_region(r, 0, 0).value();
  RemoteDescriptor wrong = desc;
  wrong.key ^= 1;  // refused by the owner
  Transfer bad = ca_->write_async(src.data(), src.size(), wrong, 0, "never");
  Transfer note = ca_->notify_async("still delivered");
  EXPECT_FALSE(bad.wait(after(10s)).ok());
  auto got = cb_->wait_notification(after(10s));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got.value(), "still delivered");
  EXPECT_TRUE(note.wait(after(10s)).ok());
  EXPECT_FALSE(cb_->poll_notification().has_value());
}

// The listener hears every queued note, and the connection's end; an event
// loop then takes the notes without blocking a thread.
TEST_P(NotificationOrder, TheListenerHearsEachNoteAndTheEnd) {
  std::atomic<int> heard{0};
  cb_->set_notification_listener([&] { heard.fetch_add(1); });
  for (const char* n : {"one", "two", "three"}) ASSERT_TRUE(ca_->notify(n, after(10s)).ok());
  // The sender hears "queued" as the note is taken, just before the listener runs.
  EXPECT_TRUE(heard_within(heard, 3, 10s));
  EXPECT_EQ(heard.load(), 3);
  for (const char* n : {"one", "two", "three"}) EXPECT_EQ(cb_->poll_notification().value_or(""), n);
  ca_->close();
  EXPECT_TRUE(heard_within(heard, 4, 10s)) << "the connection's end is heard too";
  EXPECT_FALSE(cb_->health().ok());
  cb_->set_notification_listener(nullptr);
}

// The engine-wide stream gives each note with who sent it, in order.
TEST_P(NotificationOrder, TheEngineWideStreamNamesTheSender) {
  EXPECT_FALSE(b_->poll_notification().has_value());
  EXPECT_EQ(b_->wait_notification(after(50ms)).status().code(), Code::kDeadlineExceeded);
  std::atomic<int> heard{0};
  b_->set_notification_listener([&] { heard.fetch_add(1); });
  for (const char* n : {"first", "second"}) ASSERT_TRUE(ca_->notify(n, after(10s)).ok());
  EXPECT_TRUE(heard_within(heard, 2, 10s)) << "the engine's listener hears every connection's notes";
  EXPECT_EQ(heard.load(), 2);
  b_->set_notification_listener(nullptr);
  for (const char* n : {"first", "second"}) {
    auto got = b_->wait_notification(after(10s));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(got->message, n);
    EXPECT_EQ(got->connection_id, cb_->id());
    EXPECT_EQ(got->peer_engine_id, a_->id());
    EXPECT_EQ(got->peer_address, cb_->peer_address());
  }
  EXPECT_FALSE(cb_->poll_notification().has_value()) << "taken once, by the engine-wide stream";
}

INSTANTIATE_TEST_SUITE_P(Transports, NotificationOrder, ::testing::Values("tcp", "local"));

}  // namespace
}  // namespace ferry
