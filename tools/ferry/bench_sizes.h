// Parsing of size lists for `ferry bench --sizes` and byte counts for flags:
// "4096", "64K", "1M,4M", "1K:256M:x4" (geometric), "1K:8K:+1K" (arithmetic);
// and where `--footprint` puts each operation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry::cli {

// "64K" -> 65536. Units K, M, G, T in either case, alone or as KB or KiB, are
// all 1024-based (core/units.h); a bare number is bytes.
Result<uint64_t> parse_bytes(std::string_view text);
// A comma-separated list of sizes and ranges, in the order given.
Result<std::vector<uint64_t>> parse_sizes(std::string_view text);
// 65536 -> "64K", 1048579 -> "1048579".
std::string format_bytes(uint64_t n);
// Where operation `i` of `size` bytes starts in a buffer of `span` bytes
// whose operations take turns through it: page-aligned slots of `size`
// rounded up to a page, in order, starting over after the last one that
// fits (0 when only one fits). REQUIRES: size <= span.
uint64_t rotating_offset(uint64_t i, uint64_t size, uint64_t span);

}  // namespace ferry::cli
