// `ferry tune apply / reset / verify` against temporary copies of the fixture
// trees: writes land, are read back and backed up; a dry run writes nothing;
// reset restores every file byte for byte; any failure part-way leaves the
// tree exactly as it was.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "fixture_tree.h"
#include "tune/apply.h"
#include "tune/plan.h"
#include "tune/plan_json.h"
#include "tune/verify.h"

namespace ferry::tune {
namespace {

using ferry::testing::FixtureCopy;
using ferry::testing::read_file;
using ferry::testing::tree_contents;
using ferry::testing::tree_differences;
using ferry::testing::write_file;

// HostFiles over a real tree that fails or lies where a test says.
class FaultyFiles : public platform::HostFiles {
 public:
  explicit FaultyFiles(std::string root) : real_(std::move(root)) {}
  std::string resolve(std::string_view path) const override { return real_.resolve(path); }
  Result<std::string> read(std::string_view path) override { return real_.read(path); }
  Status write(std::string_view path, std::string_view data) override {
    ++writes;
    if (writes == fail_write_at || (fail_from > 0 && writes >= fail_from)) return failure;
    if (path == lie_path) {
      lie_path.clear();  // once: the undo then writes the truth
      return real_.write(path, "0-1\n");
    }
    return real_.write(path, data);
  }

  int writes = 0;
  int fail_write_at = -1;  // this write (1-based) fails without writing
  int fail_from = -1;      // this write and every later one fail
  Status failure{Code::kUnavailable, "injected I/O error"};
  std::string lie_path;  // the first write here stores "0-1" instead

 private:
  platform::RootedHostFiles real_;
};

TunePlan plan_of(const std::string& root, TuneOptions o = {}) {
  auto p = make_plan(root, o);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(p).value() : TunePlan{};
}

bool exists(const std::string& path) { return std::filesystem::exists(path); }

TEST(TuneApply, ApplyVerifyResetRestoresEveryByte) {
  FixtureCopy fx("a3high");
  const auto before = tree_contents(fx.root());
  TunePlan plan = plan_of(fx.root());
  platform::RootedHostFiles files(fx.root());
  std::string backup = fx.aside("backup.txt");

  auto r = apply_changes(files, plan_changes(plan, false), backup, false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->written, 132);
  EXPECT_EQ(r->unchanged, 0);
  EXPECT_EQ(read_file(fx.root() + "/proc/irq/101/smp_affinity_list"), "8\n");
  EXPECT_EQ(read_file(fx.root() + "/proc/irq/117/smp_affinity_list"), "22\n");
  EXPECT_EQ(read_file(fx.root() + "/proc/irq/237/smp_affinity_list"), "75\n");
  EXPECT_EQ(read_file(fx.root() + "/proc/irq/100/smp_affinity_list"), "0-7,104-111\n");
  EXPECT_EQ(read_file(fx.root() + "/proc/irq/24/smp_affinity_list"), "0-207\n");  // NVMe: not ours
  EXPECT_EQ(read_file(fx.root() + "/proc/sys/net/core/rmem_max"), "212992\n");    // no --sysctl

  auto saved = load_backup(backup);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  ASSERT_EQ(saved->entries.size(), 132u);
  EXPECT_EQ(saved->entries[1].first, "/proc/irq/101/smp_affinity_list");
  for (const auto& [path, value] : saved->entries) EXPECT_EQ(value, "0-207\n") << path;

  VerifyReport v = verify_plan(fx.root(), plan, false);
  EXPECT_EQ(v.checks.size(), 132u);
  EXPECT_EQ(v.failures(), 0) << render_verify_text(v);
  auto vb = verify_bindings(fx.root(), plan.bindings.tx, plan.bindings.rx);
  ASSERT_TRUE(vb.ok()) << vb.status().to_string();
  EXPECT_EQ(vb->failures(), 0) << render_verify_text(*vb);

  // A second apply finds everything in place and leaves the backup alone.
  std::string backup_text = read_file(backup);
  auto again = apply_changes(files, plan_changes(plan_of(fx.root()), false), backup, false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->written, 0);
  EXPECT_EQ(again->unchanged, 132);
  EXPECT_EQ(read_file(backup), backup_text);

  auto reset = reset_from_backup(files, backup);
  ASSERT_TRUE(reset.ok()) << reset.status().to_string();
  EXPECT_EQ(reset->restored, 132);
  EXPECT_EQ(reset->unchanged, 0);
  EXPECT_FALSE(exists(backup));
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
  VerifyReport after_reset = verify_plan(fx.root(), plan, false);
  EXPECT_EQ(after_reset.failures(), 132);
}

TEST(TuneApply, DryRunWritesNothing) {
  FixtureCopy fx("a3high");
  const auto before = tree_contents(fx.root());
  platform::RootedHostFiles files(fx.root());
  std::string backup = fx.aside("backup.txt");
  auto r = apply_changes(files, plan_changes(plan_of(fx.root()), true), backup, true);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->written, 0);
  EXPECT_EQ(r->unchanged, 0);
  EXPECT_EQ(r->steps.size(), 132u + 216);
  EXPECT_EQ(r->steps[1].before, "0-207\n");
  EXPECT_EQ(r->steps[1].change.value, "8");
  EXPECT_TRUE(r->steps[1].needed);
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
  EXPECT_FALSE(exists(backup));
}

TEST(TuneApply, SysctlsAppliedAndReset) {
  FixtureCopy fx("a3high");
  const auto before = tree_contents(fx.root());
  platform::RootedHostFiles files(fx.root());
  std::string backup = fx.aside("backup.txt");
  auto r = apply_changes(files, plan_changes(plan_of(fx.root()), true), backup, false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->written, 132 + 216);
  EXPECT_EQ(read_file(fx.root() + "/proc/sys/net/core/rmem_max"), "268435456\n");
  EXPECT_EQ(read_file(fx.root() + "/proc/sys/net/core/optmem_max"), "1048576\n");
  EXPECT_EQ(read_file(fx.root() + "/proc/sys/net/ipv4/tcp_rmem"), "4096\t131072\t268435456\n");
  EXPECT_EQ(read_file(fx.root() + "/proc/sys/net/core/busy_poll"), "50\n");
  EXPECT_EQ(read_file(fx.root() + "/proc/sys/kernel/numa_balancing"), "0\n");
  EXPECT_EQ(read_file(fx.root() + "/sys/devices/system/cpu/cpu207/cpufreq/scaling_governor"), "performance\n");
  TunePlan now = plan_of(fx.root());
  for (const HostSetting& s : now.settings) {
    if (s.name != "irqbalance daemon") {
      EXPECT_EQ(s.state, SettingState::kOk) << s.name << ": " << s.current;
    }
  }
  VerifyReport v = verify_plan(fx.root(), now, true);
  EXPECT_EQ(v.failures(), 1) << render_verify_text(v);  // irqbalance is still running: manual

  auto reset = reset_from_backup(files, backup);
  ASSERT_TRUE(reset.ok()) << reset.status().to_string();
  EXPECT_EQ(reset->restored, 132 + 216);
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
}

TEST(TuneApply, WriteFailureMidwayRestoresEverything) {
  FixtureCopy fx("a3high");
  const auto before = tree_contents(fx.root());
  FaultyFiles files(fx.root());
  files.fail_write_at = 50;
  std::string backup = fx.aside("backup.txt");
  auto r = apply_changes(files, plan_changes(plan_of(fx.root()), true), backup, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("apply stopped at IRQ 156 (eth2 tx queue 15): injected I/O error"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("restored the 49 value(s) written before it, nothing is left changed"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
  EXPECT_FALSE(exists(backup)) << "a failed apply leaves no backup of its own";
}

TEST(TuneApply, FailureKeepsAnEarlierBackup) {
  FixtureCopy fx("a3high");
  const auto pristine = tree_contents(fx.root());
  std::string backup = fx.aside("backup.txt");
  platform::RootedHostFiles real(fx.root());
  TuneOptions eth1;
  eth1.nics = {"eth1"};
  ASSERT_TRUE(apply_changes(real, plan_changes(plan_of(fx.root(), eth1), false), backup, false).ok());
  const auto tuned_eth1 = tree_contents(fx.root());
  const std::string first_backup = read_file(backup);

  FaultyFiles files(fx.root());
  files.fail_write_at = 40;
  auto r = apply_changes(files, plan_changes(plan_of(fx.root()), false), backup, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(tree_differences(tuned_eth1, tree_contents(fx.root())), "");
  EXPECT_EQ(read_file(backup), first_backup);

  // A full apply merges: eth1's originals stay the pre-ferry ones.
  ASSERT_TRUE(apply_changes(real, plan_changes(plan_of(fx.root()), false), backup, false).ok());
  auto merged = load_backup(backup);
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->entries.size(), 132u);
  EXPECT_EQ(*merged->find("/proc/irq/101/smp_affinity_list"), "0-207\n");
  ASSERT_TRUE(reset_from_backup(real, backup).ok());
  EXPECT_EQ(tree_differences(pristine, tree_contents(fx.root())), "");
}

TEST(TuneApply, ReadBackMismatchRestores) {
  FixtureCopy fx("a3high");
  const auto before = tree_contents(fx.root());
  FaultyFiles files(fx.root());
  files.lie_path = "/proc/irq/117/smp_affinity_list";
  auto r = apply_changes(files, plan_changes(plan_of(fx.root()), false), fx.aside("b.txt"), false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  EXPECT_NE(r.status().message().find("wrote \"22\" to " + fx.root() +
                                      "/proc/irq/117/smp_affinity_list but read back \"0-1\""),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
}

TEST(TuneApply, PermissionDeniedSaysSo) {
  FixtureCopy fx("vm");
  const auto before = tree_contents(fx.root());
  FaultyFiles files(fx.root());
  files.fail_write_at = 3;
  files.failure = platform::errno_status(EACCES, "open for writing", files.resolve("/proc/irq/32/smp_affinity_list"));
  auto r = apply_changes(files, plan_changes(plan_of(fx.root()), false), fx.aside("b.txt"), false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kPermissionDenied);
  EXPECT_NE(r.status().message().find("Permission denied (changing it needs root)"), std::string::npos);
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
}

TEST(TuneApply, ReadOnlyFileOnDisk) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores file modes; PermissionDeniedSaysSo covers this";
  FixtureCopy fx("vm");
  std::string path = fx.root() + "/proc/irq/35/smp_affinity_list";
  ASSERT_EQ(::chmod(path.c_str(), 0444), 0);
  const auto before = tree_contents(fx.root());
  platform::RootedHostFiles files(fx.root());
  auto r = apply_changes(files, plan_changes(plan_of(fx.root()), false), fx.aside("b.txt"), false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kPermissionDenied);
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
}

TEST(TuneApply, UnreadableTargetStopsBeforeAnyWrite) {
  FixtureCopy fx("a3high");
  std::string path = fx.root() + "/proc/irq/150/smp_affinity_list";
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  const auto before = tree_contents(fx.root());
  FaultyFiles files(fx.root());
  std::string backup = fx.aside("backup.txt");
  TunePlan plan = plan_of(fx.root());
  auto r = apply_changes(files, plan_changes(plan, false), backup, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(files.writes, 0);
  EXPECT_NE(r.status().message().find("IRQ 150 (eth2 tx queue 9): cannot read current value"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
  EXPECT_FALSE(exists(backup));
}

TEST(TuneApply, PlanNamingMissingIrqStopsBeforeAnyWrite) {
  FixtureCopy fx("vm");
  const auto before = tree_contents(fx.root());
  std::string json = plan_to_json(plan_of(fx.root()));
  size_t at = json.find("\"irq\": 38");
  ASSERT_NE(at, std::string::npos);
  json.replace(at, 9, "\"irq\": 999");
  auto plan = plan_from_json(json, "plan.json");
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  FaultyFiles files(fx.root());
  auto r = apply_changes(files, plan_changes(*plan, false), fx.aside("b.txt"), false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("IRQ 999 (eth0 tx queue 3): cannot read current value"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("/proc/irq/999/smp_affinity_list"), std::string::npos);
  EXPECT_EQ(files.writes, 0);
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
}

TEST(TuneApply, FailedUndoKeepsBackupForReset) {
  FixtureCopy fx("a3high");
  const auto before = tree_contents(fx.root());
  FaultyFiles files(fx.root());
  files.fail_from = 10;  // the tenth write fails, and so do the undo writes
  std::string backup = fx.aside("backup.txt");
  auto r = apply_changes(files, plan_changes(plan_of(fx.root()), false), backup, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("restoring IRQ"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("still holds every original (run ferry tune reset)"), std::string::npos);
  ASSERT_TRUE(exists(backup));
  EXPECT_NE(tree_differences(before, tree_contents(fx.root())), "");

  platform::RootedHostFiles real(fx.root());
  auto reset = reset_from_backup(real, backup);
  ASSERT_TRUE(reset.ok()) << reset.status().to_string();
  EXPECT_EQ(reset->restored, 9);
  EXPECT_EQ(reset->unchanged, 123);
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
}

TEST(TuneReset, ErrorsAndPartialRestore) {
  FixtureCopy fx("vm");
  platform::RootedHostFiles files(fx.root());
  auto none = reset_from_backup(files, fx.aside("missing.txt"));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kNotFound);
  EXPECT_NE(none.status().message().find("no backup at"), std::string::npos);

  write_file(fx.aside("bad1.txt"), "hello\n");
  auto bad1 = reset_from_backup(files, fx.aside("bad1.txt"));
  EXPECT_EQ(bad1.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad1.status().message().find("line 1: expected \"# ferry tune backup v1\""), std::string::npos);
  write_file(fx.aside("bad2.txt"), "# ferry tune backup v1\n/proc/irq/31/smp_affinity_list 0-7\n");
  auto bad2 = reset_from_backup(files, fx.aside("bad2.txt"));
  EXPECT_NE(bad2.status().message().find("line 2: expected path<TAB>value"), std::string::npos);
  write_file(fx.aside("bad3.txt"), "# ferry tune backup v1\nproc/x\t1\n");
  EXPECT_NE(reset_from_backup(files, fx.aside("bad3.txt")).status().message().find("is not absolute"),
            std::string::npos);

  // One file became a folder: the rest is restored, the backup kept.
  const auto before = tree_contents(fx.root());
  std::string backup = fx.aside("backup.txt");
  ASSERT_TRUE(apply_changes(files, plan_changes(plan_of(fx.root()), false), backup, false).ok());
  std::string path = fx.root() + "/proc/irq/33/smp_affinity_list";
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  auto partial = reset_from_backup(files, backup);
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("is kept, fix the cause and run reset again"), std::string::npos);
  EXPECT_TRUE(exists(backup));
  EXPECT_EQ(read_file(fx.root() + "/proc/irq/31/smp_affinity_list"), "0-7\n");
  std::filesystem::remove(path);
  write_file(path, "2\n");
  auto rest = reset_from_backup(files, backup);
  ASSERT_TRUE(rest.ok()) << rest.status().to_string();
  EXPECT_EQ(rest->restored, 1);
  EXPECT_EQ(tree_differences(before, tree_contents(fx.root())), "");
}

TEST(TuneBackup, FormatRoundTripsAwkwardBytes) {
  Backup b;
  b.entries = {
      {"/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n"}, {"/a\\b", "back\\slash\r\n"}, {"/empty", ""}};
  auto back = parse_backup(format_backup(b), "b");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->entries, b.entries);
  EXPECT_EQ(parse_backup("# ferry tune backup v1\n/x\tbad\\q\n", "b").status().code(), Code::kInvalidArgument);
  EXPECT_NE(parse_backup("# ferry tune backup v1\n/x\t1\n/x\t2\n", "b").status().message().find("appears twice"),
            std::string::npos);
  EXPECT_EQ(default_backup_path("/tmp/fx"), "/tmp/fx/var/lib/ferry/tune-backup.txt");
  EXPECT_EQ(default_backup_path(""), "/var/lib/ferry/tune-backup.txt");
}

TEST(TuneVerify, UntunedHostAndBadBindings) {
  std::string root = ferry::testing::fixture_dir("a3high");
  TunePlan plan = plan_of(root);
  VerifyReport v = verify_plan(root, plan, false);
  EXPECT_EQ(v.failures(), 132);
  EXPECT_NE(render_verify_text(v).find("MISMATCH IRQ 101 (eth1 tx queue 0): expected 8, found 0-207"),
            std::string::npos);
  EXPECT_NE(render_verify_text(v).find("132 checks, 132 failed"), std::string::npos);

  auto vb = verify_bindings(root, plan.bindings.tx, plan.bindings.rx);
  ASSERT_TRUE(vb.ok()) << vb.status().to_string();
  EXPECT_EQ(vb->failures(), 128) << "every TX and RX IRQ is still on 0-207";

  auto tx = platform::parse_bindings("eth3:8-9", "tx").value();
  auto rx = platform::parse_bindings("eth3:9-10", "rx").value();
  auto off = verify_bindings(root, tx, rx);
  ASSERT_TRUE(off.ok());
  std::string text = render_verify_text(*off);
  EXPECT_NE(text.find("MISMATCH eth3 tx set on the NIC's NUMA node: expected node 1, found off-node: 8-9"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("MISMATCH eth3 tx and rx sets disjoint: expected no shared CPU, found shared: 9"),
            std::string::npos);

  auto unknown = verify_bindings(root, platform::parse_bindings("eth9:1", "tx").value(), {});
  EXPECT_EQ(unknown.status().code(), Code::kNotFound);
  EXPECT_NE(unknown.status().message().find("TX bindings: unknown NIC eth9"), std::string::npos);
  auto no_cpu = verify_bindings(root, {}, platform::parse_bindings("eth1:300", "rx").value());
  EXPECT_EQ(no_cpu.status().code(), Code::kNotFound);
  EXPECT_NE(no_cpu.status().message().find("RX bindings: eth1: CPU 300 does not exist"), std::string::npos);
}

TEST(TuneVerify, UnreadableIrqIsAFailedCheck) {
  FixtureCopy fx("vm");
  TunePlan plan = plan_of(fx.root());
  std::filesystem::remove(fx.root() + "/proc/irq/31/smp_affinity_list");
  VerifyReport v = verify_plan(fx.root(), plan, false);
  EXPECT_EQ(v.failures(), 11);
  EXPECT_NE(render_verify_text(v).find("IRQ 31 (eth0 rx queue 0): expected 2, found IRQ 31: no affinity file"),
            std::string::npos)
      << render_verify_text(v);
}

}  // namespace
}  // namespace ferry::tune
