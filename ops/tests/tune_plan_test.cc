// `ferry tune plan`: IRQ affinities, host settings and the plan's JSON form,
// on the fixture trees.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "fixture_tree.h"
#include "tune/plan.h"
#include "tune/plan_json.h"
#include "tune/text_table.h"

namespace ferry::tune {
namespace {

using ferry::testing::fixture_dir;
using platform::CpuList;
using platform::format_cpu_list;
using platform::IrqKind;

TunePlan plan_for(const std::string& fixture, TuneOptions o = {}) {
  auto p = make_plan(fixture_dir(fixture), o);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(p).value() : TunePlan{};
}

const IrqPlan& irq(const TunePlan& p, int n) {
  for (const IrqPlan& i : p.irqs) {
    if (i.irq == n) return i;
  }
  static IrqPlan none;
  ADD_FAILURE() << "IRQ " << n << " not in the plan";
  return none;
}

std::string planned(const TunePlan& p, int n) { return format_cpu_list(irq(p, n).planned); }

const HostSetting& setting(const TunePlan& p, std::string_view name) {
  for (const HostSetting& s : p.settings) {
    if (s.name == name) return s;
  }
  static HostSetting none;
  ADD_FAILURE() << "no setting " << name;
  return none;
}

TEST(TunePlan, A3HighBindingStrings) {
  TunePlan p = plan_for("a3high");
  EXPECT_EQ(p.tx_bindings(), "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177");
  EXPECT_EQ(p.rx_bindings(), "eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191");
}

TEST(TunePlan, A3HighIrqsSpreadOverTheirSets) {
  TunePlan p = plan_for("a3high");
  ASSERT_EQ(p.irqs.size(), 132u);
  // TX queue q of eth1 is IRQ 101+q, of eth2 141+q; NICs of node 0 interleave
  // by queue over 8-21 first, then the siblings 112-125.
  EXPECT_EQ(planned(p, 101), "8");    // eth1 tx 0
  EXPECT_EQ(planned(p, 141), "9");    // eth2 tx 0
  EXPECT_EQ(planned(p, 102), "10");   // eth1 tx 1
  EXPECT_EQ(planned(p, 107), "20");   // eth1 tx 6
  EXPECT_EQ(planned(p, 147), "21");   // eth2 tx 6
  EXPECT_EQ(planned(p, 108), "112");  // eth1 tx 7: physical cores used up, siblings next
  EXPECT_EQ(planned(p, 154), "125");  // eth2 tx 13: the 28th and last CPU of the set
  EXPECT_EQ(planned(p, 115), "8");    // eth1 tx 14: 32 IRQs on 28 CPUs wrap around
  EXPECT_EQ(planned(p, 156), "11");   // eth2 tx 15
  // RX queue q of eth1 is IRQ 117+q; of eth2 157+q; of eth3 197+q.
  EXPECT_EQ(planned(p, 117), "22");
  EXPECT_EQ(planned(p, 157), "23");
  EXPECT_EQ(planned(p, 181), "60");  // eth3 tx 0
  EXPECT_EQ(planned(p, 221), "61");  // eth4 tx 0
  EXPECT_EQ(planned(p, 197), "74");  // eth3 rx 0
  EXPECT_EQ(planned(p, 237), "75");  // eth4 rx 0
  // Management vectors to the node's system cores.
  EXPECT_EQ(planned(p, 100), "0-7,104-111");
  EXPECT_EQ(planned(p, 220), "52-59,156-163");
  for (const IrqPlan& i : p.irqs) {
    EXPECT_EQ(format_cpu_list(i.current), "0-207") << i.irq;
    EXPECT_TRUE(i.current_error.empty());
    ASSERT_FALSE(i.planned.empty()) << i.irq;
    const CpuList& tx = p.bindings.tx.at(i.nic);
    const CpuList& rx = p.bindings.rx.at(i.nic);
    auto within = [&](const CpuList& set) {
      return std::includes(set.begin(), set.end(), i.planned.begin(), i.planned.end());
    };
    if (i.kind == IrqKind::kTx) {
      EXPECT_TRUE(within(tx)) << i.irq;
    }
    if (i.kind == IrqKind::kRx) {
      EXPECT_TRUE(within(rx)) << i.irq;
    }
    if (i.kind == IrqKind::kTx || i.kind == IrqKind::kRx) {
      EXPECT_EQ(i.planned.size(), 1u);
    }
  }
  // Each of the 28 RX CPUs of node 0 takes one or two of the 32 RX interrupts.
  std::map<int, int> per_cpu;
  for (const IrqPlan& i : p.irqs) {
    if (i.kind == IrqKind::kRx && p.bindings.nic_node.at(i.nic) == 0) ++per_cpu[i.planned[0]];
  }
  EXPECT_EQ(per_cpu.size(), 28u);
  for (const auto& [cpu, n] : per_cpu) EXPECT_TRUE(n == 1 || n == 2) << cpu;
}

TEST(TunePlan, SetModeGivesWholeSets) {
  TuneOptions o;
  o.irq_mode = IrqMode::kSet;
  TunePlan p = plan_for("a3high", o);
  EXPECT_EQ(planned(p, 101), "8-21,112-125");
  EXPECT_EQ(planned(p, 117), "22-35,126-139");
  EXPECT_EQ(planned(p, 237), "74-87,178-191");
  EXPECT_EQ(p.irq_mode, IrqMode::kSet);
}

TEST(TunePlan, ChosenNicsAndUnknownNic) {
  TuneOptions o;
  o.nics = {"eth4"};
  TunePlan p = plan_for("a3high", o);
  EXPECT_EQ(p.irqs.size(), 33u);
  for (const IrqPlan& i : p.irqs) EXPECT_EQ(i.nic, "eth4");
  o.nics = {"eth5"};
  auto bad = make_plan(fixture_dir("a3high"), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kNotFound);
  EXPECT_NE(bad.status().message().find("unknown NIC eth5"), std::string::npos);
}

TEST(TunePlan, A3HighSettings) {
  TunePlan p = plan_for("a3high");
  const HostSetting& rmem = setting(p, "net.core.rmem_max");
  EXPECT_EQ(rmem.state, SettingState::kChange);
  EXPECT_EQ(rmem.current, "212992");
  ASSERT_EQ(rmem.changes.size(), 1u);
  EXPECT_EQ(rmem.changes[0].path, "/proc/sys/net/core/rmem_max");
  EXPECT_EQ(rmem.changes[0].value, "268435456");
  const HostSetting& tcp = setting(p, "net.ipv4.tcp_rmem");
  EXPECT_EQ(tcp.current, "4096 131072 6291456");
  ASSERT_EQ(tcp.changes.size(), 1u);
  EXPECT_EQ(tcp.changes[0].value, "4096\t131072\t268435456");  // min and default kept
  EXPECT_EQ(setting(p, "net.core.optmem_max").changes[0].value, "1048576");
  const HostSetting& gov = setting(p, "cpu frequency governor");
  EXPECT_EQ(gov.state, SettingState::kChange);
  EXPECT_EQ(gov.current, "powersave (208 CPUs)");
  EXPECT_EQ(gov.changes.size(), 208u);
  EXPECT_EQ(gov.changes[3].path, "/sys/devices/system/cpu/cpu3/cpufreq/scaling_governor");
  EXPECT_EQ(setting(p, "kernel.numa_balancing").changes[0].value, "0");
  const HostSetting& irqb = setting(p, "irqbalance daemon");
  EXPECT_EQ(irqb.state, SettingState::kManual);
  EXPECT_EQ(irqb.current, "running (pid 1234)");
  EXPECT_TRUE(irqb.changes.empty());
  for (const HostSetting& s : p.settings) EXPECT_FALSE(s.why.empty()) << s.name;
}

TEST(TunePlan, VmPlan) {
  TunePlan p = plan_for("vm");
  EXPECT_EQ(p.tx_bindings(), "eth0:1,5;eth1:1,5");
  EXPECT_EQ(p.rx_bindings(), "eth0:2,6;eth1:2,6");
  ASSERT_EQ(p.irqs.size(), 11u);
  EXPECT_EQ(planned(p, 30), "0,4");  // virtio1-config: system cores
  EXPECT_EQ(planned(p, 31), "2");    // input.0
  EXPECT_EQ(planned(p, 32), "1");    // output.0
  EXPECT_EQ(planned(p, 33), "6");    // input.1: RX core's sibling next
  EXPECT_EQ(planned(p, 41), "2");    // virtqueues (txrx) go with RX
  EXPECT_NE(irq(p, 41).reason.find("serves TX and RX"), std::string::npos);
  EXPECT_EQ(setting(p, "net.core.rmem_max").state, SettingState::kOk);
  EXPECT_EQ(setting(p, "net.core.optmem_max").state, SettingState::kChange);
  EXPECT_EQ(setting(p, "cpu frequency governor").state, SettingState::kUnavailable);
  EXPECT_EQ(setting(p, "kernel.numa_balancing").state, SettingState::kUnavailable);
  EXPECT_EQ(setting(p, "irqbalance daemon").state, SettingState::kOk);
}

TEST(TunePlan, UnknownRolesAreLeftAlone) {
  ferry::testing::FixtureCopy copy("vm");
  // Rename eth0's RX queue 0 vector to something without a role.
  std::string path = copy.root() + "/proc/interrupts";
  std::string text = ferry::testing::read_file(path);
  size_t at = text.find("virtio1-input.0");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 15, "virtio1-mystery");
  ferry::testing::write_file(path, text);
  auto p = make_plan(copy.root(), {});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const IrqPlan& i = irq(*p, 31);
  EXPECT_EQ(i.kind, IrqKind::kUnknown);
  EXPECT_TRUE(i.planned.empty());
  EXPECT_NE(i.reason.find("left alone"), std::string::npos);
  EXPECT_TRUE(std::any_of(p->notes.begin(), p->notes.end(), [](const std::string& n) {
    return n.find("1 NIC interrupts have names that do not say TX or RX") != std::string::npos;
  }));
  for (const FileChange& c : plan_changes(*p, false)) EXPECT_NE(c.path, "/proc/irq/31/smp_affinity_list");
}

TEST(TunePlan, ChangesFromPlan) {
  TunePlan p = plan_for("a3high");
  std::vector<FileChange> irq_only = plan_changes(p, false);
  ASSERT_EQ(irq_only.size(), 132u);
  EXPECT_EQ(irq_only[1].path, "/proc/irq/101/smp_affinity_list");
  EXPECT_EQ(irq_only[1].value, "8");
  EXPECT_EQ(irq_only[1].what, "IRQ 101 (eth1 tx queue 0)");
  EXPECT_EQ(irq_only[1].compare, CompareAs::kCpuList);
  // Settings: rmem, wmem, tcp_rmem, tcp_wmem, optmem, busy_read, busy_poll,
  // 208 governors, numa_balancing; irqbalance is manual.
  EXPECT_EQ(plan_changes(p, true).size(), 132u + 7 + 208 + 1);
}

TEST(TunePlan, TextNamesEverything) {
  TunePlan p = plan_for("a3high");
  std::string text = render_plan_text(p);
  for (std::string_view want :
       {"export FERRY_TX_BINDINGS=\"eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177\"",
        "export NCCL_GPUDIRECTTCPX_RX_BINDINGS=\"eth1:22-35,126-139;", "0     52     0-7,104-111",
        "gve-ntfy-blk16@pci:0000:06:00.0", "irqbalance daemon", "running (pid 1234)", "8 NVIDIA GPU(s)"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want;
  }
}

// A value longer than its heading still leaves a gap before the next column
// (fixed widths printed "no cpufreq (VM or firmware)performance").
TEST(TunePlan, ColumnsNeverRunTogether) {
  std::string text = render_plan_text(plan_for("vm"));
  auto at = text.find("no cpufreq (VM or firmware)");
  ASSERT_NE(at, std::string::npos) << text;
  size_t after = at + std::string_view("no cpufreq (VM or firmware)").size();
  EXPECT_EQ(text.substr(after, 2), "  ") << text.substr(at, 80);
  // Its table's columns line up: "recommended" starts where its values do.
  size_t header = text.find("setting ");
  size_t col = text.find("recommended", header) - header;
  size_t row = text.rfind('\n', at) + 1;
  std::string line = text.substr(row, text.find('\n', at) - row);
  ASSERT_GT(line.size(), col) << line;
  EXPECT_EQ(line[col - 1], ' ') << line;
  EXPECT_NE(line[col], ' ') << line;
}

TEST(TextTable, WidthsFollowTheWidestCell) {
  TextTable t({"a", "bb", "c"});
  t.add({"long value", "x", "last cell is not padded"});
  t.add({"y", "a wider one", "z"});
  EXPECT_EQ(t.render(),
            "a           bb           c\n"
            "long value  x            last cell is not padded\n"
            "y           a wider one  z\n");
}

TEST(PlanJson, RoundTrip) {
  TunePlan p = plan_for("a3high");
  std::string json = plan_to_json(p);
  auto back = plan_from_json(json, "plan.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->tx_bindings(), p.tx_bindings());
  EXPECT_EQ(back->rx_bindings(), p.rx_bindings());
  ASSERT_EQ(back->irqs.size(), p.irqs.size());
  for (size_t k = 0; k < p.irqs.size(); ++k) {
    EXPECT_EQ(back->irqs[k].irq, p.irqs[k].irq);
    EXPECT_EQ(back->irqs[k].planned, p.irqs[k].planned);
    EXPECT_EQ(back->irqs[k].kind, p.irqs[k].kind);
    EXPECT_EQ(back->irqs[k].queue, p.irqs[k].queue);
    EXPECT_EQ(back->irqs[k].nic, p.irqs[k].nic);
  }
  ASSERT_EQ(back->bindings.nodes.size(), 2u);
  EXPECT_EQ(format_cpu_list(back->bindings.nodes[1].system), "52-59,156-163");
  EXPECT_EQ(back->bindings.nic_node.at("eth3"), 1);
  std::vector<FileChange> a = plan_changes(p, true), b = plan_changes(*back, true);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].path, b[k].path);
    EXPECT_EQ(a[k].value, b[k].value);
  }
  EXPECT_NE(json.find("\"NCCL_GPUDIRECTTCPX_TX_BINDINGS\": \"eth1:8-21,112-125;"), std::string::npos);
}

std::string bad_plan(const std::string& json) {
  auto r = plan_from_json(json, "plan.json");
  EXPECT_FALSE(r.ok()) << json.substr(0, 200);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  return r.status().message();
}

TEST(PlanJson, MalformedPlansNameTheField) {
  TunePlan p = plan_for("vm");
  std::string good = plan_to_json(p);
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  EXPECT_NE(bad_plan("{not json").find("plan.json: not valid JSON at byte"), std::string::npos);
  EXPECT_NE(bad_plan("[]").find("plan.json: expected an object"), std::string::npos);
  EXPECT_NE(bad_plan(edit("\"version\": 1", "\"version\": 7")).find("plan version 7"), std::string::npos);
  EXPECT_NE(bad_plan(edit("\"planned\": \"2\"", "\"planned\": \"2-x\"")).find("irqs[1].planned: position 3"),
            std::string::npos);
  EXPECT_NE(bad_plan(edit("\"kind\": \"rx\"", "\"kind\": \"both\"")).find("irqs[1].kind"), std::string::npos);
  EXPECT_NE(bad_plan(edit("\"irq\": 31", "\"irq\": \"31\"")).find("irqs[1].irq: expected an integer"),
            std::string::npos);
  EXPECT_NE(bad_plan(edit("\"tx_bindings\": \"eth0:1,5;", "\"tx_bindings\": \"eth0:1,x;"))
                .find("plan.json.tx_bindings: position 8: expected a CPU number"),
            std::string::npos);
  EXPECT_NE(bad_plan(edit("\"/proc/sys/net/core/optmem_max\"", "\"/etc/passwd\""))
                .find("\"/etc/passwd\" is not a file ferry tune changes"),
            std::string::npos);
  EXPECT_NE(bad_plan(edit("\"/proc/sys/net/core/optmem_max\"", "\"/proc/sys/net/../../../etc/shadow\""))
                .find("is not a file ferry tune changes"),
            std::string::npos);
}

TEST(TunePlan, LiveHostPlansUnprivileged) {
  auto p = make_plan("", {});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_FALSE(p->topology.cpus.empty());
  for (const auto& [nic, tx] : p->bindings.tx) {
    EXPECT_FALSE(tx.empty()) << nic;
    EXPECT_FALSE(p->bindings.rx.at(nic).empty()) << nic;
  }
  EXPECT_FALSE(render_plan_text(*p).empty());
}

}  // namespace
}  // namespace ferry::tune
