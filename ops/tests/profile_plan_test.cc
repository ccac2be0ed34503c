// ferry profile's plan: counts, determinism, seed sensitivity, event names.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "profile/plan.h"

namespace ferry::profile {
namespace {

TEST(ProfilePlan, EveryDirectedPairTimesEverySize) {
  auto plan = make_plan({{0, 1}, default_sizes(), 42});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->size(), 2u * 31u);
  auto four = make_plan({{0, 1, 2, 3}, default_sizes(), 42});
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->size(), 12u * 31u);
  // Each (src, dst, size) exactly once, ids 0..n-1, never src == dst.
  std::set<std::tuple<int, int, uint64_t>> seen;
  std::set<int> ids;
  for (const Config& c : four.value()) {
    EXPECT_NE(c.src, c.dst);
    EXPECT_TRUE(seen.insert({c.src, c.dst, c.size}).second);
    ids.insert(c.id);
  }
  EXPECT_EQ(ids.size(), four->size());
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), static_cast<int>(four->size()) - 1);
}

TEST(ProfilePlan, DefaultSizesAreTwoToTheZeroToThirty) {
  auto s = default_sizes();
  ASSERT_EQ(s.size(), 31u);
  EXPECT_EQ(s.front(), 1u);
  EXPECT_EQ(s.back(), uint64_t{1} << 30);
}

TEST(ProfilePlan, SameSeedSameOrderAndIdsKeepTheirConfiguration) {
  PlanSpec spec{{0, 1, 2}, default_sizes(), 42};
  auto a = make_plan(spec);
  auto b = make_plan(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value(), b.value());
  // The order is shuffled, not canonical.
  EXPECT_NE(a.value(), canonical_configs(spec));
  // An id names the same configuration whatever the order.
  auto canon = canonical_configs(spec);
  for (const Config& c : a.value()) EXPECT_EQ(canon[static_cast<size_t>(c.id)], c);
}

TEST(ProfilePlan, OrderIsPinnedAcrossMachines) {
  // The generator and shuffle are fully specified (mt19937_64 + our bounded
  // draw), so these exact ids are what seed 42 gives anywhere. A change here
  // breaks comparisons between runs: do not update it lightly.
  auto plan = make_plan({{0, 1}, default_sizes(), 42});
  ASSERT_TRUE(plan.ok());
  std::vector<int> first;
  for (size_t i = 0; i < 6; ++i) first.push_back(plan.value()[i].id);
  EXPECT_EQ(first, (std::vector<int>{4, 50, 20, 19, 36, 30}));
}

TEST(ProfilePlan, DifferentSeedsGiveDifferentOrders) {
  PlanSpec spec{{0, 1}, default_sizes(), 42};
  auto a = make_plan(spec);
  spec.seed = 43;
  auto b = make_plan(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a.value(), b.value());
  // Same configurations, other order.
  auto sa = a.value(), sb = b.value();
  auto by_id = [](const Config& x, const Config& y) { return x.id < y.id; };
  std::sort(sa.begin(), sa.end(), by_id);
  std::sort(sb.begin(), sb.end(), by_id);
  EXPECT_EQ(sa, sb);
  // Across 20 seeds the first configuration is not always the same.
  std::set<int> firsts;
  for (uint64_t seed = 0; seed < 20; ++seed) firsts.insert(make_plan({{0, 1}, default_sizes(), seed})->front().id);
  EXPECT_GT(firsts.size(), 10u);
}

TEST(ProfilePlan, RejectsBadSpecs) {
  EXPECT_EQ(make_plan({{0}, default_sizes(), 1}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(make_plan({{0, 0}, default_sizes(), 1}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(make_plan({{0, 1}, {}, 1}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(make_plan({{0, 1}, {0, 4}, 1}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(make_plan({{0, 1}, {4, 4}, 1}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(make_plan({{-1, 1}, {4}, 1}).status().code(), Code::kInvalidArgument);
}

TEST(ProfilePlan, GpuLists) {
  EXPECT_EQ(parse_gpu_list("0,1").value(), (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_gpu_list("0-3").value(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_gpu_list("4,0-1").value(), (std::vector<int>{4, 0, 1}));
  for (const char* bad : {"", "a", "0,", "0,,1", "3-1", "0,0", "0-2,1", "-1", "1--2", "0 1"}) {
    EXPECT_FALSE(parse_gpu_list(bad).ok()) << bad;
  }
}

TEST(ProfilePlan, EventNamesRoundTrip) {
  Config c{42, 0, 1, 1048576};
  EXPECT_EQ(event_name(c, 0), "p2p_cfg0042_s0d1_sz1048576_r0");
  EXPECT_EQ(event_name({12345, 7, 3, 1}, 9), "p2p_cfg12345_s7d3_sz1_r9");
  auto k = parse_event_name("p2p_cfg0042_s0d1_sz1048576_r3");
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(*k, (EventKey{42, 0, 1, 1048576, 3}));
  for (const char* bad : {"p2p_cfg0042_s0d1_sz1048576", "p2p_cfg0042_s0d1_sz1048576_r0x", "warmup_p2p_cfg1_s0d1_sz1_r0",
                          "p2p_cfgX_s0d1_sz1_r0", ""}) {
    EXPECT_FALSE(parse_event_name(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace ferry::profile
