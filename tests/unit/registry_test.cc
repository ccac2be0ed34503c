// Registry: registration counting, local resolution, exports and their bounds/keys, revocation on dereg.
#include "core/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

namespace ferry::core {
namespace {

using namespace std::chrono_literals;

constexpr platform::PointerKind kHost{};

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest() : buf_(4096) {}
  uint8_t* at(size_t off) { return buf_.data() + off; }

  Region add(size_t off, size_t len) {
    auto r = reg_.add(at(off), len, kHost);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r.value() : Region{};
  }

  Registry reg_;
  std::vector<uint8_t> buf_;
};

TEST_F(RegistryTest, AddAndRemove) {
  Region a = add(0, 100);
  Region b = add(200, 100);
  EXPECT_NE(a.id, 0u);
  EXPECT_NE(a.id, b.id);
  EXPECT_EQ(a.base, at(0));
  EXPECT_EQ(a.length, 100u);
  EXPECT_EQ(a.kind, MemoryKind::kHost);
  EXPECT_EQ(a.device, -1);
  EXPECT_EQ(reg_.region_count(), 2u);
  EXPECT_TRUE(reg_.remove(a.id).ok());
  EXPECT_EQ(reg_.region_count(), 1u);
  EXPECT_EQ(reg_.remove(a.id).code(), Code::kNotFound);
  EXPECT_EQ(reg_.remove(12345).code(), Code::kNotFound);
  EXPECT_TRUE(reg_.remove(b.id).ok());
  EXPECT_EQ(reg_.region_count(), 0u);
}

TEST_F(RegistryTest, RejectsNullAndEmptyRanges) {
  EXPECT_EQ(reg_.add(nullptr, 10, kHost).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(reg_.add(at(0), 0, kHost).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(reg_.region_count(), 0u);
}

TEST_F(RegistryTest, SameRangeTwiceIsOneRegionNeedingTwoRemoves) {
  Region a = add(64, 256);
  Region again = add(64, 256);
  EXPECT_EQ(again.id, a.id);
  EXPECT_EQ(reg_.region_count(), 1u);
  ASSERT_TRUE(reg_.remove(a.id).ok());
  EXPECT_EQ(reg_.region_count(), 1u);
  EXPECT_TRUE(reg_.resolve_local(at(64), 256, "buf").ok());
  ASSERT_TRUE(reg_.remove(a.id).ok());
  EXPECT_EQ(reg_.region_count(), 0u);
  EXPECT_EQ(reg_.resolve_local(at(64), 256, "buf").status().code(), Code::kNotFound);
  EXPECT_EQ(reg_.remove(a.id).code(), Code::kNotFound);
  // Same base, other length: a different region.
  Region c = add(64, 256);
  Region d = add(64, 128);
  EXPECT_NE(c.id, d.id);
  EXPECT_EQ(reg_.region_count(), 2u);
}

TEST_F(RegistryTest, ResolveLocalBounds) {
  Region r = add(100, 500);  // [100, 600)
  auto in = reg_.resolve_local(at(150), 100, "send buffer");
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  EXPECT_EQ(in->data, at(150));
  EXPECT_EQ(in->size, 100u);
  EXPECT_EQ(in->region->region.id, r.id);

  EXPECT_TRUE(reg_.resolve_local(at(100), 500, "whole").ok());
  auto end = reg_.resolve_local(at(500), 100, "at end");  // ends exactly at 600
  ASSERT_TRUE(end.ok()) << end.status().to_string();
  EXPECT_EQ(end->data, at(500));

  auto past = reg_.resolve_local(at(500), 101, "send buffer");
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), Code::kOutOfRange);
  EXPECT_NE(past.status().message().find("send buffer"), std::string::npos);
  EXPECT_EQ(reg_.resolve_local(at(100), 501, "x").status().code(), Code::kOutOfRange);

  EXPECT_EQ(reg_.resolve_local(at(600), 1, "x").status().code(), Code::kNotFound);  // first byte after
  EXPECT_EQ(reg_.resolve_local(at(99), 1, "x").status().code(), Code::kNotFound);   // last byte before
  EXPECT_EQ(reg_.resolve_local(at(50), 10, "x").status().code(), Code::kNotFound);
  int on_stack = 0;
  EXPECT_EQ(reg_.resolve_local(&on_stack, sizeof(on_stack), "x").status().code(), Code::kNotFound);

  ASSERT_TRUE(reg_.remove(r.id).ok());
  EXPECT_EQ(reg_.resolve_local(at(150), 100, "x").status().code(), Code::kNotFound);
}

TEST_F(RegistryTest, OverlappingRegions) {
  Region big = add(0, 1000);      // [0, 1000)
  Region small = add(200, 100);   // [200, 300)
  Region same_base = add(0, 50);  // [0, 50)
  // Inside both: either is a correct answer, but it must contain the range.
  auto r = reg_.resolve_local(at(250), 10, "x");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->region->region.id == big.id || r->region->region.id == small.id);
  // Runs past the small one but inside the big one: the big one.
  r = reg_.resolve_local(at(250), 500, "x");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->region->region.id, big.id);
  r = reg_.resolve_local(at(10), 100, "x");  // past [0,50), inside [0,1000)
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->region->region.id, big.id);
  EXPECT_EQ(reg_.resolve_local(at(900), 101, "x").status().code(), Code::kOutOfRange);

  ASSERT_TRUE(reg_.remove(big.id).ok());
  EXPECT_EQ(reg_.resolve_local(at(250), 500, "x").status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.resolve_local(at(500), 10, "x").status().code(), Code::kNotFound);
  r = reg_.resolve_local(at(250), 10, "x");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->region->region.id, small.id);
  r = reg_.resolve_local(at(0), 50, "x");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->region->region.id, same_base.id);
}

TEST_F(RegistryTest, AdjacentRegions) {
  Region a = add(0, 100);    // [0, 100)
  Region b = add(100, 100);  // [100, 200)
  auto r = reg_.resolve_local(at(99), 1, "x");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->region->region.id, a.id);
  r = reg_.resolve_local(at(100), 1, "x");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->region->region.id, b.id);
  r = reg_.resolve_local(at(100), 100, "x");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->region->region.id, b.id);
  // A range straddling the boundary lies in no single region.
  EXPECT_EQ(reg_.resolve_local(at(90), 20, "x").status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.resolve_local(at(150), 51, "x").status().code(), Code::kOutOfRange);
}

TEST(RegistryScale, TenThousandRegions) {
  constexpr size_t kCount = 10000, kStride = 64, kLen = 48;  // 16-byte gaps between regions
  std::vector<uint8_t> big(kCount * kStride);
  std::vector<size_t> order(kCount);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));

  Registry reg;
  std::vector<uint64_t> ids(kCount);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i : order) {
    auto r = reg.add(big.data() + i * kStride, kLen, kHost);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ids[i] = r->id;
  }
  auto t1 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kCount; ++i) {
    uint8_t* base = big.data() + i * kStride;
    auto r = reg.resolve_local(base + 10, 20, "x");
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().to_string();
    ASSERT_EQ(r->region->region.id, ids[i]);
    ASSERT_EQ(reg.resolve_local(base + kLen, 1, "gap").status().code(), Code::kNotFound) << i;
    ASSERT_EQ(reg.resolve_local(base + 40, 9, "x").status().code(), Code::kOutOfRange) << i;
  }
  auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(reg.region_count(), kCount);
  for (uint64_t id : ids) ASSERT_TRUE(reg.remove(id).ok());
  EXPECT_EQ(reg.region_count(), 0u);
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf("[ info     ] %zu registrations: %.2f ms; %zu x 3 lookups: %.2f ms\n", kCount, ms(t1 - t0), kCount,
              ms(t2 - t1));
}

TEST_F(RegistryTest, ExportSliceBounds) {
  Region r = add(0, 1000);
  auto d = reg_.export_slice(77, r.id, 100, 200);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->engine_id, 77u);
  EXPECT_EQ(d->length, 200u);
  EXPECT_EQ(d->kind, MemoryKind::kHost);
  EXPECT_EQ(d->device, -1);

  auto to_end = reg_.export_slice(77, r.id, 100, 0);
  ASSERT_TRUE(to_end.ok());
  EXPECT_EQ(to_end->length, 900u);
  EXPECT_NE(to_end->export_id, d->export_id);
  auto whole = reg_.export_slice(77, r.id, 0, 0);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->length, 1000u);
  EXPECT_TRUE(reg_.export_slice(77, r.id, 0, 1000).ok());

  EXPECT_EQ(reg_.export_slice(77, r.id, 1001, 0).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.export_slice(77, r.id, 1001, 1).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.export_slice(77, r.id, 100, 901).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.export_slice(77, r.id, 0, 1001).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.export_slice(77, r.id, 1, UINT64_MAX).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.export_slice(77, r.id, UINT64_MAX, 1).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.export_slice(77, r.id + 100, 0, 0).status().code(), Code::kNotFound);
}

TEST_F(RegistryTest, ResolveExportChecksIdKeyAndBounds) {
  Region r = add(0, 1000);
  auto d = reg_.export_slice(1, r.id, 100, 200);  // buffer [100, 300)
  ASSERT_TRUE(d.ok());

  auto ok = reg_.resolve_export(d->export_id, d->key, 10, 50);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->data, at(110));
  EXPECT_EQ(ok->size, 50u);
  EXPECT_EQ(ok->region->region.id, r.id);
  auto whole = reg_.resolve_export(d->export_id, d->key, 0, 200);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->data, at(100));

  EXPECT_EQ(reg_.resolve_export(d->export_id, d->key ^ 1, 10, 50).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(reg_.resolve_export(d->export_id, 0, 10, 50).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(reg_.resolve_export(d->export_id + 1000, d->key, 10, 50).status().code(), Code::kNotFound);
  EXPECT_EQ(reg_.resolve_export(d->export_id, d->key, 150, 51).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.resolve_export(d->export_id, d->key, 0, 201).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.resolve_export(d->export_id, d->key, 201, 0).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.resolve_export(d->export_id, d->key, UINT64_MAX, 1).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.resolve_export(d->export_id, d->key, UINT64_MAX - 10, 20).status().code(), Code::kOutOfRange);
  EXPECT_EQ(reg_.resolve_export(d->export_id, d->key, 1, UINT64_MAX).status().code(), Code::kOutOfRange);
  // Inside the region but outside the slice is still out of range.
  EXPECT_EQ(reg_.resolve_export(d->export_id, d->key, 200, 1).status().code(), Code::kOutOfRange);
}

TEST_F(RegistryTest, ExportKeysAreDistinct) {
  Region r = add(0, 1000);
  auto a = reg_.export_slice(1, r.id, 0, 0);
  auto b = reg_.export_slice(1, r.id, 0, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->export_id, b->export_id);
  EXPECT_NE(a->key, b->key);
  // One export's key does not open another.
  EXPECT_EQ(reg_.resolve_export(b->export_id, a->key, 0, 1).status().code(), Code::kPermissionDenied);
}

TEST_F(RegistryTest, RemovingARegionRevokesItsExports) {
  Region r = add(0, 1000);
  Region other = add(2000, 100);
  auto d = reg_.export_slice(1, r.id, 0, 0);
  auto keep = reg_.export_slice(1, other.id, 0, 0);
  ASSERT_TRUE(d.ok() && keep.ok());
  add(0, 1000);  // second registration of the same range
  ASSERT_TRUE(reg_.remove(r.id).ok());
  EXPECT_TRUE(reg_.resolve_export(d->export_id, d->key, 0, 10).ok()) << "still registered once";
  ASSERT_TRUE(reg_.remove(r.id).ok());
  EXPECT_EQ(reg_.resolve_export(d->export_id, d->key, 0, 10).status().code(), Code::kNotFound);
  EXPECT_TRUE(reg_.resolve_export(keep->export_id, keep->key, 0, 10).ok());
  EXPECT_EQ(reg_.export_slice(1, r.id, 0, 0).status().code(), Code::kNotFound);
}

TEST_F(RegistryTest, RegionAccessReportsRemovedRegion) {
  Region r = add(0, 100);
  auto span = reg_.resolve_local(at(0), 100, "x");
  ASSERT_TRUE(span.ok());
  {
    RegionAccess access(span->region);
    EXPECT_TRUE(access.ok());
  }
  ASSERT_TRUE(reg_.remove(r.id).ok());
  RegionAccess after(span->region);
  EXPECT_FALSE(after.ok());
}

TEST_F(RegistryTest, RemoveWaitsForBytesMovingInTheRegion) {
  Region r = add(0, 100);
  auto span = reg_.resolve_local(at(0), 100, "x");
  ASSERT_TRUE(span.ok());
  auto access = std::make_unique<RegionAccess>(span->region);
  ASSERT_TRUE(access->ok());
  auto removed = std::async(std::launch::async, [&] { return reg_.remove(r.id); });
  EXPECT_EQ(removed.wait_for(30ms), std::future_status::timeout) << "remove() did not wait for the access";
  access.reset();
  ASSERT_EQ(removed.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(removed.get().ok());
  EXPECT_FALSE(RegionAccess(span->region).ok());
}

}  // namespace
}  // namespace ferry::core
