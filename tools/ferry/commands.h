// The subcommands of the ferry CLI, one file each.
#pragma once

namespace CLI {
class App;
}

namespace ferry::cli {

void add_bench_command(CLI::App& app);
void add_config_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_diag_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_dir_command(CLI::App& app);
void add_top_command(CLI::App& app);

}  // namespace ferry::cli
