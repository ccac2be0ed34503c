// `ferry config`: prints every tunable with its variable, default, value in
// force (after FERRY_* variables), unit and meaning.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "ferry/commands.h"
#include "ferry/options.h"

namespace ferry::cli {

void add_config_command(CLI::App& app) {
  CLI::App* c = app.add_subcommand("config", "print the tunables and their values in force");
  c->callback([] {
    auto opts = apply_environment(Options{});
    if (!opts.ok()) {
      std::fprintf(stderr, "ferry config: %s\n", opts.status().to_string().c_str());
      std::exit(2);
    }
    std::printf("%-20s %-28s %-12s %-12s %-6s %s\n", "name", "variable", "default", "value", "unit", "meaning");
    for (const TunableInfo& t : describe_tunables(opts.value())) {
      std::printf("%-20s %-28s %-12s %-12s %-6s %s\n", t.name.c_str(), t.env.c_str(), t.default_value.c_str(),
                  t.value.c_str(), t.unit.c_str(), t.doc.c_str());
    }
    std::exit(0);
  });
}

}  // namespace ferry::cli
