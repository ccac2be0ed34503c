// ChunkQueue: chunking, per-path windows and ack requests, FIFO, sharing between paths, abort and stop.
#include "transport/tcp/chunk_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "core/registry.h"

namespace ferry::tcp {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kChunk = 4096;

class ChunkQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    buf_.resize(1 << 20);
    for (size_t i = 0; i < buf_.size(); ++i) buf_[i] = static_cast<uint8_t>(i * 31 + 7);
    auto r = registry_.add(buf_.data(), buf_.size(), platform::PointerKind{});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }

  // An op whose source is buf_[offset, offset+size).
  std::shared_ptr<OutOp> make_op(uint64_t id, size_t size, size_t offset = 0) {
    auto op = std::make_shared<OutOp>();
    op->frame = wire::DataChunk{.token = id};
    if (size > 0) {
      auto span = registry_.resolve_local(buf_.data() + offset, size, "test buffer");
      EXPECT_TRUE(span.ok()) << span.status().to_string();
      if (span.ok()) op->source.add(span.value());
    }
    EXPECT_EQ(op->source.total(), size);
    return op;
  }

  core::Registry registry_;
  std::vector<uint8_t> buf_;
};

TEST_F(ChunkQueueTest, OddSizedOpIsCutIntoOrderedChunksCoveringItOnce) {
  ChunkQueue q(kChunk, /*window=*/100, /*paths=*/1);
  const size_t size = 5 * kChunk + 123;
  auto op = make_op(1, size, 17);
  ASSERT_TRUE(q.push(op));
  std::vector<int> covered(size, 0);
  std::vector<Chunk> chunks;
  while (auto c = q.try_claim(0)) chunks.push_back(*c);
  ASSERT_EQ(chunks.size(), 6u);
  uint64_t expect_offset = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    EXPECT_EQ(c.op, op);
    EXPECT_EQ(c.offset, expect_offset) << i;
    EXPECT_EQ(c.size, i + 1 < chunks.size() ? kChunk : 123u) << i;
    // The chunk's bytes are the source bytes at that offset.
    std::vector<struct iovec> iov;
    c.op->source.slice(c.offset, c.size, iov);
    ASSERT_EQ(iov.size(), 1u);
    EXPECT_EQ(iov[0].iov_base, buf_.data() + 17 + c.offset);
    for (uint64_t b = c.offset; b < c.offset + c.size; ++b) ++covered[b];
    expect_offset += c.size;
  }
  EXPECT_EQ(expect_offset, size);
  for (size_t b = 0; b < size; ++b) ASSERT_EQ(covered[b], 1) << "byte " << b;
  EXPECT_FALSE(q.try_claim(0).has_value());
}

TEST_F(ChunkQueueTest, ExactMultipleHasNoEmptyTail) {
  ChunkQueue q(kChunk, 100, 1);
  ASSERT_TRUE(q.push(make_op(1, 3 * kChunk)));
  int n = 0;
  while (auto c = q.try_claim(0)) {
    EXPECT_EQ(c->size, kChunk);
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST_F(ChunkQueueTest, ZeroByteOpYieldsExactlyOneEmptyChunk) {
  ChunkQueue q(kChunk, 100, 1);
  auto empty = make_op(1, 0);
  auto next = make_op(2, 10);
  ASSERT_TRUE(q.push(empty));
  ASSERT_TRUE(q.push(next));
  auto c = q.try_claim(0);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->op, empty);
  EXPECT_EQ(c->offset, 0u);
  EXPECT_EQ(c->size, 0u);
  c = q.try_claim(0);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->op, next);
  EXPECT_EQ(c->size, 10u);
  EXPECT_FALSE(q.try_claim(0).has_value());
}

TEST_F(ChunkQueueTest, WindowLimitsUnconfirmedChunksPerPath) {
  const int kWindow = 4;
  ChunkQueue q(kChunk, kWindow, 2);
  ASSERT_TRUE(q.push(make_op(1, 100 * kChunk)));
  for (int i = 0; i < kWindow; ++i) ASSERT_TRUE(q.try_claim(0).has_value()) << i;
  EXPECT_FALSE(q.try_claim(0).has_value());
  EXPECT_EQ(q.in_flight(0), 4u);
  // The other path has its own window.
  for (int i = 0; i < kWindow; ++i) ASSERT_TRUE(q.try_claim(1).has_value()) << i;
  EXPECT_FALSE(q.try_claim(1).has_value());
  // Two confirmed on path 0: exactly two more may go, path 1 stays closed.
  q.on_landed(0, 2);
  EXPECT_EQ(q.in_flight(0), 2u);
  EXPECT_TRUE(q.try_claim(0).has_value());
  EXPECT_TRUE(q.try_claim(0).has_value());
  EXPECT_FALSE(q.try_claim(0).has_value());
  EXPECT_FALSE(q.try_claim(1).has_value());
  EXPECT_EQ(q.in_flight(0), 4u);
  EXPECT_EQ(q.in_flight(1), 4u);
}

TEST_F(ChunkQueueTest, AckRequestedEveryEighthOfTheWindow) {
  for (int window : {1, 2, 3, 5, 8, 16, 32}) {
    ChunkQueue q(kChunk, window, 1);
    ASSERT_TRUE(q.push(make_op(1, 40 * kChunk)));
    const uint64_t every = std::max(1, window / 8);
    for (uint64_t n = 1; n <= 40; ++n) {
      auto c = q.try_claim(0);
      ASSERT_TRUE(c.has_value()) << "window " << window << " chunk " << n;
      EXPECT_EQ(c->ack_request, n % every == 0) << "window " << window << " chunk " << n;
      q.on_landed(0, n);  // keep the window open
    }
  }
}

TEST_F(ChunkQueueTest, StaleOrExcessiveConfirmationsDoNotOpenTheWindow) {
  ChunkQueue q(kChunk, 4, 2);
  ASSERT_TRUE(q.push(make_op(1, 100 * kChunk)));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q.try_claim(0).has_value());
  // Claims more than were sent: counts as all 4, not 100.
  q.on_landed(0, 100);
  EXPECT_EQ(q.in_flight(0), 0u);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q.try_claim(0).has_value()) << i;
  EXPECT_FALSE(q.try_claim(0).has_value());
  EXPECT_EQ(q.in_flight(0), 4u);
  // Stale (below what was already confirmed): no effect.
  q.on_landed(0, 2);
  EXPECT_EQ(q.in_flight(0), 4u);
  EXPECT_FALSE(q.try_claim(0).has_value());
  // A path index that does not exist is ignored and touches no other path.
  q.on_landed(7, 1000);
  q.on_landed(1, 1000);
  EXPECT_EQ(q.in_flight(0), 4u);
  EXPECT_EQ(q.in_flight(1), 0u);
  EXPECT_FALSE(q.try_claim(0).has_value());
  // A fresh cumulative count opens exactly the difference.
  q.on_landed(0, 5);
  EXPECT_EQ(q.in_flight(0), 3u);
  EXPECT_TRUE(q.try_claim(0).has_value());
  EXPECT_FALSE(q.try_claim(0).has_value());
}

TEST_F(ChunkQueueTest, OpsAreServedFifo) {
  ChunkQueue q(kChunk, 100, 1);
  auto a = make_op(1, 3 * kChunk);
  auto b = make_op(2, 2 * kChunk, 3 * kChunk);
  ASSERT_TRUE(q.push(a));
  ASSERT_TRUE(q.push(b));
  std::vector<std::pair<uint64_t, uint64_t>> seen;  // (op id, offset)
  while (auto c = q.try_claim(0)) seen.emplace_back(c->op->data().token, c->offset);
  std::vector<std::pair<uint64_t, uint64_t>> expected = {{1, 0}, {1, kChunk}, {1, 2 * kChunk}, {2, 0}, {2, kChunk}};
  EXPECT_EQ(seen, expected);
}

TEST_F(ChunkQueueTest, TwoPathsShareOneOpWithoutOverlap) {
  ChunkQueue q(kChunk, 1000, 2);
  const size_t size = 37 * kChunk + 5;
  auto op = make_op(1, size);
  ASSERT_TRUE(q.push(op));
  std::mt19937 rng(99);
  std::vector<int> covered(size, 0);
  uint64_t last_offset = 0;
  bool first = true;
  int per_path[2] = {0, 0};
  for (;;) {
    int path = static_cast<int>(rng() % 2);
    auto c = q.try_claim(path);
    if (!c) break;
    ++per_path[path];
    if (!first) {
      EXPECT_GT(c->offset, last_offset);
    }
    first = false;
    last_offset = c->offset;
    for (uint64_t b = c->offset; b < c->offset + c->size; ++b) ++covered[b];
  }
  EXPECT_GT(per_path[0], 0);
  EXPECT_GT(per_path[1], 0);
  EXPECT_EQ(per_path[0] + per_path[1], 38);
  for (size_t b = 0; b < size; ++b) ASSERT_EQ(covered[b], 1) << "byte " << b;
}

TEST_F(ChunkQueueTest, ConcurrentPathsClaimEachChunkOnce) {
  const int kPaths = 4;
  const uint64_t kChunks = 2000;
  ChunkQueue q(64, 100000, kPaths);
  ASSERT_TRUE(q.push(make_op(1, kChunks * 64)));
  std::vector<std::vector<uint64_t>> offsets(kPaths);
  std::vector<std::thread> threads;
  for (int p = 0; p < kPaths; ++p) {
    threads.emplace_back([&, p] {
      while (auto c = q.try_claim(p)) offsets[p].push_back(c->offset);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int> seen(kChunks, 0);
  for (const auto& v : offsets) {
    for (uint64_t off : v) {
      ASSERT_EQ(off % 64, 0u);
      ++seen[off / 64];
    }
  }
  for (uint64_t i = 0; i < kChunks; ++i) ASSERT_EQ(seen[i], 1) << "chunk " << i;
}

TEST_F(ChunkQueueTest, AbortStopsFurtherChunksOfThatOp) {
  ChunkQueue q(kChunk, 100, 1);
  auto a = make_op(1, 10 * kChunk);
  auto b = make_op(2, 2 * kChunk);
  auto c = make_op(3, kChunk);
  ASSERT_TRUE(q.push(a));
  ASSERT_TRUE(q.push(b));
  ASSERT_TRUE(q.push(c));
  ASSERT_EQ(q.try_claim(0)->op, a);
  ASSERT_EQ(q.try_claim(0)->op, a);
  q.abort(a);
  q.abort(b);  // aborted while still waiting behind a
  auto next = q.try_claim(0);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->op, c);
  EXPECT_EQ(next->offset, 0u);
  EXPECT_FALSE(q.try_claim(0).has_value());
}

TEST_F(ChunkQueueTest, StopReturnsUnclaimedOpsAndRefusesMore) {
  ChunkQueue q(kChunk, 100, 1);
  auto a = make_op(1, 3 * kChunk);
  auto b = make_op(2, kChunk);
  auto done = make_op(3, kChunk);
  ASSERT_TRUE(q.push(done));
  ASSERT_EQ(q.try_claim(0)->op, done);  // fully claimed: not returned by stop()
  ASSERT_TRUE(q.push(a));
  ASSERT_TRUE(q.push(b));
  ASSERT_EQ(q.try_claim(0)->op, a);  // partly claimed: returned
  auto left = q.stop();
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], a);
  EXPECT_EQ(left[1], b);
  EXPECT_FALSE(q.try_claim(0).has_value());
  EXPECT_FALSE(q.claim(0).has_value());  // does not block once stopped
  EXPECT_FALSE(q.push(make_op(4, kChunk)));
  EXPECT_TRUE(q.stop().empty());
}

// Runs q->claim(path) on its own thread; the thread owns a reference to the
// queue so a test that gives up waiting can detach it safely.
std::future<std::optional<Chunk>> claim_async(std::shared_ptr<ChunkQueue> q, int path) {
  std::packaged_task<std::optional<Chunk>()> task([q, path] { return q->claim(path); });
  auto fut = task.get_future();
  std::thread(std::move(task)).detach();
  return fut;
}

TEST_F(ChunkQueueTest, BlockingClaimIsWokenByStop) {
  auto q = std::make_shared<ChunkQueue>(kChunk, 4, 1);
  auto fut = claim_async(q, 0);
  // Not ready while there is nothing to claim.
  EXPECT_EQ(fut.wait_for(20ms), std::future_status::timeout);
  q->stop();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready) << "claim() not woken by stop()";
  EXPECT_FALSE(fut.get().has_value());
}

TEST_F(ChunkQueueTest, BlockingClaimIsWokenByPushAndByLanding) {
  auto q = std::make_shared<ChunkQueue>(kChunk, 1, 1);
  auto fut = claim_async(q, 0);
  EXPECT_EQ(fut.wait_for(20ms), std::future_status::timeout);
  auto op = make_op(1, 2 * kChunk);
  ASSERT_TRUE(q->push(op));
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready) << "claim() not woken by push()";
  auto c = fut.get();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->offset, 0u);

  // Window of 1 is now full: the next claim waits for the confirmation.
  fut = claim_async(q, 0);
  EXPECT_EQ(fut.wait_for(20ms), std::future_status::timeout);
  q->on_landed(0, 1);
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready) << "claim() not woken by on_landed()";
  c = fut.get();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->offset, kChunk);
  q->stop();
}

// Failover: a dead path's unconfirmed chunks go first to the survivors.
TEST_F(ChunkQueueTest, FailedPathHandsItsUnconfirmedChunksToSurvivors) {
  ChunkQueue q(kChunk, 8, 2);
  auto op = make_op(1, 10 * kChunk);
  ASSERT_TRUE(q.push(op));
  std::vector<uint64_t> on_dead;
  for (int i = 0; i < 3; ++i) {
    auto c = q.try_claim(0);
    EXPECT_FALSE(c->resent) << "a first trip is no resend";
    on_dead.push_back(c->offset);
  }
  q.on_landed(0, 1);  // the first one landed: only two are unconfirmed
  auto survivor_first = q.try_claim(1);
  ASSERT_TRUE(survivor_first.has_value());
  uint64_t claimed_on_1 = 1;
  EXPECT_EQ(q.fail_path(0), 1);
  EXPECT_EQ(q.live_paths(), 1);
  EXPECT_FALSE(q.try_claim(0).has_value()) << "a dead path claims nothing";
  // The two unconfirmed chunks come back before any new one, in order,
  // marked as resent (the metrics count them).
  for (int i = 1; i <= 2; ++i) {
    auto again = q.try_claim(1);
    EXPECT_EQ(again->offset, on_dead[static_cast<size_t>(i)]);
    EXPECT_TRUE(again->resent);
  }
  claimed_on_1 += 2;
  // Then the rest of the op; every byte is covered exactly once more overall.
  std::set<uint64_t> seen = {on_dead[0], on_dead[1], on_dead[2], survivor_first->offset};
  q.on_landed(1, claimed_on_1);  // keep the window open
  while (auto c = q.try_claim(1)) {
    EXPECT_TRUE(seen.insert(c->offset).second) << "offset " << c->offset << " handed out twice";
    EXPECT_FALSE(c->resent);
    q.on_landed(1, ++claimed_on_1);
    if (seen.size() > 10) break;
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(q.fail_path(1), 0) << "no path left";
}

TEST_F(ChunkQueueTest, OrphanedChunksOfFinishedTransfersAreDropped) {
  ChunkQueue q(kChunk, 8, 2);
  auto op = make_op(1, 2 * kChunk);
  op->state = std::make_shared<TransferState>(1, 1);
  ASSERT_TRUE(q.push(op));
  ASSERT_TRUE(q.try_claim(0).has_value());
  ASSERT_TRUE(q.try_claim(0).has_value());
  op->state->finish(Status());  // the peer acknowledged the whole op meanwhile
  q.fail_path(0);
  EXPECT_FALSE(q.try_claim(1).has_value()) << "nothing of a finished op is resent";
}

TEST_F(ChunkQueueTest, BlockedClaimOfAFailedPathReturns) {
  ChunkQueue q(kChunk, 1, 2);
  auto done = std::async(std::launch::async, [&] { return q.claim(0).has_value(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.fail_path(0);
  ASSERT_EQ(done.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_FALSE(done.get());
}

}  // namespace
}  // namespace ferry::tcp
