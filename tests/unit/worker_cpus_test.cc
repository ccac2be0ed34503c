// Worker CPU sets when no binding strings are given: TX and RX workers get
// disjoint halves of the NIC's NUMA node, whole cores each, so a host's senders
// and receivers never preempt each other; bindings, when given, win.
#include "core/worker_cpus.h"

#include <gtest/gtest.h>

#include "fixture_tree.h"

namespace ferry::core {
namespace {

using platform::format_cpu_list;

platform::Topology load(const std::string& name) {
  auto t = platform::read_topology(ferry::testing::fixture_dir(name));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : platform::Topology{};
}

// A one-node host of `n` CPUs without SMT and without physical NICs (a VM
// whose NICs are virtual, like the netns lab's veth links).
platform::Topology flat_host(int n) {
  platform::Topology t;
  platform::NumaNode node;
  for (int c = 0; c < n; ++c) {
    t.cpus.push_back(platform::CpuInfo{c, 0, {c}});
    node.cpus.push_back(c);
  }
  t.nodes.push_back(node);
  return t;
}

platform::Interface nic(const std::string& name) {
  platform::Interface i;
  i.name = name;
  return i;
}

TEST(WorkerCpus, A3HighSplitsEachNicsNodeIntoTxAndRxHalves) {
  platform::Topology t = load("a3high");
  auto w = resolve_worker_cpus(Options{}, {nic("eth1"), nic("eth4")}, t);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->source, "numa");
  // Node 0 holds CPUs 0-51 with SMT siblings 104-155; node 1 the rest.
  EXPECT_EQ(format_cpu_list(w->tx.at("eth1")), "0-25,104-129");
  EXPECT_EQ(format_cpu_list(w->rx.at("eth1")), "26-51,130-155");
  EXPECT_EQ(format_cpu_list(w->tx.at("eth4")), "52-77,156-181");
  EXPECT_EQ(format_cpu_list(w->rx.at("eth4")), "78-103,182-207");
}

TEST(WorkerCpus, TwoCoreVmGivesTxAndRxACoreEach) {
  auto w = resolve_worker_cpus(Options{}, {nic("fa0"), nic("fa1")}, flat_host(2));
  ASSERT_TRUE(w.ok());
  for (const char* n : {"fa0", "fa1"}) {
    EXPECT_EQ(format_cpu_list(w->tx.at(n)), "0") << n;
    EXPECT_EQ(format_cpu_list(w->rx.at(n)), "1") << n;
  }
}

TEST(WorkerCpus, OddCoreCountGivesTheExtraCoreToRx) {
  auto w = resolve_worker_cpus(Options{}, {nic("eth0")}, flat_host(5));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(format_cpu_list(w->tx.at("eth0")), "0-1");
  EXPECT_EQ(format_cpu_list(w->rx.at("eth0")), "2-4");
}

TEST(WorkerCpus, OneCoreIsShared) {
  auto w = resolve_worker_cpus(Options{}, {nic("eth0")}, flat_host(1));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(format_cpu_list(w->tx.at("eth0")), "0");
  EXPECT_EQ(format_cpu_list(w->rx.at("eth0")), "0");
}

TEST(WorkerCpus, UnknownNodeLeavesTheSchedulerFree) {
  platform::Topology t = flat_host(4);
  t.nodes.push_back(platform::NumaNode{1, {}});  // two nodes: a virtual NIC's node is unknown
  auto w = resolve_worker_cpus(Options{}, {nic("veth0")}, t);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->tx.empty());
  EXPECT_TRUE(w->rx.empty());
}

TEST(WorkerCpus, BindingsWinAndBadOnesNameTheFault) {
  Options o;
  o.tx_bindings = "eth0:3";
  o.rx_bindings = "eth0:0-1";
  auto w = resolve_worker_cpus(o, {nic("eth0")}, flat_host(4));
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->source, "bindings");
  EXPECT_EQ(format_cpu_list(w->tx.at("eth0")), "3");
  EXPECT_EQ(format_cpu_list(w->rx.at("eth0")), "0-1");

  o.tx_bindings = "eth0:9";
  auto missing = resolve_worker_cpus(o, {nic("eth0")}, flat_host(4));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("CPU 9"), std::string::npos) << missing.status().to_string();
}

}  // namespace
}  // namespace ferry::core
