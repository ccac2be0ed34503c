// The host's shape as sysfs describes it: CPUs with their NUMA node and SMT
// siblings, NUMA nodes, physical NICs (driver, PCI path, NUMA node, speed,
// MTU, queues) and NVIDIA GPUs. `ferry tune` plans bindings from it, `ferry
// diag` prints it, and the engine pins its workers NUMA-locally with it.
//
// Everything is read under a root folder so that tests run against fixture
// trees: read_topology("tests/fixtures/a3high") reads
// tests/fixtures/a3high/sys/... ; "" or "/" reads the live system. Reading
// needs no privilege.
//
// Example:
//   FERRY_ASSIGN_OR_RETURN(auto topo, ferry::platform::read_topology(""));
//   const NicInfo* nic = topo.find_nic("eth1");
//   CpuList local = topo.node_cpus(nic->numa_node);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"
#include "platform/cpu_binding.h"

namespace ferry::platform {

struct CpuInfo {
  int id = 0;
  int numa_node = 0;  // 0 when the host has no NUMA information
  CpuList siblings;   // SMT threads of the same core, this one included
};

struct NumaNode {
  int id = 0;
  CpuList cpus;  // online CPUs only
};

struct NicInfo {
  std::string name;         // "eth1"
  std::string driver;       // "gve", "mlx5_core", "virtio_net"; "" when unbound
  std::string pci_address;  // "0000:0c:00.0"; "" when the NIC is not behind PCI
  // Resolved sysfs path of the PCI function, relative to the root:
  // "/sys/devices/pci0000:00/0000:0c:00.0" ("" when not PCI).
  std::string pci_path;
  // The device directory the NIC's `device` link names, relative to the root;
  // for virtio it is ".../0000:00:03.0/virtio2", below the PCI function.
  std::string device_path;
  int numa_node = -1;       // -1: sysfs does not say (single-node hosts, VMs)
  int64_t speed_mbps = -1;  // -1: unknown (link down, virtual NIC)
  int mtu = 0;
  int rx_queues = 0;  // entries rx-N under queues/
  int tx_queues = 0;
};

struct GpuInfo {
  std::string pci_address;  // "0000:04:00.0"
  std::string pci_path;     // "/sys/devices/pci0000:00/0000:04:00.0", relative to the root
  uint32_t pci_class = 0;   // 0x030200 (3D controller) or 0x030000 (VGA)
  int numa_node = -1;       // -1: unknown
};

// A snapshot of the host's shape. Plain data; copy freely.
struct Topology {
  std::vector<CpuInfo> cpus;    // online CPUs, ascending id
  std::vector<NumaNode> nodes;  // nodes with at least one online CPU, ascending id
  std::vector<NicInfo> nics;    // physical NICs, natural name order
  std::vector<GpuInfo> gpus;    // ascending PCI address

  // The NIC named `name`, or nullptr.
  const NicInfo* find_nic(std::string_view name) const;
  // The online CPU `id`, or nullptr.
  const CpuInfo* find_cpu(int id) const;
  // The node `id`, or nullptr.
  const NumaNode* find_node(int id) const;
  // The node a NIC's work belongs on: its own when sysfs says, else the only
  // node on a one-node host, else -1.
  int nic_node(const NicInfo& nic) const;
  // All online CPU ids.
  CpuList all_cpus() const;
};

// Reads the topology under `root` ("" or "/" = the live system).
// CPUs: sys/devices/system/cpu/online and cpuN/topology/thread_siblings_list
// (a CPU is its own only sibling when the file is missing). NUMA nodes:
// sys/devices/system/node/nodeN/cpulist (one node 0 holding every CPU when
// the folder is missing). NICs: sys/class/net/*, skipping lo and devices
// without a `device` link (bridges, veth, tunnels). GPUs: PCI functions with
// vendor 0x10de and class 0x0302xx or 0x0300xx under sys/bus/pci/devices.
// Blocks on file reads only. Returns kNotFound when the CPU online list is
// missing (not a Linux sysfs tree), kInvalidArgument when a file is malformed
// (naming the file).
Result<Topology> read_topology(std::string_view root);

}  // namespace ferry::platform
