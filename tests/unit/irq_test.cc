// /proc/interrupts parsing, NIC IRQ discovery (msi_irqs and names) and TX/RX
// classification, on fixture trees and on lines from real kernels.
#include "platform/irq.h"

#include <gtest/gtest.h>

#include <map>

#include "fixture_tree.h"

namespace ferry::platform {
namespace {

using ferry::testing::fixture_dir;

constexpr std::string_view kMixed =
    "           CPU0       CPU1       \n"
    " 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n"
    " 38:          0       1032 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n"
    " 45:          5          6  IR-PCI-MSI 524288-edge      eth0-TxRx-0\n"
    " 46:          1          2  PCI-MSI-edge      eth0-rx-1\n"
    " 47:          0          0  IR-PCI-MSIX-0000:0c:00.0    3-edge      mlx5_comp2@pci:0000:0c:00.0\n"
    " 48:          0          0  IR-PCI-MSIX-0000:0c:00.0    0-edge      mlx5_async0@pci:0000:0c:00.0\n"
    " 49:          3          4  PCI-MSI 2-edge      i40e-eth10-TxRx-0\n"
    "NMI:          0          0   Non-maskable interrupts\n"
    "LOC:     612754     806057   Local timer interrupts\n"
    "ERR:          0\n"
    "MIS:          0\n";

TEST(Interrupts, ParsesRowsOfSeveralKernels) {
  auto t = parse_interrupts(kMixed, "/proc/interrupts");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->cpus, (std::vector<int>{0, 1}));
  const InterruptLine* l = t->find(38);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->chip, "PCI-MSIX-0000:00:03.0");
  EXPECT_EQ(l->name, "virtio2-input.0");
  EXPECT_EQ(l->counts, (std::vector<uint64_t>{0, 1032}));
  EXPECT_EQ(t->find(24)->name, "ACPI:Ged");
  EXPECT_EQ(t->find(45)->chip, "IR-PCI-MSI");
  EXPECT_EQ(t->find(45)->name, "eth0-TxRx-0");
  EXPECT_EQ(t->find(46)->name, "eth0-rx-1");  // chip and trigger fused on old kernels
  EXPECT_EQ(t->find(47)->name, "mlx5_comp2@pci:0000:0c:00.0");
  EXPECT_EQ(t->find(99), nullptr);
  int named = 0;
  for (const InterruptLine& row : t->lines) {
    if (row.irq < 0) {
      ++named;
      EXPECT_EQ(row.counts.size(), 2u) << row.id;
    }
  }
  EXPECT_EQ(named, 4);
}

TEST(Interrupts, OfflineCpusSkipColumns) {
  auto t = parse_interrupts("      CPU0  CPU2  CPU5\n 7:  1 2 3  IO-APIC 7-edge x\n", "p");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->cpus, (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(t->find(7)->counts, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(Interrupts, MalformedTextIsRefused) {
  auto no_header = parse_interrupts(" 24: 1 2 IO-APIC 5-edge x\n", "/proc/interrupts");
  ASSERT_FALSE(no_header.ok());
  EXPECT_EQ(no_header.status().code(), Code::kInvalidArgument);
  EXPECT_NE(no_header.status().message().find("/proc/interrupts: line 1: expected CPU column names"),
            std::string::npos);
  auto short_row = parse_interrupts("  CPU0 CPU1\n 24: 1 IO-APIC 5-edge x\n", "/proc/interrupts");
  ASSERT_FALSE(short_row.ok());
  EXPECT_EQ(short_row.status().message(), "/proc/interrupts: line 2: IRQ 24 has 1 counts for 2 CPUs");
  auto no_colon = parse_interrupts("  CPU0\n 24 1 IO-APIC 5-edge x\n", "/proc/interrupts");
  ASSERT_FALSE(no_colon.ok());
  EXPECT_NE(no_colon.status().message().find("line 2: expected an IRQ number and ':'"), std::string::npos);
  EXPECT_FALSE(parse_interrupts("", "/proc/interrupts").ok());
}

TEST(Interrupts, ClassifiesByName) {
  struct Case {
    std::string_view name;
    IrqKind kind;
    int queue;
  };
  const Case cases[] = {
      {"virtio2-input.0", IrqKind::kRx, 0},
      {"virtio2-output.3", IrqKind::kTx, 3},
      {"virtio2-config", IrqKind::kOther, -1},
      {"virtio3-virtqueues", IrqKind::kTxRx, -1},
      {"eth0-TxRx-7", IrqKind::kTxRx, 7},
      {"i40e-eth0-TxRx-2", IrqKind::kTxRx, 2},
      {"eth0-Tx-Rx-5", IrqKind::kTxRx, 5},  // ena
      {"eth0-rx-1", IrqKind::kRx, 1},
      {"eth0-tx-4", IrqKind::kTx, 4},
      {"mlx5_comp12@pci:0000:0c:00.0", IrqKind::kTxRx, 12},
      {"mlx5_async0@pci:0000:0c:00.0", IrqKind::kOther, -1},
      {"gve-mgmnt@pci:0000:00:04.0", IrqKind::kOther, -1},
      {"ena-mgmnt@pci:0000:00:05.0", IrqKind::kOther, -1},
      {"gve-ntfy-blk7@pci:0000:00:04.0", IrqKind::kUnknown, 7},  // needs the NIC's block count
      {"eth0", IrqKind::kUnknown, -1},
      {"nvme0q3", IrqKind::kUnknown, -1},
  };
  for (const Case& c : cases) {
    IrqClass k = classify_irq_name(c.name);
    EXPECT_EQ(k.kind, c.kind) << c.name << ": " << irq_kind_name(k.kind) << " (" << k.basis << ")";
    EXPECT_EQ(k.queue, c.queue) << c.name;
    EXPECT_FALSE(k.basis.empty()) << c.name;
  }
  EXPECT_EQ(classify_irq_name("eth0").basis, "the name does not say TX or RX");
}

TEST(Interrupts, KindNamesRoundTrip) {
  for (IrqKind k : {IrqKind::kTx, IrqKind::kRx, IrqKind::kTxRx, IrqKind::kOther, IrqKind::kUnknown}) {
    auto back = parse_irq_kind(irq_kind_name(k));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, k);
  }
  EXPECT_EQ(parse_irq_kind("both").status().code(), Code::kInvalidArgument);
}

InterruptTable fixture_table(const std::string& name) {
  std::string text = ferry::testing::read_file(fixture_dir(name) + "/proc/interrupts");
  auto t = parse_interrupts(text, name);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : InterruptTable{};
}

TEST(NicIrqs, A3HighGveBlocksByConvention) {
  std::string root = fixture_dir("a3high");
  Topology topo = read_topology(root).value();
  InterruptTable table = fixture_table("a3high");
  EXPECT_EQ(table.cpus.size(), 208u);
  std::vector<NicIrq> irqs = find_nic_irqs(root, topo, table);
  ASSERT_EQ(irqs.size(), 4u * 33);  // the unused msi vectors 133/134 have no row
  std::map<std::string, std::map<IrqKind, int>> kinds;
  for (const NicIrq& i : irqs) {
    ++kinds[i.nic][i.kind];
    EXPECT_EQ(i.found_by, "msi_irqs+name") << i.irq;
  }
  for (const char* nic : {"eth1", "eth2", "eth3", "eth4"}) {
    EXPECT_EQ(kinds[nic][IrqKind::kTx], 16) << nic;
    EXPECT_EQ(kinds[nic][IrqKind::kRx], 16) << nic;
    EXPECT_EQ(kinds[nic][IrqKind::kOther], 1) << nic;
  }
  // eth1: IRQ 100 management, 101-116 blocks 0-15 (TX queues), 117-132 blocks 16-31 (RX queues).
  const NicIrq& mgmt = irqs[0];
  EXPECT_EQ(mgmt.irq, 100);
  EXPECT_EQ(mgmt.nic, "eth1");
  EXPECT_EQ(mgmt.kind, IrqKind::kOther);
  const NicIrq& tx3 = irqs[4];
  EXPECT_EQ(tx3.irq, 104);
  EXPECT_EQ(tx3.kind, IrqKind::kTx);
  EXPECT_EQ(tx3.queue, 3);
  EXPECT_EQ(tx3.name, "gve-ntfy-blk3@pci:0000:06:00.0");
  EXPECT_EQ(tx3.basis, "gve convention: block 3 of 32 (0-15 serve TX queues)");
  const NicIrq& rx0 = irqs[17];
  EXPECT_EQ(rx0.irq, 117);
  EXPECT_EQ(rx0.kind, IrqKind::kRx);
  EXPECT_EQ(rx0.queue, 0);
  EXPECT_EQ(rx0.basis, "gve convention: block 16 of 32 (16-31 serve RX queues)");
  EXPECT_EQ(irqs[33].nic, "eth2");
  EXPECT_EQ(irqs[33].irq, 140);
  for (const NicIrq& i : irqs) EXPECT_NE(i.irq, 24) << "the NVMe IRQ belongs to no NIC";
}

TEST(NicIrqs, VmVirtioByName) {
  std::string root = fixture_dir("vm");
  Topology topo = read_topology(root).value();
  std::vector<NicIrq> irqs = find_nic_irqs(root, topo, fixture_table("vm"));
  ASSERT_EQ(irqs.size(), 11u);  // eth0: config + 4 input + 4 output; eth1: config + virtqueues
  EXPECT_EQ(irqs[0].irq, 30);
  EXPECT_EQ(irqs[0].kind, IrqKind::kOther);
  EXPECT_EQ(irqs[1].irq, 31);
  EXPECT_EQ(irqs[1].kind, IrqKind::kRx);
  EXPECT_EQ(irqs[1].basis, "name says rx (virtio input queue)");
  EXPECT_EQ(irqs[2].kind, IrqKind::kTx);
  EXPECT_EQ(irqs[8].irq, 38);
  EXPECT_EQ(irqs[8].queue, 3);
  EXPECT_EQ(irqs[9].nic, "eth1");
  EXPECT_EQ(irqs[10].irq, 41);
  EXPECT_EQ(irqs[10].kind, IrqKind::kTxRx);
  for (const NicIrq& i : irqs) EXPECT_TRUE(i.irq != 24 && i.irq != 25) << "virtio0 is the disk";
}

TEST(NicIrqs, NameOnlyAttributionRespectsWordBoundaries) {
  Topology topo;
  NicInfo e0;
  e0.name = "eth0";
  NicInfo e1;
  e1.name = "eth1";
  topo.nics = {e0, e1};
  auto table = parse_interrupts(
      "  CPU0\n 50: 1 PCI-MSI 1-edge eth0-TxRx-0\n 51: 1 PCI-MSI 2-edge eth10-TxRx-0\n"
      " 52: 1 PCI-MSI 3-edge eth1-rx-0\n 53: 1 PCI-MSI 4-edge eth1\n",
      "p");
  ASSERT_TRUE(table.ok());
  std::vector<NicIrq> irqs = find_nic_irqs("/nonexistent", topo, *table);
  ASSERT_EQ(irqs.size(), 3u);
  EXPECT_EQ(irqs[0].irq, 50);
  EXPECT_EQ(irqs[0].nic, "eth0");
  EXPECT_EQ(irqs[0].found_by, "name");
  EXPECT_EQ(irqs[1].irq, 52);
  EXPECT_EQ(irqs[1].kind, IrqKind::kRx);
  EXPECT_EQ(irqs[2].irq, 53);
  EXPECT_EQ(irqs[2].kind, IrqKind::kUnknown);
}

TEST(IrqAffinity, ReadsListAndNamesMissingIrq) {
  auto a = read_irq_affinity(fixture_dir("a3high"), 101);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(format_cpu_list(*a), "0-207");
  auto missing = read_irq_affinity(fixture_dir("a3high"), 999);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("IRQ 999: no affinity file"), std::string::npos);
  EXPECT_NE(missing.status().message().find("/proc/irq/999/smp_affinity_list"), std::string::npos);
  EXPECT_EQ(irq_affinity_path(45), "/proc/irq/45/smp_affinity_list");
}

}  // namespace
}  // namespace ferry::platform
