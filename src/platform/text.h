// Small text helpers for the files of /proc and /sys: splitting a line into
// words and reading unsigned numbers. Shared by topology, IRQ discovery,
// diagnostics and tuning.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace ferry::platform {

// The lines of `text`, without their '\n'; a final newline ends the last
// line rather than starting an empty one. Line k (from 1) is element k-1.
std::vector<std::string_view> split_lines(std::string_view text);

// The words of `s`, split on blanks (spaces, tabs, newlines, carriage returns).
std::vector<std::string_view> split_words(std::string_view s);

// True, with `v` set, when all of `s` is a decimal unsigned number.
bool parse_u64(std::string_view s, uint64_t& v);

}  // namespace ferry::platform
