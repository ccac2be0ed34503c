// Writes that fail or are cancelled, as the target sees them, over both
// transports between two engines of this process: the target learns the
// write's notification as not delivered (Connection::wait_note), in its
// place among the others; a write cancelled while it moves data stops, and
// once cancel returned no byte of it lands any more; a write cancelled
// before any of it went is told in order; cancelling a finished write
// changes nothing; the connection goes on either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "engine_pair.h"
#include "sanitizer_build.h"
#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

class CancelWrite : public PairTest {
 protected:
  bool tcp() const { return std::string_view(GetParam()) == "tcp"; }

  // The connection still carries a write and its notification.
  void still_works() {
    std::vector<uint8_t> src(100000, 0x5a), dst(100000, 0);
    ASSERT_TRUE(a_->reg(src.data(), src.size()).ok());
    Region r = b_->reg(dst.data(), dst.size()).value();
    auto far = b_->export_region(r).value();
    ASSERT_TRUE(ca_->write(src.data(), src.size(), far, 0, "still", after(20s)).ok());
    auto note = cb_->wait_note(after(20s));
    ASSERT_TRUE(note.ok()) << note.status().to_string();
    EXPECT_EQ(note->message, "still");
    EXPECT_TRUE(note->delivered);
    EXPECT_EQ(dst.back(), 0x5a);
  }
};

TEST_P(CancelWrite, AFailedWritesTagReachesTheTargetInItsPlace) {
  std::vector<uint8_t> src(300000, 1), dst(1 << 20, 0);
  ASSERT_TRUE(a_->reg(src.data(), src.size()).ok());
  Region r = b_->reg(dst.data(), dst.size()).value();
  RemoteDescriptor wrong = b_->export_region(r).value();
  wrong.key ^= 1;  // refused by the owner
  Transfer before = ca_->notify_async("before");
  Transfer bad = ca_->write_async(src.data(), src.size(), wrong, 0, "blocks 7");
  Transfer after_it = ca_->notify_async("after");
  EXPECT_FALSE(bad.wait(after(20s)).ok());
  for (auto [text, delivered] : {std::pair{"before", true}, {"blocks 7", false}, {"after", true}}) {
    auto note = cb_->wait_note(after(20s));
    ASSERT_TRUE(note.ok()) << note.status().to_string();
    EXPECT_EQ(note->message, text);
    EXPECT_EQ(note->delivered, delivered) << text;
  }
  EXPECT_TRUE(after_it.wait(after(20s)).ok());
  still_works();
}

TEST_P(CancelWrite, ABatchIntoAWithdrawnExportIsToldByItsTag) {
  std::vector<uint8_t> src(1 << 20, 2), dst(1 << 20, 0);
  Region mine = a_->reg(src.data(), src.size()).value();
  Region theirs = b_->reg(dst.data(), dst.size()).value();
  RemoteDescriptor far = b_->export_region(theirs).value();
  auto pools = ca_->prepare_blocks(std::span(&mine, 1), std::span(&far, 1));
  ASSERT_TRUE(pools.ok());
  ASSERT_TRUE(b_->dereg(theirs).ok());
  std::vector<Block> blocks;
  for (uint64_t i = 0; i < 64; ++i) blocks.push_back({0, 0, i * 8192, (63 - i) * 8192, 4096 + i});
  EXPECT_FALSE(ca_->write_blocks_async(*pools, blocks, "kv 42").wait(after(20s)).ok());
  auto note = cb_->wait_note(after(20s));
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(note->message, "kv 42");
  EXPECT_FALSE(note->delivered);
  EXPECT_FALSE(cb_->poll_note().has_value());
}

TEST_P(CancelWrite, CancelStopsAWriteMovingDataAndNothingOfItLandsAfter) {
  if (sanitizer_build::kThread && !tcp()) {
    GTEST_SKIP() << sanitizer_build::kCopyLocksOutliveTheirThread;
  }
  const size_t n = size_t{512} << 20;
  std::vector<uint8_t> src(n, 0xa5), dst(n, 0);
  ASSERT_TRUE(a_->reg(src.data(), src.size()).ok());
  Region r = b_->reg(dst.data(), dst.size()).value();
  auto far = b_->export_region(r).value();  // a fresh export: the local transport's first copy is the helpers'
  Transfer w = ca_->write_async(src.data(), n, far, 0, "big");
  // Moving data: its first bytes landed.
  if (sanitizer_build::kThread) {
    // Looking at bytes while they land races with the landing by design:
    // under the sanitizer the test waits a while instead.
    std::this_thread::sleep_for(100ms);
  } else {
    auto until = Clock::now() + 20s;
    while (reinterpret_cast<volatile uint8_t*>(dst.data())[0] == 0 && !w.test() && Clock::now() < until) {
      std::this_thread::yield();
    }
  }
  bool stopped = w.cancel();
  ASSERT_TRUE(w.test()) << "cancel returns once the write is over";
  std::vector<uint8_t> seen(dst);
  auto note = cb_->wait_note(after(20s));
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(note->message, "big");
  if (stopped) {
    EXPECT_EQ(w.status().code(), Code::kCancelled) << w.status().to_string();
    EXPECT_FALSE(note->delivered) << "the target learns the write did not complete";
    std::this_thread::sleep_for(300ms);
    EXPECT_TRUE(std::equal(seen.begin(), seen.end(), dst.begin())) << "a byte landed after cancel returned";
    EXPECT_NE(std::count(dst.begin(), dst.end(), 0), 0) << "a cancelled 512 MiB write landed whole";
  } else {
    EXPECT_TRUE(w.status().ok()) << w.status().to_string();
    EXPECT_TRUE(note->delivered);
    EXPECT_EQ(std::count(dst.begin(), dst.end(), 0xa5), static_cast<long>(n));
  }
  // Over TCP the write is still on its way when its first chunk landed: it
  // stops. The local transport may copy 512 MiB before cancel is heard.
  if (tcp()) {
    EXPECT_TRUE(stopped) << "a 512 MiB write over loopback finished before cancel";
  }
  still_works();
}

TEST_P(CancelWrite, AWriteCancelledBeforeAnyOfItWentIsToldInOrder) {
  if (sanitizer_build::kThread && !tcp()) {
    GTEST_SKIP() << sanitizer_build::kCopyLocksOutliveTheirThread;
  }
  const size_t big = size_t{256} << 20, small = size_t{2} << 20;
  std::vector<uint8_t> src(big, 3), dst(big + small, 0);
  ASSERT_TRUE(a_->reg(src.data(), src.size()).ok());
  Region r = b_->reg(dst.data(), dst.size()).value();
  auto far = b_->export_region(r).value();
  Transfer first = ca_->write_async(src.data(), big, far, 0, "first");
  Transfer second = ca_->write_async(src.data(), small, far, big, "second");
  bool stopped = second.cancel();
  ASSERT_TRUE(second.test());
  EXPECT_TRUE(first.wait(after(60s)).ok());
  auto a = cb_->wait_note(after(20s)), b = cb_->wait_note(after(20s));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->message, "first");
  EXPECT_TRUE(a->delivered);
  EXPECT_EQ(b->message, "second");
  EXPECT_EQ(b->delivered, !stopped);
  EXPECT_EQ(second.status().code(), stopped ? Code::kCancelled : Code::kOk);
  if (stopped) {
    EXPECT_EQ(std::count(dst.begin() + big, dst.end(), 0), static_cast<long>(small));
  }
  // Over TCP it waits behind the first, in the same queue, until cancelled.
  if (tcp()) {
    EXPECT_TRUE(stopped);
  }
  still_works();
}

TEST_P(CancelWrite, CancellingAFinishedWriteChangesNothing) {
  std::vector<uint8_t> src(70000, 9), dst(70000, 0);
  ASSERT_TRUE(a_->reg(src.data(), src.size()).ok());
  Region r = b_->reg(dst.data(), dst.size()).value();
  auto far = b_->export_region(r).value();
  Transfer w = ca_->write_async(src.data(), src.size(), far, 0, "done");
  ASSERT_TRUE(w.wait(after(20s)).ok());
  EXPECT_FALSE(w.cancel());
  EXPECT_TRUE(w.status().ok());
  auto note = cb_->wait_note(after(20s));
  ASSERT_TRUE(note.ok());
  EXPECT_TRUE(note->delivered);
  EXPECT_EQ(dst.back(), 9);
}

INSTANTIATE_TEST_SUITE_P(Transports, CancelWrite, ::testing::Values("tcp", "local"));

}  // namespace
}  // namespace ferry
