// Reading the topology from the A3-high-like and VM fixture trees, and from
// roots that are not sysfs trees at all.
#include "platform/topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "fixture_tree.h"

namespace ferry::platform {
namespace {

using ferry::testing::fixture_dir;
using ferry::testing::FixtureCopy;

CpuList list(std::string_view s) { return parse_cpu_list(s, "test").value(); }

TEST(Topology, A3High) {
  auto t = read_topology(fixture_dir("a3high"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->cpus.size(), 208u);
  ASSERT_EQ(t->nodes.size(), 2u);
  EXPECT_EQ(t->nodes[0].id, 0);
  EXPECT_EQ(t->nodes[0].cpus, list("0-51,104-155"));
  EXPECT_EQ(t->nodes[1].cpus, list("52-103,156-207"));
  EXPECT_EQ(t->find_cpu(5)->siblings, (CpuList{5, 109}));
  EXPECT_EQ(t->find_cpu(150)->siblings, (CpuList{46, 150}));
  EXPECT_EQ(t->find_cpu(150)->numa_node, 0);
  EXPECT_EQ(t->find_cpu(52)->numa_node, 1);
  EXPECT_EQ(t->find_cpu(207)->numa_node, 1);
  EXPECT_EQ(t->find_cpu(208), nullptr);

  // lo and docker0 (no device link) are not NICs.
  ASSERT_EQ(t->nics.size(), 4u);
  const char* names[] = {"eth1", "eth2", "eth3", "eth4"};
  const char* pci[] = {"0000:06:00.0", "0000:0c:00.0", "0000:86:00.0", "0000:8c:00.0"};
  for (int i = 0; i < 4; ++i) {
    const NicInfo& n = t->nics[i];
    EXPECT_EQ(n.name, names[i]);
    EXPECT_EQ(n.driver, "gve");
    EXPECT_EQ(n.pci_address, pci[i]);
    EXPECT_EQ(n.numa_node, i < 2 ? 0 : 1);
    EXPECT_EQ(n.speed_mbps, 200000);
    EXPECT_EQ(n.mtu, 8244);
    EXPECT_EQ(n.rx_queues, 16);
    EXPECT_EQ(n.tx_queues, 16);
    EXPECT_EQ(t->nic_node(n), i < 2 ? 0 : 1);
  }
  EXPECT_EQ(t->nics[0].pci_path, "/sys/devices/pci0000:00/0000:06:00.0");
  EXPECT_EQ(t->nics[0].device_path, "/sys/devices/pci0000:00/0000:06:00.0");
  EXPECT_EQ(t->nics[2].pci_path, "/sys/devices/pci0000:80/0000:86:00.0");
  EXPECT_EQ(t->find_nic("lo"), nullptr);
  EXPECT_EQ(t->find_nic("docker0"), nullptr);

  // Eight H100s; the NVSwitch (class 0x0680) and the gVNICs are not GPUs.
  ASSERT_EQ(t->gpus.size(), 8u);
  EXPECT_EQ(t->gpus[0].pci_address, "0000:04:00.0");
  EXPECT_EQ(t->gpus[0].pci_class, 0x030200u);
  EXPECT_EQ(t->gpus[0].numa_node, 0);
  EXPECT_EQ(t->gpus[0].pci_path, "/sys/devices/pci0000:00/0000:04:00.0");
  EXPECT_EQ(t->gpus[7].pci_address, "0000:8b:00.0");
  EXPECT_EQ(t->gpus[7].numa_node, 1);
  int node0 = 0;
  for (const GpuInfo& g : t->gpus) node0 += g.numa_node == 0;
  EXPECT_EQ(node0, 4);
}

TEST(Topology, VmWithoutNumaFolders) {
  auto t = read_topology(fixture_dir("vm"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->cpus.size(), 8u);
  ASSERT_EQ(t->nodes.size(), 1u);  // no sys/devices/system/node: one node 0
  EXPECT_EQ(t->nodes[0].id, 0);
  EXPECT_EQ(t->nodes[0].cpus, list("0-7"));
  EXPECT_EQ(t->find_cpu(1)->siblings, (CpuList{1, 5}));
  EXPECT_EQ(t->find_cpu(7)->numa_node, 0);
  ASSERT_EQ(t->nics.size(), 2u);
  const NicInfo& e0 = t->nics[0];
  EXPECT_EQ(e0.name, "eth0");
  EXPECT_EQ(e0.driver, "virtio_net");
  EXPECT_EQ(e0.pci_address, "0000:00:04.0");  // the PCI function above virtio1
  EXPECT_EQ(e0.pci_path, "/sys/devices/pci0000:00/0000:00:04.0");
  EXPECT_EQ(e0.device_path, "/sys/devices/pci0000:00/0000:00:04.0/virtio1");
  EXPECT_EQ(e0.numa_node, -1);
  EXPECT_EQ(e0.speed_mbps, -1);
  EXPECT_EQ(e0.mtu, 1460);
  EXPECT_EQ(e0.rx_queues, 4);
  EXPECT_EQ(e0.tx_queues, 4);
  EXPECT_EQ(t->nic_node(e0), 0);  // the only node
  EXPECT_EQ(t->nics[1].name, "eth1");
  EXPECT_EQ(t->nics[1].rx_queues, 1);
  EXPECT_TRUE(t->gpus.empty());
}

TEST(Topology, MissingSiblingsMeanOneThreadPerCore) {
  FixtureCopy copy("vm");
  std::filesystem::remove(copy.root() + "/sys/devices/system/cpu/cpu3/topology/thread_siblings_list");
  auto t = read_topology(copy.root());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->find_cpu(3)->siblings, (CpuList{3}));
}

TEST(Topology, NicNodeUnknownOnMultiNodeHost) {
  FixtureCopy copy("a3high");
  ferry::testing::write_file(copy.root() + "/sys/devices/pci0000:80/0000:86:00.0/numa_node", "-1\n");
  auto t = read_topology(copy.root());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->find_nic("eth3")->numa_node, -1);
  EXPECT_EQ(t->nic_node(*t->find_nic("eth3")), -1);
}

TEST(Topology, BadRoots) {
  auto missing = read_topology("/nonexistent/ferry/root");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/ferry/root"), std::string::npos);

  ferry::testing::TempDir empty;
  auto not_sysfs = read_topology(empty.path());
  ASSERT_FALSE(not_sysfs.ok());
  EXPECT_EQ(not_sysfs.status().code(), Code::kNotFound);
  EXPECT_NE(not_sysfs.status().message().find("sys/devices/system/cpu/online"), std::string::npos);

  FixtureCopy copy("vm");
  ferry::testing::write_file(copy.root() + "/sys/devices/system/cpu/online", "0-x\n");
  auto bad = read_topology(copy.root());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cpu/online: position 3: expected a CPU number"), std::string::npos)
      << bad.status().message();
}

TEST(Topology, LiveHostReadsUnprivileged) {
  auto t = read_topology("");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(static_cast<long>(t->cpus.size()), ::sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_GE(t->nodes.size(), 1u);
  size_t in_nodes = 0;
  for (const NumaNode& n : t->nodes) in_nodes += n.cpus.size();
  EXPECT_EQ(in_nodes, t->cpus.size());
  for (const NicInfo& n : t->nics) EXPECT_NE(n.name, "lo");
}

}  // namespace
}  // namespace ferry::platform
