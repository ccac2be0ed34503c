// Registry at scale: deregistering must cost what the region's own exports
// cost, not what every export in the table costs, so that an application (or
// a peer driving it) with many regions cannot make each dereg scan them all.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "core/registry.h"

namespace ferry::core {
namespace {

using namespace std::chrono_literals;

constexpr platform::PointerKind kHost{};
constexpr size_t kRegions = 100'000;
// A scan of every export per dereg took minutes for this many regions; the
// indexed table takes well under a second. The bound leaves room for a
// loaded two-core machine and a sanitizer build.
constexpr auto kBound = 10s;

TEST(RegistryScaleTest, DeregisteringManyExportedRegionsIsFast) {
  std::vector<uint8_t> memory(kRegions);
  Registry reg;
  std::vector<Region> regions;
  std::vector<RemoteDescriptor> exports;
  regions.reserve(kRegions);
  exports.reserve(kRegions);
  for (size_t i = 0; i < kRegions; ++i) {
    auto r = reg.add(memory.data() + i, 1, kHost);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    regions.push_back(*r);
    auto d = reg.export_slice(7, r->id, 0, 0);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    exports.push_back(*d);
  }
  // A second export of the first region: every export of a region goes with it.
  auto extra = reg.export_slice(7, regions[0].id, 0, 1);
  ASSERT_TRUE(extra.ok());

  auto start = std::chrono::steady_clock::now();
  for (const Region& r : regions) {
    ASSERT_TRUE(reg.remove(r.id).ok());
    if (std::chrono::steady_clock::now() - start > kBound) {
      FAIL() << "deregistering " << kRegions << " exported regions took over " << kBound.count()
             << " s; stopped after region " << r.id;
    }
  }
  EXPECT_EQ(reg.region_count(), 0u);
  for (const RemoteDescriptor& d : exports) {
    ASSERT_EQ(reg.resolve_export(d.export_id, d.key, 0, 1).status().code(), Code::kNotFound);
  }
  EXPECT_EQ(reg.resolve_export(extra->export_id, extra->key, 0, 1).status().code(), Code::kNotFound);
}

TEST(RegistryScaleTest, DeregisteringOneRegionKeepsTheOthersExports) {
  std::vector<uint8_t> memory(64);
  Registry reg;
  auto a = reg.add(memory.data(), 32, kHost);
  auto b = reg.add(memory.data() + 32, 32, kHost);
  ASSERT_TRUE(a.ok() && b.ok());
  auto da = reg.export_slice(1, a->id, 0, 0);
  auto db1 = reg.export_slice(1, b->id, 0, 16);
  auto db2 = reg.export_slice(1, b->id, 16, 0);
  ASSERT_TRUE(da.ok() && db1.ok() && db2.ok());
  // A second registration of b keeps it and its exports alive.
  ASSERT_TRUE(reg.add(memory.data() + 32, 32, kHost).ok());
  ASSERT_TRUE(reg.remove(b->id).ok());
  EXPECT_TRUE(reg.resolve_export(db1->export_id, db1->key, 0, 16).ok());
  ASSERT_TRUE(reg.remove(a->id).ok());
  EXPECT_EQ(reg.resolve_export(da->export_id, da->key, 0, 1).status().code(), Code::kNotFound);
  EXPECT_TRUE(reg.resolve_export(db1->export_id, db1->key, 0, 16).ok());
  EXPECT_TRUE(reg.resolve_export(db2->export_id, db2->key, 0, 16).ok());
  ASSERT_TRUE(reg.remove(b->id).ok());
  EXPECT_EQ(reg.resolve_export(db1->export_id, db1->key, 0, 1).status().code(), Code::kNotFound);
  EXPECT_EQ(reg.resolve_export(db2->export_id, db2->key, 0, 1).status().code(), Code::kNotFound);
  // Exports made after a region came back under a new id are its own.
  auto again = reg.add(memory.data(), 32, kHost);
  ASSERT_TRUE(again.ok());
  auto dn = reg.export_slice(1, again->id, 0, 0);
  ASSERT_TRUE(dn.ok());
  EXPECT_TRUE(reg.resolve_export(dn->export_id, dn->key, 0, 32).ok());
}

}  // namespace
}  // namespace ferry::core
