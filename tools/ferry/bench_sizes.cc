// Size-list parsing for ferry bench.
#include "ferry/bench_sizes.h"

#include <algorithm>

#include "core/units.h"

namespace ferry::cli {
namespace {

Status bad(std::string_view text, std::string_view why) {
  return Status(Code::kInvalidArgument, "size \"" + std::string(text) + "\": " + std::string(why));
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) return out;
    start = p + 1;
  }
}

}  // namespace

Result<uint64_t> parse_bytes(std::string_view text) {
  auto r = core::parse_bytes(text);
  if (!r.ok()) return bad(text, r.status().message());
  return r;
}

Result<std::vector<uint64_t>> parse_sizes(std::string_view text) {
  std::vector<uint64_t> out;
  if (text.empty()) return bad(text, "empty list");
  for (std::string_view item : split(text, ',')) {
    std::vector<std::string_view> parts = split(item, ':');
    if (parts.size() == 1) {
      FERRY_ASSIGN_OR_RETURN(uint64_t n, parse_bytes(parts[0]));
      out.push_back(n);
      continue;
    }
    if (parts.size() != 3) return bad(item, "a range is FROM:TO:xFACTOR or FROM:TO:+STEP");
    FERRY_ASSIGN_OR_RETURN(uint64_t from, parse_bytes(parts[0]));
    FERRY_ASSIGN_OR_RETURN(uint64_t to, parse_bytes(parts[1]));
    if (from > to) return bad(item, "range goes backwards");
    std::string_view step = parts[2];
    if (step.size() < 2 || (step[0] != 'x' && step[0] != '+')) return bad(item, "step must be xFACTOR or +STEP");
    FERRY_ASSIGN_OR_RETURN(uint64_t k, parse_bytes(step.substr(1)));
    if (step[0] == 'x') {
      if (k < 2) return bad(item, "factor must be at least 2");
      if (from == 0) return bad(item, "a geometric range cannot start at 0");
      for (uint64_t v = from; v <= to; v *= k) {
        out.push_back(v);
        if (v > to / k) break;
      }
    } else {
      if (k == 0) return bad(item, "step must be positive");
      for (uint64_t v = from; v <= to; v += k) {
        out.push_back(v);
        if (out.size() > 100000) return bad(item, "more than 100000 sizes");
        if (v > to - k) break;  // the next step would pass `to` (or wrap)
      }
    }
  }
  return out;
}

std::string format_bytes(uint64_t n) {
  if (n >= (1ull << 30) && n % (1ull << 30) == 0) return std::to_string(n >> 30) + "G";
  if (n >= (1ull << 20) && n % (1ull << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n >= (1ull << 10) && n % (1ull << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

uint64_t rotating_offset(uint64_t i, uint64_t size, uint64_t span) {
  uint64_t stride = (std::max<uint64_t>(size, 1) + 4095) / 4096 * 4096;
  uint64_t slots = std::max<uint64_t>(span / stride, 1);
  return i % slots * stride;
}

}  // namespace ferry::cli
