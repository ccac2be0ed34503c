// The gather kernel alone, on one GPU: lists of pieces of odd sizes at
// offsets that agree modulo 16 and offsets that do not, pieces cut into
// several items, lists for each of the three entry points that carry them
// in their parameters, lists that take several launches, and the same lists
// read from pinned host memory (copy_table); every byte of the target
// checked, the gaps between pieces included. Then the kernel kept resident
// (ResidentGather): a batch handed to it after it lingered out is still
// copied. Skips without a GPU.
#include "gpu/gather_kernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_memory.h"
#include "gpu/resident_gather.h"

namespace ferry::testing {
namespace {

constexpr size_t kPool = 32u << 20;

// A source and a target pool of kPool bytes on GPU 0, whose context it
// leaves current.
void gpu0_pools(GpuBuffer& src, GpuBuffer& dst) {
  src = gpu_alloc(0, kPool);
  dst = gpu_alloc(0, kPool);
  ASSERT_NE(src.ptr, nullptr);
  ASSERT_NE(dst.ptr, nullptr);
  ASSERT_TRUE(platform::use_device(0).ok());
}

// The kPool bytes at `dst` are `expect`, gaps between pieces included.
void expect_target(const uint8_t* dst, const std::vector<uint8_t>& expect) {
  std::vector<uint8_t> got(kPool);
  ASSERT_TRUE(copy_to(got.data(), dst, kPool));
  auto diff = std::mismatch(expect.begin(), expect.end(), got.begin());
  ASSERT_TRUE(diff.first == expect.end()) << "the target differs at byte " << (diff.first - expect.begin());
}

struct Case {
  const char* name;
  size_t pieces;
  uint64_t hi;       // sizes 1..hi
  bool same_phase;   // source and target offsets agree modulo 16
};

// `table`: pinned host memory for the list, copy_table's way (null: copy()).
void gather_case(const Case& c, platform::GatherKernels& kernels, uint8_t* src, uint8_t* dst, cu::Stream stream,
                 std::mt19937_64& rng, platform::GatherPiece* table = nullptr) {
  SCOPED_TRACE(std::string(c.name) + (table != nullptr ? ", listed in memory" : ", listed in parameters"));
  const std::vector<uint8_t> source = pattern(11, kPool);
  ASSERT_TRUE(copy_to(src, source.data(), kPool));
  ASSERT_TRUE(poison(dst, kPool));
  const uint64_t slot = c.hi + 64;
  std::vector<uint64_t> a(kPool / slot), b(kPool / slot);
  ASSERT_GE(a.size(), c.pieces);
  for (size_t i = 0; i < a.size(); ++i) a[i] = b[i] = i;
  std::shuffle(a.begin(), a.end(), rng);
  std::shuffle(b.begin(), b.end(), rng);
  std::vector<platform::GatherPiece> pieces;
  std::vector<uint8_t> expect(kPool, 0);
  for (size_t i = 0; i < c.pieces; ++i) {
    uint64_t phase = rng() % 16;
    uint64_t from = a[i] * slot + phase, to = b[i] * slot + (c.same_phase ? phase : (phase + 1 + rng() % 15) % 16);
    uint64_t n = 1 + rng() % c.hi;
    pieces.push_back({dst + to, src + from, n});
    std::copy_n(source.begin() + static_cast<long>(from), n, expect.begin() + static_cast<long>(to));
  }
  if (table == nullptr) {
    ASSERT_TRUE(kernels.copy(0, stream, pieces).ok());
  } else {
    constexpr uint64_t kItem = platform::GatherKernels::kItemBytes;
    unsigned k = 0;
    uint64_t bytes = 0;
    for (const platform::GatherPiece& p : pieces) {
      for (uint64_t at = 0; at < p.n; at += kItem) table[k++] = {p.dst + at, p.src + at, std::min(kItem, p.n - at)};
      bytes += p.n;
    }
    ASSERT_TRUE(kernels.copy_table(0, stream, table, k, bytes).ok());
  }
  ASSERT_EQ(platform::cuda().stream_synchronize(stream), cu::kSuccess);
  ASSERT_NO_FATAL_FAILURE(expect_target(dst, expect));
}

TEST(GatherKernel, CopiesEveryPieceAndNothingElse) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  GpuBuffer src, dst;
  ASSERT_NO_FATAL_FAILURE(gpu0_pools(src, dst));
  const auto& d = platform::cuda();
  cu::Stream stream = nullptr;
  ASSERT_EQ(d.stream_create(&stream, cu::kStreamNonBlocking), cu::kSuccess);
  platform::GatherKernels kernels;
  std::mt19937_64 rng(31);
  for (const Case& c : {Case{"a few small pieces (small entry point)", 100, 4096, true},
                        Case{"pieces cut into several items", 60, 300000, true},
                        Case{"300 pieces (medium entry point)", 300, 4096, true},
                        Case{"1,000 pieces, offsets out of phase", 1000, 5000, false},
                        Case{"3,000 pieces: several launches", 3000, 9000, true},
                        Case{"single bytes", 500, 1, false}}) {
    gather_case(c, kernels, src.ptr, dst.ptr, stream, rng);
  }
  void* table = nullptr;
  constexpr size_t kTableItems = 8192;
  ASSERT_EQ(d.mem_host_alloc(&table, kTableItems * sizeof(platform::GatherPiece), cu::kHostAllocPortable), cu::kSuccess);
  for (const Case& c : {Case{"a few small pieces", 100, 4096, true},
                        Case{"pieces cut into several items", 60, 300000, true},
                        Case{"1,000 pieces, offsets out of phase", 1000, 5000, false},
                        Case{"3,000 pieces: more items than blocks of threads", 3000, 9000, true},
                        Case{"single bytes", 500, 1, false}}) {
    gather_case(c, kernels, src.ptr, dst.ptr, stream, rng, static_cast<platform::GatherPiece*>(table));
  }
  d.mem_free_host(table);
  d.stream_destroy(stream);
}

TEST(GatherKernel, SuitsBatchesOfSmallPiecesOnly) {
  EXPECT_FALSE(platform::GatherKernels::suits(1, 4096));
  EXPECT_TRUE(platform::GatherKernels::suits(256, 256u << 14));
  EXPECT_TRUE(platform::GatherKernels::suits(2, 2 * platform::GatherKernels::kMaxAveragePiece));
  EXPECT_FALSE(platform::GatherKernels::suits(2, 2 * platform::GatherKernels::kMaxAveragePiece + 1));
}

// Lists `count` pieces of random sizes up to `most` bytes from random places
// of `src` to random places of `dst` (both kPool bytes) into `table`, and
// what `dst` holds once they are copied into `expect`.
void list_resident_batch(uint8_t* src, uint8_t* dst, const std::vector<uint8_t>& source, unsigned count,
                         uint64_t most, std::mt19937_64& rng, platform::GatherPiece* table,
                         std::vector<uint8_t>& expect) {
  const uint64_t slot = most + 64;
  std::vector<uint64_t> a(kPool / slot), b(kPool / slot);
  ASSERT_GE(a.size(), count);
  for (size_t i = 0; i < a.size(); ++i) a[i] = b[i] = i;
  std::shuffle(a.begin(), a.end(), rng);
  std::shuffle(b.begin(), b.end(), rng);
  for (unsigned i = 0; i < count; ++i) {
    uint64_t from = a[i] * slot + rng() % 16, to = b[i] * slot + rng() % 16;
    uint64_t n = 1 + rng() % most;
    table[i] = {dst + to, src + from, n};
    std::copy_n(source.begin() + static_cast<long>(from), n, expect.begin() + static_cast<long>(to));
  }
}

// Polls `finished` until the ticket's batch is in place, at most 5 s.
::testing::AssertionResult wait_resident(platform::ResidentGather& resident, const platform::ResidentGather::Ticket& t) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    Result<bool> done = resident.finished(t);
    if (!done.ok()) return ::testing::AssertionFailure() << done.status().to_string();
    if (done.value()) return ::testing::AssertionSuccess();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return ::testing::AssertionFailure() << "the batch was not in place within 5 s";
}

// A batch is handed over by writing the mailbox while the kernel is taken to
// linger still. A posting thread held up between that judgement and its
// write (preempted, say) finds the kernel gone: the batch must be launched
// again, not lost or failed. A clock that stands still stands in for the
// held-up thread, so the second batch always goes to a kernel that left.
TEST(GatherKernel, ABatchHandedToAResidentKernelThatLeftIsCopiedAllTheSame) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  GpuBuffer src, dst;
  ASSERT_NO_FATAL_FAILURE(gpu0_pools(src, dst));
  const auto& d = platform::cuda();
  const auto frozen = std::chrono::steady_clock::now();
  platform::ResidentGather resident(std::make_shared<platform::GatherKernels>(), std::chrono::milliseconds(1),
                                    [frozen] { return frozen; });
  // Batches of 300 pieces up to 16 KiB (about one a warp), none, and 9,000
  // up to 1 KiB (more than a block of threads fetches at once).
  struct Batch {
    unsigned pieces;
    uint64_t most;
  };
  const Batch batches[] = {{300, platform::ResidentGather::kPieceBytes}, {0, 1}, {9000, 1024}};
  void* table = nullptr;
  ASSERT_EQ(d.mem_host_alloc(&table, 9000 * sizeof(platform::GatherPiece), cu::kHostAllocPortable), cu::kSuccess);
  std::unique_ptr<void, void (*)(void*)> free_table(table, [](void* p) { platform::cuda().mem_free_host(p); });
  auto* pieces = static_cast<platform::GatherPiece*>(table);
  std::mt19937_64 rng(47);
  for (unsigned k = 0; k < std::size(batches); ++k) {
    SCOPED_TRACE("batch " + std::to_string(k) + " of " + std::to_string(batches[k].pieces) + " pieces");
    const std::vector<uint8_t> source = pattern(100 + k, kPool);
    ASSERT_TRUE(copy_to(src.ptr, source.data(), kPool));
    ASSERT_TRUE(poison(dst.ptr, kPool));
    std::vector<uint8_t> expect(kPool, 0);
    ASSERT_NO_FATAL_FAILURE(
        list_resident_batch(src.ptr, dst.ptr, source, batches[k].pieces, batches[k].most, rng, pieces, expect));
    Result<platform::ResidentGather::Ticket> t = resident.post(0, pieces, batches[k].pieces);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    ASSERT_TRUE(wait_resident(resident, *t));
    // The first batch launched the kernel; each later one found it gone
    // and launched it again.
    EXPECT_EQ(resident.launches(0), k + 1);
    ASSERT_NO_FATAL_FAILURE(expect_target(dst.ptr, expect));
    // Twenty times the linger: the kernel leaves, while the frozen clock
    // has the next post take it for still there.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace
}  // namespace ferry::testing
