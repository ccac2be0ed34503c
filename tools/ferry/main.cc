// The ferry command-line tool: one subcommand per file in this folder.
#include <CLI/CLI.hpp>

#include "ferry/commands.h"
#include "ferry/usage.h"

#ifndef FERRY_VERSION
#define FERRY_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  // Named here: CLI11 would name it argv[0], and every usage line would show
  // the binary's whole path.
  CLI::App app{"ferry: point-to-point data transfer engine for GPU clusters", "ferry"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ferry " FERRY_VERSION);
  ferry::cli::add_bench_command(app);
  ferry::cli::add_config_command(app);
  ferry::cli::add_tune_command(app);
  ferry::cli::add_diag_command(app);
  ferry::cli::add_profile_command(app);
  ferry::cli::add_dir_command(app);
  int rc = ferry::cli::parse_command_line(app, argc, argv);
  return rc >= 0 ? rc : 0;
}
