// Usage errors of the ferry CLI: exit code 2 and "did you mean".
#include "ferry/usage.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

namespace ferry::cli {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

// The deepest subcommand the command line chose (the one whose flags apply).
const CLI::App* chosen(const CLI::App& app) {
  const CLI::App* at = &app;
  for (;;) {
    std::vector<CLI::App*> parsed = const_cast<CLI::App*>(at)->get_subcommands();
    if (parsed.empty()) return at;
    at = parsed.front();
  }
}

// "ferry dir ls": the command as typed, from the program down to `app`.
std::string command_path(const CLI::App& app) {
  std::string path;
  for (const CLI::App* at = &app; at != nullptr; at = at->get_parent()) {
    path = at->get_name() + (path.empty() ? "" : " " + path);
  }
  return path;
}

// CLI11's words for an error, in plainer ones where they are obscure: a flag
// given twice is "--iters: At Most 1 required but received 2".
std::string plain_words(const CLI::ParseError& e) {
  std::string what = e.what();
  static const std::string kAtMost = ": At Most 1 required but received ";
  size_t at = what.find(kAtMost);
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr && at != std::string::npos) {
    return what.substr(0, at) + " was given " + what.substr(at + kAtMost.size()) + " times; give it once";
  }
  return what;
}

std::vector<std::string> long_flags(const CLI::App& app) {
  std::vector<std::string> flags;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) flags.push_back("--" + l);
  }
  return flags;
}

}  // namespace

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;  // a transposition costs 2
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d >= 1 && d < best_d) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

int parse_command_line(CLI::App& app, int argc, char** argv) {
  // A first word that names no command: say so, with the nearest one.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names = subcommand_names(app);
    std::string word = argv[1];
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      std::string near = nearest(word, names);
      std::fprintf(stderr, "ferry: '%s' is not a ferry command%s\nRun 'ferry --help' for the commands.\n", word.c_str(),
                   near.empty() ? "" : ("; did you mean '" + near + "'?").c_str());
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const CLI::App* where = chosen(app);
    std::string command = command_path(*where);
    std::fprintf(stderr, "%s: %s\n", command.c_str(), plain_words(e).c_str());
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      std::vector<std::string> flags = long_flags(*where);
      for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::string flag = arg.substr(0, arg.find('='));
        if (flag.rfind("--", 0) != 0 || std::find(flags.begin(), flags.end(), flag) != flags.end()) continue;
        std::string near = nearest(flag, flags);
        if (!near.empty()) std::fprintf(stderr, "  %s: did you mean %s?\n", flag.c_str(), near.c_str());
      }
    }
    std::fprintf(stderr, "Run '%s --help' for its flags.\n", command.c_str());
    return kExitUsage;
  }
  return -1;
}

}  // namespace ferry::cli
