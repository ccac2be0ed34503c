// `ferry tune`: plan, apply, reset and verify CPU bindings and IRQ affinities.
// The command-line glue only; the logic lives in ops/tune/ and src/platform/
// where the unit tests reach it.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "ferry/commands.h"
#include "platform/host_files.h"
#include "tune/apply.h"
#include "tune/plan.h"
#include "tune/plan_json.h"
#include "tune/verify.h"

namespace ferry::cli {
namespace {

struct TuneArgs {
  std::string root;
  bool json = false;
  std::vector<std::string> nics;
  std::string irq_mode = "spread";
  int system_cores = -1, tx_cores = -1, rx_cores = -1;
  bool dry_run = false;
  bool sysctl = false;
  std::string backup;
  std::string plan_file;
  bool settings = false;
  std::string tx, rx;
};

[[noreturn]] void fail(std::string_view cmd, const Status& s) {
  std::fprintf(stderr, "ferry tune %.*s: %s\n", static_cast<int>(cmd.size()), cmd.data(), s.to_string().c_str());
  std::exit(2);
}

void add_root(CLI::App* c, TuneArgs& a) {
  c->add_option("--root", a.root,
                "read and write /proc and /sys under this folder (tests, fixtures); default: this host");
}

void add_policy(CLI::App* c, TuneArgs& a) {
  c->add_option("--nics", a.nics, "NICs to plan for (default: every physical NIC)")->delimiter(',');
  c->add_option("--irq-mode", a.irq_mode, "spread: one CPU per IRQ, round-robin; set: each IRQ gets the whole set")
      ->check(CLI::IsMember({"spread", "set"}));
  c->add_option("--system-cores", a.system_cores, "cores per node left to the system (default: a sixth)");
  c->add_option("--tx-cores", a.tx_cores, "TX cores per node (default: a third of the rest)");
  c->add_option("--rx-cores", a.rx_cores, "RX cores per node (default: a third of the rest)");
}

tune::TunePlan plan_or_exit(std::string_view cmd, const TuneArgs& a) {
  if (!a.plan_file.empty()) {
    auto text = platform::read_text_file(a.plan_file);
    if (!text.ok()) fail(cmd, text.status());
    auto plan = tune::plan_from_json(*text, a.plan_file);
    if (!plan.ok()) fail(cmd, plan.status());
    return std::move(plan).value();
  }
  tune::TuneOptions o;
  o.nics = a.nics;
  o.policy = platform::BindingPolicy{a.system_cores, a.tx_cores, a.rx_cores};
  auto mode = tune::parse_irq_mode(a.irq_mode);
  if (!mode.ok()) fail(cmd, mode.status());
  o.irq_mode = *mode;
  auto plan = tune::make_plan(a.root, o);
  if (!plan.ok()) fail(cmd, plan.status());
  return std::move(plan).value();
}

std::string backup_path(const TuneArgs& a) { return a.backup.empty() ? tune::default_backup_path(a.root) : a.backup; }

void run_plan(const TuneArgs& a) {
  tune::TunePlan plan = plan_or_exit("plan", a);
  std::string out = a.json ? tune::plan_to_json(plan) : tune::render_plan_text(plan);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::exit(0);
}

void run_apply(const TuneArgs& a) {
  tune::TunePlan plan = plan_or_exit("apply", a);
  std::vector<tune::FileChange> changes = tune::plan_changes(plan, a.sysctl);
  platform::RootedHostFiles files(a.root);
  std::string backup = backup_path(a);
  auto report = tune::apply_changes(files, changes, backup, a.dry_run);
  if (!report.ok()) fail("apply", report.status());
  for (const tune::ApplyStep& s : report->steps) {
    std::string before = s.before;
    while (!before.empty() && (before.back() == '\n' || before.back() == ' ')) before.pop_back();
    if (!s.needed) {
      std::printf("unchanged     %s: %s\n", s.change.what.c_str(), s.change.value.c_str());
    } else {
      std::printf("%s %s: %s -> %s\n", a.dry_run ? "would change" : "changed     ", s.change.what.c_str(),
                  before.c_str(), s.change.value.c_str());
    }
  }
  int needed = static_cast<int>(report->steps.size()) - report->unchanged;
  if (a.dry_run) {
    std::printf("dry run: %d change(s) planned, %d already in place; nothing written\n", needed, report->unchanged);
  } else if (report->written == 0) {
    std::printf("nothing to change (%d already in place)\n", report->unchanged);
  } else {
    std::printf(
        "applied %d change(s), each read back; %d already in place; originals saved in %s "
        "(undo with `ferry tune reset`)\n",
        report->written, report->unchanged, backup.c_str());
  }
  if (!a.sysctl) {
    int settings = 0;
    for (const tune::HostSetting& s : plan.settings) settings += s.state == tune::SettingState::kChange ? 1 : 0;
    if (settings > 0) std::printf("%d host setting(s) below recommendation; add --sysctl to change them\n", settings);
  }
  std::exit(0);
}

void run_reset(const TuneArgs& a) {
  platform::RootedHostFiles files(a.root);
  std::string backup = backup_path(a);
  auto report = tune::reset_from_backup(files, backup);
  if (!report.ok()) fail("reset", report.status());
  for (const std::string& p : report->paths) std::printf("restored %s\n", p.c_str());
  std::printf("reset: restored %d file(s), %d already held their original; removed %s\n", report->restored,
              report->unchanged, backup.c_str());
  std::exit(0);
}

// FERRY_*_BINDINGS, else NCCL's GPUDirect-TCPX variables (DESIGN.md §4).
std::string binding_env(const char* ours, const char* nccl, std::string& source) {
  if (const char* v = std::getenv(ours); v != nullptr) {
    source = ours;
    return v;
  }
  if (const char* v = std::getenv(nccl); v != nullptr) {
    source = nccl;
    return v;
  }
  return "";
}

void run_verify(const TuneArgs& a) {
  tune::VerifyReport report;
  if (!a.plan_file.empty()) {
    tune::TunePlan plan = plan_or_exit("verify", a);
    report = tune::verify_plan(a.root, plan, a.settings);
  } else {
    std::string tx_src = "--tx", rx_src = "--rx";
    std::string tx = a.tx, rx = a.rx;
    if (tx.empty()) tx = binding_env("FERRY_TX_BINDINGS", "NCCL_GPUDIRECTTCPX_TX_BINDINGS", tx_src);
    if (rx.empty()) rx = binding_env("FERRY_RX_BINDINGS", "NCCL_GPUDIRECTTCPX_RX_BINDINGS", rx_src);
    if (tx.empty() && rx.empty()) {
      fail("verify", Status(Code::kInvalidArgument,
                            "nothing to verify: pass --plan FILE, --tx/--rx, or set FERRY_TX_BINDINGS and "
                            "FERRY_RX_BINDINGS (or NCCL_GPUDIRECTTCPX_TX_BINDINGS/RX_BINDINGS)"));
    }
    platform::NicBindings txb, rxb;
    if (!tx.empty()) {
      auto b = platform::parse_bindings(tx, tx_src);
      if (!b.ok()) fail("verify", b.status());
      txb = std::move(b).value();
    }
    if (!rx.empty()) {
      auto b = platform::parse_bindings(rx, rx_src);
      if (!b.ok()) fail("verify", b.status());
      rxb = std::move(b).value();
    }
    auto r = tune::verify_bindings(a.root, txb, rxb);
    if (!r.ok()) fail("verify", r.status());
    report = std::move(r).value();
  }
  std::string out = tune::render_verify_text(report);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::exit(report.failures() == 0 ? 0 : 1);
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* tune = app.add_subcommand("tune", "plan, apply, reset and verify CPU bindings and IRQ affinities");
  tune->require_subcommand(1);

  CLI::App* plan = tune->add_subcommand("plan", "propose TX/RX CPU sets, IRQ affinities and host settings");
  add_root(plan, *args);
  add_policy(plan, *args);
  plan->add_flag("--json", args->json, "print the plan as JSON (input for apply/verify --plan)");
  plan->callback([args] { run_plan(*args); });

  CLI::App* apply = tune->add_subcommand("apply", "write the planned IRQ affinities (and settings), with a backup");
  add_root(apply, *args);
  add_policy(apply, *args);
  apply->add_flag("--dry-run", args->dry_run, "print what would change; write nothing");
  apply->add_flag("--sysctl", args->sysctl, "also change the host settings below recommendation");
  apply->add_option("--backup", args->backup, "backup file (default: <root>/var/lib/ferry/tune-backup.txt)");
  apply->add_option("--plan", args->plan_file, "apply this plan (from `plan --json`) instead of planning afresh");
  apply->callback([args] { run_apply(*args); });

  CLI::App* reset = tune->add_subcommand("reset", "restore every value apply changed, from the backup");
  add_root(reset, *args);
  reset->add_option("--backup", args->backup, "backup file (default: <root>/var/lib/ferry/tune-backup.txt)");
  reset->callback([args] { run_reset(*args); });

  CLI::App* verify = tune->add_subcommand(
      "verify", "compare the host with a plan, or with FERRY_TX_BINDINGS/FERRY_RX_BINDINGS; exit 1 on mismatch");
  add_root(verify, *args);
  verify->add_option("--plan", args->plan_file, "plan file from `ferry tune plan --json`");
  verify->add_flag("--settings", args->settings, "with --plan, also check the host settings");
  verify->add_option("--tx", args->tx, "TX binding string (default: from the environment)");
  verify->add_option("--rx", args->rx, "RX binding string (default: from the environment)");
  verify->callback([args] { run_verify(*args); });
}

}  // namespace ferry::cli
