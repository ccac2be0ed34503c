// Byte counts as people write them: "4096", "64K", "1M", "2G" (binary units).
// Shared by the FERRY_* variables and the CLI's flags.
#pragma once

#include <cstdint>
#include <string_view>

#include "ferry/status.h"

namespace ferry::core {

// kInvalidArgument (saying what is wrong, without naming the source) for a
// missing number, an unknown unit or a value past 2^64.
Result<uint64_t> parse_bytes(std::string_view text);

}  // namespace ferry::core
