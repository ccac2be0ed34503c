// plan_paths: local NICs paired with a peer's advertised addresses by subnet.
#include "transport/tcp/path_plan.h"

#include <gtest/gtest.h>

namespace ferry::tcp {
namespace {

platform::Interface nic(const std::string& name, const std::string& ip, uint32_t mask = 0xffffff00) {
  platform::Interface i;
  i.name = name;
  i.address = ip;
  EXPECT_TRUE(platform::parse_ipv4(ip, i.ipv4));
  i.netmask = mask;
  i.up = true;
  return i;
}

platform::HostPort hp(const std::string& s) { return platform::parse_host_port(s).value(); }

TEST(PathPlan, PairsEachNicWithThePeerAddressInItsSubnet) {
  std::vector<platform::Interface> mine = {nic("fa0", "10.77.0.1"), nic("fa1", "10.77.1.1"), nic("fa2", "10.77.2.1")};
  // The peer lists its NICs in another order, one of them unreachable from here.
  std::vector<std::string> theirs = {"10.77.1.2:7000", "10.9.9.9:7000", "10.77.0.2:7000", "10.77.2.2:7000"};
  auto plan = plan_paths(mine, theirs, hp("10.77.0.2:7000"), 2);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_EQ(plan->size(), 6u);
  // Round robin over the pairs, `streams` rounds.
  const char* expect[][2] = {{"fa0", "10.77.0.2"}, {"fa1", "10.77.1.2"}, {"fa2", "10.77.2.2"}};
  for (size_t i = 0; i < plan->size(); ++i) {
    EXPECT_EQ((*plan)[i].nic, expect[i % 3][0]) << i;
    EXPECT_EQ((*plan)[i].remote.host, expect[i % 3][1]) << i;
    EXPECT_EQ((*plan)[i].remote.port, 7000) << i;
    EXPECT_EQ((*plan)[i].local_ip, mine[i % 3].address) << i;
  }
}

TEST(PathPlan, WithoutNamedNicsEveryPeerAddressGetsStreams) {
  auto plan = plan_paths({}, {"10.0.0.2:1", "10.0.1.2:1"}, hp("10.0.0.2:1"), 3);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 6u);
  for (const auto& p : *plan) {
    EXPECT_TRUE(p.nic.empty());
    EXPECT_TRUE(p.local_ip.empty());
  }
  EXPECT_EQ((*plan)[0].remote.host, "10.0.0.2");
  EXPECT_EQ((*plan)[1].remote.host, "10.0.1.2");
}

TEST(PathPlan, NothingAdvertisedUsesTheDialedAddress) {
  auto plan = plan_paths({}, {}, hp("127.0.0.1:9"), 2);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].remote.host, "127.0.0.1");
  EXPECT_EQ((*plan)[1].remote.port, 9);
}

TEST(PathPlan, NoSharedSubnetFallsBackToRouting) {
  auto plan = plan_paths({nic("eth1", "192.168.1.5")}, {"10.0.0.2:5"}, hp("10.0.0.2:5"), 1);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_TRUE((*plan)[0].local_ip.empty()) << "must not bind to a NIC that cannot reach the peer directly";
}

TEST(PathPlan, AutoDealsItsTotalOverThePairsAndGivesEachPairOne) {
  std::vector<platform::Interface> mine = {nic("fa0", "10.77.0.1"), nic("fa1", "10.77.1.1"), nic("fa2", "10.77.2.1")};
  std::vector<std::string> theirs = {"10.77.0.2:7000", "10.77.1.2:7000", "10.77.2.2:7000"};
  // 7 in all over three pairs: 3, 2, 2, in round-robin order.
  auto plan = plan_paths(mine, theirs, hp("10.77.0.2:7000"), kAutoStreams, 7);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_EQ(plan->size(), 7u);
  for (size_t i = 0; i < plan->size(); ++i) EXPECT_EQ((*plan)[i].nic, "fa" + std::to_string(i % 3)) << i;
  // Fewer than the pairs: every pair still gets one.
  plan = plan_paths(mine, theirs, hp("10.77.0.2:7000"), kAutoStreams, 2);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->size(), 3u);
  // One pair: the whole total on it.
  plan = plan_paths({}, {}, hp("127.0.0.1:9"), kAutoStreams, 16);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->size(), 16u);
}

TEST(PathPlan, TotalIsCappedAndMalformedAddressesAreErrors) {
  std::vector<std::string> many;
  for (int i = 0; i < 40; ++i) many.push_back("10.1." + std::to_string(i) + ".2:1");
  auto plan = plan_paths({}, many, hp("10.1.0.2:1"), 4);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(static_cast<int>(plan->size()), kMaxPaths);
  plan = plan_paths({}, many, hp("10.1.0.2:1"), kAutoStreams, 16);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->size(), 40u) << "one a pair, past the automatic total";
  EXPECT_EQ(plan_paths({}, {"not-an-address"}, hp("10.1.0.2:1"), 1).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ferry::tcp
