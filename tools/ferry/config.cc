// `ferry config`: prints every tunable with its variable, default, value in
// force (after FERRY_* variables), where that value came from, unit and
// meaning; --json for scripts. FERRY_* variables that ferry does not read
// (typos) are named on stderr, with the nearest real one.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "ferry/commands.h"
#include "ferry/options.h"
#include "ferry/usage.h"

namespace ferry::cli {
namespace {

// "environment" when the tunable's variable is set, "default" otherwise (the
// CLI sets nothing in code).
std::string source_of(const TunableInfo& t) {
  return std::getenv(t.env.c_str()) != nullptr ? "environment" : "default";
}

int run_config(bool as_json) {
  auto opts = apply_environment(Options{});
  if (!opts.ok()) {
    std::fprintf(stderr, "ferry config: %s\n", opts.status().to_string().c_str());
    return 2;
  }
  std::vector<TunableInfo> all = describe_tunables(opts.value());
  std::vector<std::string> names;
  for (const TunableInfo& t : all) names.push_back(t.env);
  for (const std::string& unknown : unknown_environment()) {
    std::string near = nearest(unknown, names);
    std::fprintf(stderr, "ferry config: warning: %s is set but is no ferry variable%s\n", unknown.c_str(),
                 near.empty() ? "" : ("; did you mean " + near + "?").c_str());
  }
  if (as_json) {
    nlohmann::json out = nlohmann::json::array();
    for (const TunableInfo& t : all) {
      out.push_back({{"name", t.name},
                     {"variable", t.env},
                     {"default", t.default_value},
                     {"value", t.value},
                     {"source", source_of(t)},
                     {"unit", t.unit},
                     {"meaning", t.doc}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-20s %-28s %-12s %-12s %-11s %-6s %s\n", "name", "variable", "default", "value", "source", "unit",
              "meaning");
  for (const TunableInfo& t : all) {
    std::printf("%-20s %-28s %-12s %-12s %-11s %-6s %s\n", t.name.c_str(), t.env.c_str(), t.default_value.c_str(),
                t.value.c_str(), source_of(t).c_str(), t.unit.c_str(), t.doc.c_str());
  }
  return 0;
}

}  // namespace

void add_config_command(CLI::App& app) {
  CLI::App* c = app.add_subcommand("config", "print the tunables, their values in force and where each came from");
  auto as_json = std::make_shared<bool>(false);
  c->add_flag("--json", *as_json, "print them as a JSON array (name, variable, default, value, source, unit, meaning)");
  c->callback([as_json] { std::exit(run_config(*as_json)); });
}

}  // namespace ferry::cli
