// The ferry command-line tool: one subcommand per file in this folder.
#include <CLI/CLI.hpp>

#include "ferry/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry: point-to-point data transfer engine for GPU clusters"};
  app.require_subcommand(1);
  ferry::cli::add_bench_command(app);
  ferry::cli::add_config_command(app);
  ferry::cli::add_tune_command(app);
  ferry::cli::add_diag_command(app);
  ferry::cli::add_profile_command(app);
  ferry::cli::add_dir_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
