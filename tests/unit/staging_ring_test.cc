// StagingRing: slots allocated lazily and in turn, never more than the depth,
// reused only after their last copies finished, and every byte counted back.
#include "transport/tcp/staging_ring.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "transport/tcp/staging_copier.h"

namespace ferry::tcp {
namespace {

using namespace std::chrono_literals;

// A copier whose host allocations fail, to see the error come back.
class NoMemoryCopier final : public Copier {
 public:
  Result<void*> alloc_host(int, size_t bytes) override {
    return Status(Code::kResourceExhausted, "no pinned memory for " + std::to_string(bytes) + " bytes");
  }
  void free_host(void*, size_t) override {}
  Status copy(int, void*, const void*, size_t) override { return Status(); }
  Result<uint64_t> fence() override { return uint64_t{1}; }
  Result<bool> done(uint64_t) override { return true; }
  Status wait(uint64_t) override { return Status(); }
  Status sync() override { return Status(); }
};

TEST(StagingRing, AllocatesLazilyInTurnAndAtMostDepthSlots) {
  size_t before = staging_bytes_allocated();
  auto copier = make_host_copier();
  {
    StagingRing ring(*copier, 64 * 1024, 3);
    EXPECT_EQ(ring.allocated(), 0);
    EXPECT_EQ(staging_bytes_allocated(), before);
    std::vector<StagingRing::Slot*> seen;
    for (int i = 0; i < 7; ++i) {
      auto s = ring.acquire(-1);
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      seen.push_back(s.value());
      EXPECT_EQ(ring.held(), 1);
      ring.release(s.value());
      EXPECT_LE(ring.allocated(), 3);
    }
    // Round robin: slot i and slot i+3 are the same.
    EXPECT_EQ(seen[0], seen[3]);
    EXPECT_EQ(seen[1], seen[4]);
    EXPECT_NE(seen[0], seen[1]);
    EXPECT_EQ(ring.allocated(), 3);
    EXPECT_EQ(staging_bytes_allocated(), before + 3 * 64 * 1024);
  }
  EXPECT_EQ(staging_bytes_allocated(), before);
}

TEST(StagingRing, AHeldSlotIsNeverHandedOutTwice) {
  auto copier = make_host_copier();
  StagingRing ring(*copier, 4096, 2);
  auto a = ring.acquire(-1);
  auto b = ring.acquire(-1);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = ring.acquire(-1);  // slot 0 again, still held
  EXPECT_EQ(c.status().code(), Code::kInternal) << c.status().to_string();
  ring.release(a.value());
  auto d = ring.acquire(-1);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d.value(), a.value());
}

TEST(StagingRing, ASlotIsReusedOnlyAfterItsCopiesFinished) {
  // Each copy takes 20 ms: acquiring the slot again must wait for it.
  auto copier = make_host_copier(20ms);
  StagingRing ring(*copier, 4096, 1);
  std::vector<uint8_t> device(4096);
  for (size_t i = 0; i < device.size(); ++i) device[i] = static_cast<uint8_t>(i * 7 + 1);
  auto s = ring.acquire(-1);
  ASSERT_TRUE(s.ok());
  std::memset(s.value()->data, 0, 4096);
  // The slot's bytes go out to "device" memory; then the slot is released.
  std::vector<uint8_t> out(4096, 0);
  std::memcpy(s.value()->data, device.data(), 4096);
  ASSERT_TRUE(copier->copy(-1, out.data(), s.value()->data, 4096).ok());
  auto t = copier->fence();
  ASSERT_TRUE(t.ok());
  s.value()->ticket = t.value();
  ring.release(s.value());
  EXPECT_FALSE(copier->done(t.value()).value());  // still copying
  auto again = ring.acquire(-1);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(copier->done(t.value()).value());
  EXPECT_EQ(out, device);  // the copy out of the slot finished before it was handed out again
}

TEST(StagingRing, AllocationFailureIsReported) {
  NoMemoryCopier copier;
  StagingRing ring(copier, 1 << 20, 2);
  auto s = ring.acquire(0);
  EXPECT_EQ(s.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(ring.allocated(), 0);
}

}  // namespace
}  // namespace ferry::tcp
