// Parsing of byte counts.
#include "core/units.h"

#include <charconv>
#include <string>

namespace ferry::core {
namespace {

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// The multiplier `unit` stands for, 0 for none. Case does not matter: "1m",
// "1MB" and "1MiB" are one mebibyte each (people write all three meaning
// it, and a byte count is never in bits).
uint64_t multiplier(std::string_view unit) {
  std::string u;
  for (char c : unit) u += lower(c);
  if (u.empty() || u == "b") return 1;
  static constexpr std::string_view kPrefixes = "kmgt";
  size_t power = kPrefixes.find(u[0]);
  if (power == std::string_view::npos) return 0;
  std::string_view rest = std::string_view(u).substr(1);
  if (!rest.empty() && rest != "b" && rest != "ib") return 0;
  return uint64_t{1} << (10 * (power + 1));
}

}  // namespace

Result<uint64_t> parse_bytes(std::string_view text) {
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p == text.data()) return Status(Code::kInvalidArgument, "expected a number");
  std::string_view unit(p, static_cast<size_t>(text.data() + text.size() - p));
  uint64_t mult = multiplier(unit);
  if (mult == 0) {
    return Status(Code::kInvalidArgument, "unknown unit \"" + std::string(unit) +
                                              "\" (use K, M, G or T, alone or as KB or KiB: all are 1024-based)");
  }
  if (n > UINT64_MAX / mult) return Status(Code::kInvalidArgument, "too large");
  return n * mult;
}

}  // namespace ferry::core
