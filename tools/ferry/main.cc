// The ferry command-line tool: one subcommand per file in this folder.
#include <CLI/CLI.hpp>

#include "ferry/commands.h"
#include "ferry/profile_gpu.h"
#include "ferry/usage.h"
#include "ferry/version.h"

int main(int argc, char** argv) {
  // Named here: CLI11 would name it argv[0], and every usage line would show
  // the binary's whole path.
  CLI::App app{"ferry: point-to-point data transfer engine for GPU clusters", "ferry"};
  app.require_subcommand(1);
  // The release, the wire protocol versions, and what this build holds.
  app.set_version_flag("--version", [] {
    return ferry::describe(ferry::build_info()) + "profile GPU backends: " +
           (ferry::cli::profile_gpu::built_with_cuda() ? "yes (ce, nccl, ferry)"
                                                       : "no (built without a CUDA compiler)");
  });
  ferry::cli::add_bench_command(app);
  ferry::cli::add_config_command(app);
  ferry::cli::add_tune_command(app);
  ferry::cli::add_diag_command(app);
  ferry::cli::add_profile_command(app);
  ferry::cli::add_dir_command(app);
  ferry::cli::add_top_command(app);
  int rc = ferry::cli::parse_command_line(app, argc, argv);
  return rc >= 0 ? rc : 0;
}
