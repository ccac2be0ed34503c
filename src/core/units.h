// Byte counts as people write them: "4096", "64K", "1m", "2GB", "1TiB".
// Units K, M, G, T in either case, alone or followed by B or iB, are all
// powers of 1024 (1K = 1KB = 1KiB = 1024 bytes): ferry's sizes are buffer and
// chunk sizes, which are counted in pages. Shared by the FERRY_* variables
// and the CLI's flags.
#pragma once

#include <cstdint>
#include <string_view>

#include "ferry/status.h"

namespace ferry::core {

// kInvalidArgument (saying what is wrong, without naming the source) for a
// missing number, an unknown unit or a value past 2^64.
Result<uint64_t> parse_bytes(std::string_view text);

}  // namespace ferry::core
