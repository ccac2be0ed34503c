// How the ferry CLI answers a command line it cannot run: one exit code for
// every usage error (2), the reason on stderr, and the nearest command or
// flag when the one given is a typo ("did you mean 'bench'?").
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ferry::cli {

inline constexpr int kExitUsage = 2;

// Parses argv into `app` (its callbacks run). --help and --version print and
// return 0; a usage error prints the reason and any suggestion and returns
// kExitUsage; otherwise returns -1 (go on).
int parse_command_line(CLI::App& app, int argc, char** argv);

// The candidate nearest to `word` by edit distance, if it is close enough to
// be a typo of it (at most two edits, or a third of its length if more; at
// least one);
// "" otherwise.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace ferry::cli
