// Parsing of byte counts.
#include "core/units.h"

#include <charconv>
#include <string>

namespace ferry::core {

Result<uint64_t> parse_bytes(std::string_view text) {
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p == text.data()) return Status(Code::kInvalidArgument, "expected a number");
  std::string_view unit(p, static_cast<size_t>(text.data() + text.size() - p));
  uint64_t mult = 1;
  if (unit == "K" || unit == "k" || unit == "KiB")
    mult = 1ull << 10;
  else if (unit == "M" || unit == "MiB")
    mult = 1ull << 20;
  else if (unit == "G" || unit == "GiB")
    mult = 1ull << 30;
  else if (!unit.empty() && unit != "B") {
    return Status(Code::kInvalidArgument, "unknown unit \"" + std::string(unit) + "\" (use K, M or G)");
  }
  if (n > UINT64_MAX / mult) return Status(Code::kInvalidArgument, "too large");
  return n * mult;
}

}  // namespace ferry::core
