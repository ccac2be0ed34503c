// ferry bench --alternate-nics: NIC-set parsing, burst order, paired ratios.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ferry/bench_pairs.h"

namespace ferry::cli {
namespace {

TEST(NicSets, SplitOnSlashes) {
  auto r = parse_nic_sets("fa0/fa0,fa1/fa0,fa1,fa2,fa3/fa0");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value(), (std::vector<std::string>{"fa0", "fa0,fa1", "fa0,fa1,fa2,fa3", "fa0"}));
}

TEST(NicSets, BadListsNameTheSet) {
  for (const char* bad : {"fa0", "", "fa0//fa1", "fa0/", "/fa0", "fa0/fa1,,fa2", "fa0/,fa1"}) {
    auto r = parse_nic_sets(bad);
    ASSERT_FALSE(r.ok()) << "\"" << bad << "\" parsed";
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--alternate-nics"), std::string::npos) << r.status().message();
  }
  auto r = parse_nic_sets("fa0/fa1,,fa2");
  EXPECT_NE(r.status().message().find("set 2 at position 4"), std::string::npos) << r.status().message();
}

TEST(AlternationOrder, RoundsRotateAndNoSetRunsTwiceInARow) {
  EXPECT_EQ(alternation_order(3, 3), (std::vector<int>{0, 1, 2, 1, 2, 0, 2, 0, 1}));
  EXPECT_EQ(alternation_order(2, 3), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_TRUE(alternation_order(4, 0).empty());
  for (int sets = 2; sets <= 6; ++sets) {
    std::vector<int> o = alternation_order(sets, 2 * sets);
    std::vector<std::vector<int>> place(static_cast<size_t>(sets), std::vector<int>(static_cast<size_t>(sets)));
    for (size_t i = 0; i < o.size(); ++i) {
      if (i > 0) {
        EXPECT_NE(o[i], o[i - 1]) << sets << " sets, burst " << i;
      }
      ++place[static_cast<size_t>(o[i])][i % static_cast<size_t>(sets)];
    }
    if (sets > 2) {
      for (const auto& p : place) EXPECT_EQ(p, std::vector<int>(static_cast<size_t>(sets), 2)) << sets << " sets";
    }
  }
}

TEST(PairedRatio, MedianOfRatiosNotRatioOfMedians) {
  // Drift common to both sides cancels in the ratios: the reference moves
  // from 2 to 5 and the other is always 0.9 of it.
  std::vector<double> ref, other;
  for (int i = 0; i < 41; ++i) {
    ref.push_back(2 + 3.0 * i / 40);
    other.push_back(0.9 * ref.back());
  }
  PairedRatio p = paired_ratio(ref, other);
  EXPECT_EQ(p.pairs, 41);
  EXPECT_EQ(p.above, 0);
  EXPECT_NEAR(p.median, 0.9, 1e-12);
  EXPECT_NEAR(p.lo, 0.9, 1e-12);
  EXPECT_NEAR(p.hi, 0.9, 1e-12);
}

TEST(PairedRatio, IntervalCoversTheTrueRatioAndNarrowsWithRounds) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0, 0.05);
  auto make = [&](int n, std::vector<double>& ref, std::vector<double>& other) {
    for (int i = 0; i < n; ++i) {
      double level = 3 + (i % 7) * 0.3;  // drift
      ref.push_back(level * (1 + noise(rng)));
      other.push_back(0.97 * level * (1 + noise(rng)));
    }
  };
  std::vector<double> r10, o10, r200, o200;
  make(10, r10, o10);
  make(200, r200, o200);
  PairedRatio small = paired_ratio(r10, o10), big = paired_ratio(r200, o200);
  EXPECT_LE(big.lo, 0.97);
  EXPECT_GE(big.hi, 0.97);
  EXPECT_LT(big.hi, 1.0) << "200 rounds should tell 0.97 from 1";
  EXPECT_LT(big.hi - big.lo, small.hi - small.lo);
  // The same data gives the same interval.
  PairedRatio again = paired_ratio(r200, o200);
  EXPECT_EQ(again.lo, big.lo);
  EXPECT_EQ(again.hi, big.hi);
}

TEST(PairedRatio, SkipsMissingReferenceAndUnevenLengths) {
  PairedRatio p = paired_ratio({0, 2, 4}, {1, 3, 4, 9});
  EXPECT_EQ(p.pairs, 2);
  EXPECT_EQ(p.above, 1);
  EXPECT_NEAR(p.median, 0.5 * (1.5 + 1.0), 1e-12);
}

}  // namespace
}  // namespace ferry::cli
