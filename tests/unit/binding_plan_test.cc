// The TX/RX CPU-set policy: on the A3-high fixture it must reproduce Google's
// published GPUDirect-TCPX bindings exactly and have their structure; on
// small hosts it must still give sensible, disjoint sets.
#include "platform/binding_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "fixture_tree.h"

namespace ferry::platform {
namespace {

using ferry::testing::fixture_dir;

Topology load(const std::string& name) {
  auto t = read_topology(fixture_dir(name));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : Topology{};
}

// A host of `n` CPUs, one node, no SMT.
Topology flat_host(int n) {
  Topology t;
  NumaNode node;
  for (int c = 0; c < n; ++c) {
    t.cpus.push_back(CpuInfo{c, 0, {c}});
    node.cpus.push_back(c);
  }
  t.nodes.push_back(node);
  NicInfo nic;
  nic.name = "eth0";
  t.nics.push_back(nic);
  return t;
}

constexpr std::string_view kGoogleTx = "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177";
constexpr std::string_view kGoogleRx = "eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191";

TEST(BindingPlan, A3HighMatchesGooglesPublishedBindings) {
  Topology t = load("a3high");
  auto plan = plan_bindings(t, {}, BindingPolicy{});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(format_bindings(plan->tx), kGoogleTx);
  EXPECT_EQ(format_bindings(plan->rx), kGoogleRx);
  ASSERT_EQ(plan->nodes.size(), 2u);
  const NodeSets& n0 = plan->nodes[0];
  EXPECT_EQ(n0.cores, 52);
  EXPECT_EQ(format_cpu_list(n0.system), "0-7,104-111");
  EXPECT_EQ(format_cpu_list(n0.app), "36-51,140-155");
  EXPECT_EQ(format_cpu_list(plan->nodes[1].system), "52-59,156-163");
  EXPECT_EQ(format_cpu_list(plan->nodes[1].app), "88-103,192-207");
  EXPECT_FALSE(n0.shared);
  EXPECT_TRUE(plan->notes.empty());
  EXPECT_EQ(plan->nic_node.at("eth1"), 0);
  EXPECT_EQ(plan->nic_node.at("eth4"), 1);
}

TEST(BindingPlan, A3HighStructure) {
  Topology t = load("a3high");
  auto plan = plan_bindings(t, {}, BindingPolicy{});
  ASSERT_TRUE(plan.ok());
  for (const auto& [nic, tx] : plan->tx) {
    const CpuList& rx = plan->rx.at(nic);
    int node = t.find_nic(nic)->numa_node;
    // TX and RX disjoint.
    CpuList both;
    std::set_intersection(tx.begin(), tx.end(), rx.begin(), rx.end(), std::back_inserter(both));
    EXPECT_TRUE(both.empty()) << nic;
    for (const CpuList* set : {&tx, &rx}) {
      for (int c : *set) {
        EXPECT_EQ(t.find_cpu(c)->numa_node, node) << nic << " cpu " << c;  // NUMA-local
        for (int s : t.find_cpu(c)->siblings) {                            // whole cores
          EXPECT_TRUE(std::binary_search(set->begin(), set->end(), s)) << nic << " cpu " << c << " sibling " << s;
        }
        EXPECT_GE(c % 104 - (node == 0 ? 0 : 52), 8) << "first 8 cores of each node stay with the system";
      }
    }
  }
  // NICs of one node share their sets.
  EXPECT_EQ(plan->tx.at("eth1"), plan->tx.at("eth2"));
  EXPECT_EQ(plan->rx.at("eth3"), plan->rx.at("eth4"));
  EXPECT_NE(plan->tx.at("eth1"), plan->tx.at("eth3"));
}

TEST(BindingPlan, ChosenNicsOnly) {
  Topology t = load("a3high");
  auto plan = plan_bindings(t, {"eth3"}, BindingPolicy{});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(format_bindings(plan->tx), "eth3:60-73,164-177");
  EXPECT_EQ(format_bindings(plan->rx), "eth3:74-87,178-191");
  ASSERT_EQ(plan->nodes.size(), 1u);
  EXPECT_EQ(plan->nodes[0].node, 1);
}

TEST(BindingPlan, UnknownNicIsAnError) {
  Topology t = load("a3high");
  auto plan = plan_bindings(t, {"eth1", "eth9"}, BindingPolicy{});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kNotFound);
  EXPECT_EQ(plan.status().message(), "unknown NIC eth9 (physical NICs on this host: eth1, eth2, eth3, eth4)");
  auto lo = plan_bindings(t, {"lo"}, BindingPolicy{});
  EXPECT_EQ(lo.status().code(), Code::kNotFound);
}

TEST(BindingPlan, PolicyOverrides) {
  Topology t = load("a3high");
  auto plan = plan_bindings(t, {"eth1"}, BindingPolicy{4, 10, 12});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(format_bindings(plan->tx), "eth1:4-13,108-117");
  EXPECT_EQ(format_bindings(plan->rx), "eth1:14-25,118-129");
  EXPECT_EQ(format_cpu_list(plan->nodes[0].system), "0-3,104-107");

  auto too_many = plan_bindings(t, {"eth1"}, BindingPolicy{8, 30, 30});
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(too_many.status().message(), "node 0 (52 cores): 8 system + 30 TX + 30 RX cores do not fit");
  auto all_system = plan_bindings(t, {"eth1"}, BindingPolicy{52, -1, -1});
  EXPECT_EQ(all_system.status().code(), Code::kInvalidArgument);
  auto zero_tx = plan_bindings(t, {"eth1"}, BindingPolicy{-1, 0, -1});
  EXPECT_EQ(zero_tx.status().code(), Code::kInvalidArgument);
}

TEST(BindingPlan, OneNodeVm) {
  Topology t = load("vm");
  auto plan = plan_bindings(t, {}, BindingPolicy{});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  // 4 cores (siblings N, N+4): core 0 to the system, one each to TX and RX, one to the application.
  EXPECT_EQ(format_bindings(plan->tx), "eth0:1,5;eth1:1,5");
  EXPECT_EQ(format_bindings(plan->rx), "eth0:2,6;eth1:2,6");
  EXPECT_EQ(format_cpu_list(plan->nodes[0].system), "0,4");
  EXPECT_EQ(format_cpu_list(plan->nodes[0].app), "3,7");
  EXPECT_TRUE(plan->notes.empty());  // one node: NUMA unknown is not a guess
}

TEST(BindingPlan, SmallHosts) {
  auto two = plan_bindings(flat_host(2), {}, BindingPolicy{});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(format_bindings(two->tx), "eth0:0");
  EXPECT_EQ(format_bindings(two->rx), "eth0:1");
  EXPECT_FALSE(two->nodes[0].shared);

  auto one = plan_bindings(flat_host(1), {}, BindingPolicy{});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(format_bindings(one->tx), "eth0:0");
  EXPECT_EQ(format_bindings(one->rx), "eth0:0");
  EXPECT_TRUE(one->nodes[0].shared);
  ASSERT_EQ(one->notes.size(), 1u);
  EXPECT_NE(one->notes[0].find("too few cores"), std::string::npos);

  auto eight = plan_bindings(flat_host(8), {}, BindingPolicy{});
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(format_cpu_list(eight->nodes[0].system), "0");
  EXPECT_EQ(format_bindings(eight->tx), "eth0:1-2");
  EXPECT_EQ(format_bindings(eight->rx), "eth0:3-4");
  EXPECT_EQ(format_cpu_list(eight->nodes[0].app), "5-7");
}

TEST(BindingPlan, NicWithUnknownNodeOnTwoNodes) {
  Topology t = load("a3high");
  for (NicInfo& n : t.nics) {
    if (n.name == "eth3") n.numa_node = -1;
  }
  auto plan = plan_bindings(t, {"eth3"}, BindingPolicy{});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(format_bindings(plan->tx), "eth3:8-21,112-125");
  ASSERT_EQ(plan->notes.size(), 1u);
  EXPECT_EQ(plan->notes[0], "eth3: sysfs gives no NUMA node; planned on node 0");
}

TEST(BindingPlan, CheckBindingsAgainstHost) {
  Topology t = load("a3high");
  auto good = parse_bindings(kGoogleTx, "FERRY_TX_BINDINGS");
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(check_bindings(*good, t, "FERRY_TX_BINDINGS").ok());

  auto unknown = parse_bindings("eth1:8;eth7:9", "x");
  Status s = check_bindings(*unknown, t, "FERRY_TX_BINDINGS");
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "FERRY_TX_BINDINGS: unknown NIC eth7 (physical NICs on this host: eth1, eth2, eth3, eth4)");

  auto no_cpu = parse_bindings("eth1:8,208", "x");
  s = check_bindings(*no_cpu, t, "FERRY_RX_BINDINGS");
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "FERRY_RX_BINDINGS: eth1: CPU 208 does not exist or is offline (online: 0-207)");
}

}  // namespace
}  // namespace ferry::platform
