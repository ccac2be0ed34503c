// `ferry diag`: snapshots of the fixture trees, their JSON round trip, and the
// diff across the 12 s benchmark recorded in tests/fixtures/a3high-after
// (see make_fixtures.py for what happened in it).
#include <gtest/gtest.h>
#include <unistd.h>

#include "diag/diff.h"
#include "diag/snapshot.h"
#include "diag/snapshot_json.h"
#include "diag/snapshot_markdown.h"
#include "fixture_tree.h"

namespace ferry::diag {
namespace {

using ferry::testing::fixture_dir;
using ferry::testing::FixtureCopy;

Snapshot snap(const std::string& root) {
  auto s = take_snapshot(root);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : Snapshot{};
}

const IrqSample* find_irq(const Snapshot& s, int irq) {
  for (const IrqSample& i : s.irqs) {
    if (i.irq == irq) return &i;
  }
  return nullptr;
}

TEST(DiagSnapshot, A3High) {
  Snapshot s = snap(fixture_dir("a3high"));
  EXPECT_EQ(s.hostname, "a3high-fixture");
  EXPECT_DOUBLE_EQ(s.uptime_s, 1000.0);
  EXPECT_EQ(s.topology.cpus.size(), 208u);
  EXPECT_EQ(s.topology.gpus.size(), 8u);
  ASSERT_EQ(s.irqs.size(), 132u);
  const IrqSample* i = find_irq(s, 101);
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(i->nic, "eth1");
  EXPECT_EQ(i->kind, platform::IrqKind::kTx);
  EXPECT_EQ(platform::format_cpu_list(i->affinity), "0-207");
  EXPECT_EQ(i->counts, (PerCpu{{101 % 52, 1000 + 3 * 101}}));
  EXPECT_EQ(i->total, 1303u);
  EXPECT_EQ(s.net_rx.at(5), 105u);
  EXPECT_EQ(s.net_tx.at(207), 10u);
  ASSERT_EQ(s.cpu_times.size(), 208u);
  EXPECT_EQ(s.cpu_times.at(3).user, 10003u);
  EXPECT_EQ(s.cpu_times.at(3).idle, 900030u);
  bool found = false;
  for (const auto& [name, value] : s.sysctls) {
    if (name == "net.ipv4.tcp_rmem") {
      EXPECT_EQ(value, "4096 131072 6291456");
      found = true;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(s.notes.empty()) << s.notes.front();
}

TEST(DiagSnapshot, VmAndMarkdown) {
  Snapshot s = snap(fixture_dir("vm"));
  ASSERT_EQ(s.irqs.size(), 11u);
  EXPECT_EQ(find_irq(s, 31)->counts, (PerCpu{{0, 10000}}));
  EXPECT_EQ(s.sysctls.back().first, "kernel.numa_balancing");
  EXPECT_EQ(s.sysctls.back().second, "");  // absent on this VM
  std::string md = snapshot_to_markdown(s);
  for (std::string_view want :
       {"# ferry diag snapshot", "| eth0 | virtio_net | 0000:00:04.0 | ? | ? | 1460 | 4/4 |",
        "| 31 | eth0 | rx | 0 | 0-7 | 10000 | cpu0: 10000 |", "| 0 | 0-7 | 2 thread(s) per core |",
        "| kernel.numa_balancing | (absent) |", "None found."}) {
    EXPECT_NE(md.find(want), std::string::npos) << want << "\n" << md;
  }
}

TEST(DiagSnapshot, MissingInterruptsIsAnError) {
  FixtureCopy fx("vm");
  std::filesystem::remove(fx.root() + "/proc/interrupts");
  auto s = take_snapshot(fx.root());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kNotFound);
  EXPECT_NE(s.status().message().find("/proc/interrupts"), std::string::npos);
}

TEST(DiagSnapshot, MissingSoftirqsAndStatAreNotes) {
  FixtureCopy fx("vm");
  std::filesystem::remove(fx.root() + "/proc/softirqs");
  std::filesystem::remove(fx.root() + "/proc/stat");
  Snapshot s = snap(fx.root());
  EXPECT_TRUE(s.net_rx.empty());
  EXPECT_TRUE(s.cpu_times.empty());
  ASSERT_EQ(s.notes.size(), 2u);
  EXPECT_NE(s.notes[0].find("no softirq counts"), std::string::npos);
}

TEST(DiagSnapshot, ProcStatParsing) {
  auto t = parse_proc_stat("cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu12 10 0 5 100\nintr 1 2\n", "stat");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ(t->at(0).total(), 36u);
  EXPECT_EQ(t->at(0).busy(), 36u - 4 - 5);
  EXPECT_EQ(t->at(12).total(), 115u);
  auto bad = parse_proc_stat("cpu0 1 x\n", "/proc/stat");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "/proc/stat: line 1: expected \"cpuN user nice system idle ...\"");
}

TEST(DiagJson, RoundTripIsExact) {
  Snapshot s = snap(fixture_dir("a3high"));
  std::string json = snapshot_to_json(s);
  auto back = snapshot_from_json(json, "a.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(snapshot_to_json(*back), json);
  EXPECT_EQ(back->irqs.size(), 132u);
  EXPECT_EQ(back->topology.nics[2].name, "eth3");
  EXPECT_EQ(back->topology.nics[2].numa_node, 1);
  EXPECT_EQ(back->topology.gpus[0].pci_class, 0x030200u);
}

// Each CPU's times are labeled; a snapshot from before the labels (eight
// counts in /proc/stat's order) still reads the same.
TEST(DiagJson, CpuTimesAreLabeledAndOldArraysStillRead) {
  Snapshot s = snap(fixture_dir("a3high"));
  std::string json = snapshot_to_json(s);
  EXPECT_NE(json.find("\"user\": 10003"), std::string::npos);
  EXPECT_NE(json.find("\"idle\": 900030"), std::string::npos);
  EXPECT_NE(json.find("\"cpu_times_unit\": \"USER_HZ ticks"), std::string::npos);
  const CpuTimes& c = s.cpu_times.at(3);
  size_t at = json.find("\"3\": {");
  ASSERT_NE(at, std::string::npos);
  size_t end = json.find('}', at);
  std::string old_form = "\"3\": [" + std::to_string(c.user) + ", " + std::to_string(c.nice) + ", " +
                         std::to_string(c.system) + ", " + std::to_string(c.idle) + ", " + std::to_string(c.iowait) +
                         ", " + std::to_string(c.irq) + ", " + std::to_string(c.softirq) + ", " +
                         std::to_string(c.steal) + "]";
  std::string older = json;
  older.replace(at, end + 1 - at, old_form);
  auto back = snapshot_from_json(older, "old.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(snapshot_to_json(*back), json);
  std::string missing = json;
  size_t steal = missing.find("\"steal\"", at);
  missing.replace(steal, 7, "\"stale\"");
  auto bad = snapshot_from_json(missing, "a.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cpu_times[\"3\"]: no \"steal\""), std::string::npos)
      << bad.status().message();
}

std::string bad_snapshot(const std::string& json) {
  auto r = snapshot_from_json(json, "a.json");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  return r.status().message();
}

TEST(DiagJson, MalformedSnapshotsNameTheField) {
  std::string good = snapshot_to_json(snap(fixture_dir("vm")));
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  EXPECT_NE(bad_snapshot("").find("a.json: not valid JSON"), std::string::npos);
  EXPECT_NE(bad_snapshot("{}").find("a.json: missing field \"version\""), std::string::npos);
  EXPECT_NE(bad_snapshot(edit("\"0\": 10000", "\"0\": -3")).find("irqs[1].counts[\"0\"]: expected a count"),
            std::string::npos);
  EXPECT_NE(bad_snapshot(edit("\"0\": 10000", "\"zero\": 10000")).find("key \"zero\" is not a CPU number"),
            std::string::npos);
  EXPECT_NE(bad_snapshot(edit("\"affinity\": \"0-7\"", "\"affinity\": 7")).find("irqs[0].affinity: expected a string"),
            std::string::npos);
  EXPECT_NE(bad_snapshot(edit("\"kind\": \"other\"", "\"kind\": \"weird\"")).find("irqs[0].kind"), std::string::npos);
}

TEST(DiagDiff, BenchmarkInterval) {
  FixtureCopy fx("a3high");
  Snapshot a = snap(fx.root());
  fx.overlay("a3high-after");
  Snapshot b = snap(fx.root());
  // Through JSON, as `ferry diag diff A.json B.json` does.
  auto ja = snapshot_from_json(snapshot_to_json(a), "A.json");
  auto jb = snapshot_from_json(snapshot_to_json(b), "B.json");
  ASSERT_TRUE(ja.ok() && jb.ok());
  auto r = diff_snapshots(*ja, *jb);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->seconds, 12.0);
  ASSERT_EQ(r->nics.size(), 4u);
  const NicDelta& eth1 = r->nics[0];
  EXPECT_EQ(eth1.nic, "eth1");
  EXPECT_EQ(eth1.node, 0);
  EXPECT_EQ(eth1.total, 16u * 5000 + 2500);
  EXPECT_EQ(eth1.off_node, 0u);
  EXPECT_EQ(eth1.per_kind.at("rx"), 80000u);
  EXPECT_EQ(eth1.per_kind.at("tx"), 2500u);
  // RX blocks 16-31 fired on CPU 22 + block % 14: 24 and 25 took two queues.
  PerCpu want{{8, 2500}, {22, 5000}, {23, 5000}, {24, 10000}, {25, 10000}};
  for (int c = 26; c <= 35; ++c) want[c] = 5000;
  EXPECT_EQ(eth1.per_cpu, want);
  const NicDelta& eth3 = r->nics[2];
  EXPECT_EQ(eth3.nic, "eth3");
  EXPECT_EQ(eth3.node, 1);
  EXPECT_EQ(eth3.total, 1600u);
  EXPECT_EQ(eth3.off_node, 1600u) << "eth3 (node 1) interrupts ran on CPU 0 (node 0)";
  EXPECT_EQ(r->nics[1].total, 0u);
  EXPECT_EQ(r->nics[3].total, 0u);

  EXPECT_EQ(r->net_rx, 14u * 7000);
  EXPECT_EQ(r->net_tx, 300u);
  ASSERT_EQ(r->cpus.size(), 208u);
  const CpuDelta& c22 = r->cpus[22];
  EXPECT_EQ(c22.cpu, 22);
  EXPECT_EQ(c22.node, 0);
  EXPECT_EQ(c22.net_rx, 7000u);
  EXPECT_EQ(c22.nic_irqs.at("eth1"), 5000u);
  EXPECT_DOUBLE_EQ(c22.busy_pct, 50.0);
  EXPECT_DOUBLE_EQ(r->cpus[0].busy_pct, 0.0);
  EXPECT_EQ(r->cpus[0].nic_irqs.at("eth3"), 1600u);
  EXPECT_NEAR(r->busy_pct, 100.0 * 14 * 600 / (208.0 * 1200), 1e-9);
  EXPECT_TRUE(r->notes.empty()) << r->notes.front();

  std::string md = render_diff_markdown(*r);
  for (std::string_view want_text :
       {"Interval: 12.0 s", "| eth1 | 0 | 82500 | 0 | rx 80000, tx 2500 | cpu24: 10000, cpu25: 10000, cpu22: 5000,",
        "| eth3 | 1 | 1600 | 1600 | rx 1600 | cpu0: 1600 |", "| 22 | 0 | eth1 5000 | 7000 | 0 | 50.0 |",
        "| 0 | 0 | eth3 1600 | 0 | 0 | 0.0 |"}) {
    EXPECT_NE(md.find(want_text), std::string::npos) << want_text << "\n" << md;
  }
}

TEST(DiagDiff, WrongOrderIsRefused) {
  FixtureCopy fx("a3high");
  Snapshot a = snap(fx.root());
  fx.overlay("a3high-after");
  Snapshot b = snap(fx.root());
  auto r = diff_snapshots(b, a);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("B was taken before A, or the host rebooted"), std::string::npos);
  // Without uptimes the counters tell.
  a.uptime_s = b.uptime_s = -1;
  auto r2 = diff_snapshots(b, a);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("went from"), std::string::npos) << r2.status().message();
}

TEST(DiagDiff, AffinityChangesAndNewIrqsAreNoted) {
  FixtureCopy fx("vm");
  Snapshot a = snap(fx.root());
  ferry::testing::write_file(fx.root() + "/proc/irq/31/smp_affinity_list", "2\n");
  Snapshot b = snap(fx.root());
  b.irqs.erase(b.irqs.begin());  // IRQ 30 gone
  IrqSample extra = b.irqs.back();
  extra.irq = 77;
  b.irqs.push_back(extra);
  auto r = diff_snapshots(a, b);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::string notes;
  for (const std::string& n : r->notes) notes += n + "\n";
  EXPECT_NE(notes.find("IRQ 31 (eth0) affinity changed from 0-7 to 2"), std::string::npos) << notes;
  EXPECT_NE(notes.find("IRQ 77 (eth1) is not in A; counted from zero"), std::string::npos) << notes;
  EXPECT_NE(notes.find("IRQ 30 (eth0) is gone in B"), std::string::npos) << notes;
  EXPECT_EQ(r->nics[1].total, 333u) << "the new IRQ's whole count is in the interval";
}

TEST(DiagSnapshot, LiveHostUnprivileged) {
  auto s = take_snapshot("");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(static_cast<long>(s->topology.cpus.size()), ::sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_FALSE(s->cpu_times.empty());
  auto back = snapshot_from_json(snapshot_to_json(*s), "live.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  auto d = diff_snapshots(*back, *back);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_DOUBLE_EQ(d->seconds, 0.0);
}

}  // namespace
}  // namespace ferry::diag
