// Feeds arbitrary text to the size parsers of `ferry bench`: --sizes lists
// ("4K,1M:64M:x2,1K:8K:+1K") and byte counts for its other flags. They come
// from a user's command line and from scripts that build it. A list that
// parses must be bounded (a range never yields more than its own limit),
// each range must stay inside its ends, and every byte count must survive
// format_bytes and parse_bytes unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ferry/bench_sizes.h"

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::cli;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto n = parse_bytes(text); n.ok()) {
    auto again = parse_bytes(format_bytes(*n));
    require(again.ok() && *again == *n);
  }
  if (auto sizes = parse_sizes(text); sizes.ok()) {
    require(!sizes->empty());
    // Each item adds at most 100000 sizes (arithmetic) or 64 (geometric).
    size_t items = 1;
    for (char c : text) items += c == ',';
    require(sizes->size() <= items * 100001);
    for (uint64_t s : *sizes) {
      auto again = parse_bytes(format_bytes(s));
      require(again.ok() && *again == s);
      uint64_t span = s + 1 + (s >> 1);
      if (span > s) require(rotating_offset(s, s, span) + s <= span);
    }
  }
  return 0;
}
