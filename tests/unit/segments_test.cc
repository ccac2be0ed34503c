// SegmentList: slicing into iovecs, copy_in, regions touched, and ChunkAccess liveness checks.
#include "core/segments.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "core/registry.h"

namespace ferry::core {
namespace {

constexpr platform::PointerKind kHost{};

std::vector<uint8_t> gather(const std::vector<struct iovec>& iov) {
  std::vector<uint8_t> out;
  for (const auto& v : iov) {
    const auto* p = static_cast<const uint8_t*>(v.iov_base);
    out.insert(out.end(), p, p + v.iov_len);
  }
  return out;
}

class SegmentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(42);
    buf_.resize(64 * 1024);
    for (auto& b : buf_) b = static_cast<uint8_t>(rng());
    auto r = reg_.add(buf_.data(), buf_.size(), kHost);
    ASSERT_TRUE(r.ok());
  }

  MemorySpan span(size_t off, size_t len) {
    auto r = reg_.resolve_local(buf_.data() + off, len, "test");
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r.value() : MemorySpan{};
  }

  // A list of `n` spans at random places (possibly overlapping), and the
  // bytes it stands for.
  SegmentList random_list(std::mt19937_64& rng, int n, std::vector<uint8_t>& expected) {
    SegmentList list;
    expected.clear();
    for (int i = 0; i < n; ++i) {
      size_t len = 1 + rng() % 3000;
      size_t off = rng() % (buf_.size() - len);
      list.add(span(off, len));
      expected.insert(expected.end(), buf_.begin() + off, buf_.begin() + off + len);
    }
    return list;
  }

  Registry reg_;
  std::vector<uint8_t> buf_;
};

TEST_F(SegmentsTest, AddTracksTotalAndSkipsEmptySpans) {
  SegmentList list;
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.total(), 0u);
  list.add(span(0, 100));
  list.add(MemorySpan{nullptr, nullptr, 0});
  list.add(span(500, 28));
  EXPECT_FALSE(list.empty());
  EXPECT_EQ(list.total(), 128u);
  ASSERT_EQ(list.spans().size(), 2u);
  EXPECT_EQ(list.spans()[1].data, buf_.data() + 500);
}

TEST_F(SegmentsTest, AdjacentSpansOfOneRegionBecomeOne) {
  SegmentList list;
  list.add(span(100, 50));
  list.add(span(150, 25));  // continues it
  list.add(span(400, 10));  // does not
  list.add(span(175, 5));   // continues the first, but not the last
  EXPECT_EQ(list.total(), 90u);
  ASSERT_EQ(list.spans().size(), 3u);
  EXPECT_EQ(list.spans()[0].size, 75u);
  std::vector<uint8_t> expect(buf_.begin() + 100, buf_.begin() + 175);
  expect.insert(expect.end(), buf_.begin() + 400, buf_.begin() + 410);
  expect.insert(expect.end(), buf_.begin() + 175, buf_.begin() + 180);
  std::vector<struct iovec> iov;
  list.slice(0, list.total(), iov);
  EXPECT_EQ(gather(iov), expect);
}

// Blocks added by region: one reference for a run of them, not one a block,
// and a part keeps the region alive after the list it came from is gone.
TEST_F(SegmentsTest, BlocksOfOneRegionHoldItOnceAndPartsKeepItAlive) {
  MemorySpan whole = span(0, buf_.size());
  const long before = whole.region.use_count();
  std::mt19937_64 rng(5);
  std::vector<uint8_t> expected;
  std::optional<SegmentList> list(std::in_place);
  list->reserve(1000);
  for (int i = 0; i < 1000; ++i) {
    size_t off = (rng() % 1000) * 64 + 1;  // never continuing the last block
    size_t len = 1 + rng() % 63;
    list->add(whole.region, whole.data + off, len);
    expected.insert(expected.end(), buf_.begin() + off, buf_.begin() + off + len);
  }
  EXPECT_EQ(whole.region.use_count(), before + 1) << "a reference a block";
  SegmentList copy = *list;
  EXPECT_EQ(whole.region.use_count(), before + 2);
  SegmentList part = list->part(17, list->total() - 40);
  list.reset();
  copy = SegmentList();
  EXPECT_EQ(whole.region.use_count(), before + 1) << "the part's spans lost their region";
  ChunkAccess access(part, 0, part.total());
  EXPECT_TRUE(access.ok());
  std::vector<struct iovec> iov;
  part.slice(0, part.total(), iov);
  EXPECT_EQ(gather(iov), std::vector<uint8_t>(expected.begin() + 17, expected.end() - 23));
}

TEST_F(SegmentsTest, PartHoldsTheSameBytesAsASlice) {
  std::mt19937_64 rng(11);
  std::vector<uint8_t> expected;
  SegmentList list = random_list(rng, 40, expected);
  for (int k = 0; k < 300; ++k) {
    uint64_t off = rng() % list.total();
    uint64_t len = rng() % (list.total() - off + 1);
    SegmentList part = list.part(off, len);
    ASSERT_EQ(part.total(), len);
    std::vector<struct iovec> iov;
    part.slice(0, len, iov);
    ASSERT_EQ(gather(iov), std::vector<uint8_t>(expected.begin() + static_cast<long>(off),
                                                expected.begin() + static_cast<long>(off + len)))
        << "part at " << off << " of " << len;
  }
}

TEST_F(SegmentsTest, SliceMatchesReferenceBytes) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<uint8_t> expected;
    SegmentList list = random_list(rng, 1 + static_cast<int>(rng() % 8), expected);
    ASSERT_EQ(list.total(), expected.size());
    for (int k = 0; k < 100; ++k) {
      uint64_t off = rng() % (list.total() + 1);
      uint64_t size = rng() % (list.total() - off + 1);
      std::vector<struct iovec> iov;
      list.slice(off, size, iov);
      for (const auto& v : iov) ASSERT_GT(v.iov_len, 0u) << "empty iovec";
      ASSERT_LE(iov.size(), list.spans().size());
      std::vector<uint8_t> got = gather(iov);
      ASSERT_EQ(got.size(), size) << "off " << off;
      ASSERT_TRUE(std::equal(got.begin(), got.end(), expected.begin() + static_cast<long>(off)))
          << "round " << round << " off " << off << " size " << size;
    }
    // The whole list, and nothing for an empty slice.
    std::vector<struct iovec> all;
    list.slice(0, list.total(), all);
    EXPECT_EQ(all.size(), list.spans().size());
    EXPECT_EQ(gather(all), expected);
    std::vector<struct iovec> none;
    list.slice(list.total(), 0, none);
    list.slice(0, 0, none);
    EXPECT_TRUE(none.empty());
  }
}

TEST_F(SegmentsTest, SliceAppendsToExistingVector) {
  SegmentList list;
  list.add(span(0, 10));
  list.add(span(100, 10));
  std::vector<struct iovec> iov = {{nullptr, 0}};
  list.slice(5, 10, iov);
  ASSERT_EQ(iov.size(), 3u);
  EXPECT_EQ(iov[1].iov_base, buf_.data() + 5);
  EXPECT_EQ(iov[1].iov_len, 5u);
  EXPECT_EQ(iov[2].iov_base, buf_.data() + 100);
  EXPECT_EQ(iov[2].iov_len, 5u);
}

TEST_F(SegmentsTest, SliceStartingExactlyAtASpanBoundary) {
  SegmentList list;
  list.add(span(0, 10));
  list.add(span(100, 10));
  list.add(span(200, 10));
  std::vector<struct iovec> iov;
  list.slice(10, 10, iov);
  ASSERT_EQ(iov.size(), 1u);
  EXPECT_EQ(iov[0].iov_base, buf_.data() + 100);
  EXPECT_EQ(iov[0].iov_len, 10u);
}

TEST_F(SegmentsTest, CopyInWritesTheRightPlaces) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 50; ++round) {
    std::vector<size_t> where;  // list byte i lives at buf_[where[i]]
    // Non-overlapping spans so that the model is exact: disjoint slots of 4 KiB.
    SegmentList list;
    std::vector<size_t> slots(16);
    for (size_t i = 0; i < slots.size(); ++i) slots[i] = i;
    std::shuffle(slots.begin(), slots.end(), rng);
    int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      size_t len = 1 + rng() % 4096;
      size_t off = slots[static_cast<size_t>(i)] * 4096;
      list.add(span(off, len));
      for (size_t k = 0; k < len; ++k) where.push_back(off + k);
    }
    std::vector<uint8_t> model = buf_;
    uint64_t off = rng() % (list.total() + 1);
    uint64_t len = rng() % (list.total() - off + 1);
    std::vector<uint8_t> src(len);
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    list.copy_in(off, src.data(), len);
    for (uint64_t i = 0; i < len; ++i) model[where[off + i]] = src[i];
    ASSERT_EQ(buf_, model) << "round " << round << " off " << off << " len " << len;
    std::vector<struct iovec> iov;
    list.slice(off, len, iov);
    ASSERT_EQ(gather(iov), src);
  }
}

TEST_F(SegmentsTest, RegionsListsTheSpansTouched) {
  std::vector<uint8_t> other(256);
  auto r2 = reg_.add(other.data(), other.size(), kHost);
  ASSERT_TRUE(r2.ok());
  auto s2 = reg_.resolve_local(other.data(), 256, "other");
  ASSERT_TRUE(s2.ok());
  SegmentList list;
  list.add(span(0, 100));     // [0, 100)
  list.add(s2.value());       // [100, 356)
  list.add(span(1000, 100));  // [356, 456)
  std::vector<const RegionRef*> refs;
  list.regions(50, 100, refs);  // spans 0 and 1
  ASSERT_EQ(refs.size(), 2u);
  EXPECT_EQ((*refs[0])->region.base, buf_.data());
  EXPECT_EQ((*refs[1])->region.id, r2->id);
  refs.clear();
  list.regions(356, 10, refs);
  ASSERT_EQ(refs.size(), 1u);
  EXPECT_EQ((*refs[0])->region.base, buf_.data());
  refs.clear();
  list.regions(0, 456, refs);
  EXPECT_EQ(refs.size(), 3u);
  refs.clear();
  list.regions(10, 0, refs);
  EXPECT_TRUE(refs.empty());
}

TEST_F(SegmentsTest, ChunkAccessOkUntilARegionIsRemoved) {
  std::vector<uint8_t> other(256);
  auto r2 = reg_.add(other.data(), other.size(), kHost);
  ASSERT_TRUE(r2.ok());
  auto s2 = reg_.resolve_local(other.data(), 256, "other");
  ASSERT_TRUE(s2.ok());
  SegmentList list;
  list.add(span(0, 100));     // [0, 100)    region 1
  list.add(s2.value());       // [100, 356)  region 2
  list.add(span(1000, 100));  // [356, 456)  region 1 again
  {
    ChunkAccess all(list, 0, list.total());  // region 1 twice: must not lock it twice
    EXPECT_TRUE(all.ok());
  }
  ASSERT_TRUE(reg_.remove(r2->id).ok());
  EXPECT_FALSE(ChunkAccess(list, 0, list.total()).ok());
  EXPECT_FALSE(ChunkAccess(list, 150, 10).ok());
  EXPECT_TRUE(ChunkAccess(list, 0, 100).ok());
  EXPECT_TRUE(ChunkAccess(list, 356, 100).ok());
  EXPECT_TRUE(ChunkAccess(list, 0, 0).ok());
}

}  // namespace
}  // namespace ferry::core
