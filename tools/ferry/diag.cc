// `ferry diag`: snapshot the host's interrupts, softirqs, CPU time, NUMA
// layout, NIC queues and sysctls, and diff two snapshots. The command-line
// glue only; the logic lives in ops/diag/.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "diag/diff.h"
#include "diag/snapshot.h"
#include "diag/snapshot_json.h"
#include "diag/snapshot_markdown.h"
#include "ferry/commands.h"
#include "platform/host_files.h"

namespace ferry::cli {
namespace {

struct DiagArgs {
  std::string root;
  std::string json_file;
  std::string markdown_file;
  std::string a, b;
};

[[noreturn]] void fail(std::string_view cmd, const Status& s) {
  std::fprintf(stderr, "ferry diag %.*s: %s\n", static_cast<int>(cmd.size()), cmd.data(), s.to_string().c_str());
  std::exit(2);
}

// "-" is standard output.
void emit(std::string_view cmd, const std::string& file, const std::string& text) {
  if (file == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  Status s = platform::write_file_atomically(file, text);
  if (!s.ok()) fail(cmd, s);
  std::fprintf(stderr, "ferry diag %.*s: wrote %s\n", static_cast<int>(cmd.size()), cmd.data(), file.c_str());
}

void run_snapshot(const DiagArgs& a) {
  auto snap = diag::take_snapshot(a.root);
  if (!snap.ok()) fail("snapshot", snap.status());
  if (!a.json_file.empty()) emit("snapshot", a.json_file, diag::snapshot_to_json(*snap));
  if (!a.markdown_file.empty()) emit("snapshot", a.markdown_file, diag::snapshot_to_markdown(*snap));
  if (a.json_file.empty() && a.markdown_file.empty()) emit("snapshot", "-", diag::snapshot_to_markdown(*snap));
  std::exit(0);
}

diag::Snapshot load(const std::string& path) {
  auto text = platform::read_text_file(path);
  if (!text.ok()) fail("diff", text.status());
  auto snap = diag::snapshot_from_json(*text, path);
  if (!snap.ok()) fail("diff", snap.status());
  return std::move(snap).value();
}

void run_diff(const DiagArgs& a) {
  diag::Snapshot sa = load(a.a), sb = load(a.b);
  auto report = diag::diff_snapshots(sa, sb);
  if (!report.ok()) fail("diff", report.status());
  std::string out = diag::render_diff_markdown(*report);
  if (a.markdown_file.empty()) {
    emit("diff", "-", out);
  } else {
    emit("diff", a.markdown_file, out);
  }
  std::exit(0);
}

}  // namespace

void add_diag_command(CLI::App& app) {
  auto args = std::make_shared<DiagArgs>();
  CLI::App* diag = app.add_subcommand("diag", "snapshot and diff interrupts, softirqs, CPU time and NIC layout");
  diag->require_subcommand(1);

  CLI::App* snap = diag->add_subcommand("snapshot", "record the host's network-relevant state");
  snap->add_option("--root", args->root, "read /proc and /sys under this folder; default: this host");
  snap->add_option("--json", args->json_file, "write JSON here (\"-\": standard output); input for `diag diff`");
  snap->add_option("--markdown", args->markdown_file, "write Markdown here (\"-\": standard output)");
  snap->callback([args] { run_snapshot(*args); });

  CLI::App* diff = diag->add_subcommand("diff", "what changed between two JSON snapshots: interrupts, softirqs, busy");
  diff->add_option("A", args->a, "earlier snapshot (JSON)")->required();
  diff->add_option("B", args->b, "later snapshot (JSON)")->required();
  diff->add_option("--markdown", args->markdown_file, "write the report here instead of standard output");
  diff->callback([args] { run_diff(*args); });
}

}  // namespace ferry::cli
