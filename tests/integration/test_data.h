// Random test data and checksums shared by the integration tests and their
// peer process, so both sides can generate and check the same bytes.
#pragma once

#include <cstdint>

#include "core/pattern.h"

namespace ferry::test {

// The largest message the echo peer accepts (64 MiB plus room for offsets).
inline constexpr uint64_t kMaxMessage = (64ull << 20) + 4096;

using core::fill_random;
using core::fnv1a;

}  // namespace ferry::test
