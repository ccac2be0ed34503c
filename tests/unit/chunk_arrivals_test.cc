// ChunkArrivals: a resent chunk lands once, a chunk still arriving on
// another path names that path, and an operation completes only when every
// byte landed and nothing is still being written into its memory.
#include "transport/tcp/chunk_arrivals.h"

#include <gtest/gtest.h>

namespace ferry::tcp {
namespace {

TEST(ChunkArrivals, CompletesOnceWhenEveryChunkLanded) {
  ChunkArrivals a(300);
  for (uint64_t off : {0, 100, 200}) ASSERT_TRUE(a.begin(off, 0).land);
  EXPECT_FALSE(a.end(200, 0, 100, true).value());
  EXPECT_FALSE(a.end(0, 0, 100, true).value());
  EXPECT_TRUE(a.end(100, 0, 100, true).value());
  EXPECT_TRUE(a.complete());
  EXPECT_EQ(a.received(), 300u);
  EXPECT_FALSE(a.begin(0, 1).land) << "nothing lands after completion";
}

TEST(ChunkArrivals, AResentChunkThatLandedAlreadyIsDrained) {
  ChunkArrivals a(200);
  ASSERT_TRUE(a.begin(0, 0).land);
  ASSERT_FALSE(a.end(0, 0, 100, true).value());
  ChunkArrivals::Begin again = a.begin(0, 1);
  EXPECT_FALSE(again.land);
  EXPECT_EQ(again.stalled_path, -1);
  EXPECT_EQ(a.received(), 100u);
}

// The case that matters: path 0 stalls in the middle of chunk 0, the peer
// resends it on path 1, which lands it; the operation must wait until path 0
// stops writing (it is shut and breaks off), or its late bytes would land in
// memory the application already took back.
TEST(ChunkArrivals, ResendWhileTheFirstCopyIsStillArrivingWaitsForIt) {
  ChunkArrivals a(100);
  ASSERT_TRUE(a.begin(0, 0).land);
  ChunkArrivals::Begin resend = a.begin(0, 1);
  EXPECT_TRUE(resend.land);
  EXPECT_EQ(resend.stalled_path, 0);
  EXPECT_FALSE(a.end(0, 1, 100, true).value()) << "complete while path 0 still writes into the memory";
  EXPECT_EQ(a.received(), 100u);
  EXPECT_TRUE(a.end(0, 0, 0, false).value()) << "the stalled path broke off: now complete";
  EXPECT_FALSE(a.end(0, 0, 0, false).value()) << "completes once";
}

TEST(ChunkArrivals, TheStalledCopyFinishingFirstCountsOnce) {
  ChunkArrivals a(100);
  ASSERT_TRUE(a.begin(0, 0).land);
  ASSERT_EQ(a.begin(0, 1).stalled_path, 0);
  EXPECT_FALSE(a.end(0, 0, 100, true).value()) << "path 1 still writes";
  EXPECT_TRUE(a.end(0, 1, 100, true).value());
  EXPECT_EQ(a.received(), 100u);
}

TEST(ChunkArrivals, AChunkThatBrokeOffLeavesTheOperationOpenForItsResend) {
  ChunkArrivals a(100);
  ASSERT_TRUE(a.begin(0, 2).land);
  EXPECT_FALSE(a.end(0, 2, 0, false).value());
  ChunkArrivals::Begin resend = a.begin(0, 3);
  EXPECT_TRUE(resend.land);
  EXPECT_EQ(resend.stalled_path, -1);
  EXPECT_TRUE(a.end(0, 3, 100, true).value());
}

// The sender aborts while a chunk is still being written: the operation
// ends only when that chunk does, and nothing lands after the abort.
TEST(ChunkArrivals, AnAbortWaitsForTheChunksStillArriving) {
  ChunkArrivals a(300);
  ASSERT_TRUE(a.begin(0, 0).land);
  ChunkArrivals::Abort abort = a.abort(200, 1);
  EXPECT_FALSE(abort.over) << "a chunk is still being written";
  EXPECT_EQ(abort.stalled_path, -1) << "the chunk being written is another one";
  EXPECT_TRUE(a.aborted());
  EXPECT_FALSE(a.begin(100, 1).land) << "nothing lands after the abort";
  EXPECT_TRUE(a.end(0, 0, 100, true).value());
  ChunkArrivals idle(300);
  EXPECT_TRUE(idle.abort(0, 0).over) << "nothing arriving: over at once";
  EXPECT_FALSE(idle.end(0, 0, 0, false).value());
}

// The sender moved a chunk off a path that stalled and, the operation being
// aborted, sent it empty and marked aborted: that path is named, so its late
// bytes can be stopped.
TEST(ChunkArrivals, AnAbortedResendNamesThePathStillBringingTheChunk) {
  ChunkArrivals a(300);
  ASSERT_TRUE(a.begin(100, 0).land);
  ChunkArrivals::Abort abort = a.abort(100, 2);
  EXPECT_EQ(abort.stalled_path, 0);
  EXPECT_FALSE(abort.over);
  EXPECT_TRUE(a.end(100, 0, 0, false).value()) << "over once the stalled path broke off";
}

// A resend that is not landed (the chunk landed already, or the operation
// was aborted) still names the path that was bringing the first copy.
TEST(ChunkArrivals, AResendThatIsDrainedStillNamesTheStalledPath) {
  ChunkArrivals a(300);
  ASSERT_TRUE(a.begin(0, 0).land);
  ASSERT_FALSE(a.abort(100, 2).over);
  ChunkArrivals::Begin resend = a.begin(0, 1);
  EXPECT_FALSE(resend.land);
  EXPECT_EQ(resend.stalled_path, 0);
}

// An abort that crosses the last chunk landing leaves the operation complete
// (the peer failed it on its side; every byte is here all the same).
TEST(ChunkArrivals, AnAbortAfterCompletionKeepsItComplete) {
  ChunkArrivals a(100);
  ASSERT_TRUE(a.begin(0, 0).land);
  ASSERT_TRUE(a.end(0, 0, 100, true).value());
  ChunkArrivals::Abort late = a.abort(0, 1);
  EXPECT_FALSE(late.over) << "it ended before";
  EXPECT_FALSE(a.aborted());
  EXPECT_TRUE(a.complete());
}

TEST(ChunkArrivals, MoreBytesThanTheOperationHoldsIsDataLoss) {
  ChunkArrivals a(100);
  ASSERT_TRUE(a.begin(0, 0).land);
  ASSERT_TRUE(a.begin(64, 0).land);
  ASSERT_FALSE(a.end(0, 0, 64, true).value());
  Result<bool> over = a.end(64, 0, 64, true);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), Code::kDataLoss);
  EXPECT_NE(over.status().message().find("128 bytes landed for an operation of 100"), std::string::npos)
      << over.status().message();
}

}  // namespace
}  // namespace ferry::tcp
