// Random test data and checksums shared by the integration tests and their
// peer process, so both sides can generate and check the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>

namespace ferry::test {

// The largest message the echo peer accepts (64 MiB plus room for offsets).
inline constexpr uint64_t kMaxMessage = (64ull << 20) + 4096;

inline void fill_random(uint8_t* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = rng();
    std::memcpy(p + i, &w, 8);
  }
  uint64_t w = rng();
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(w >> (8 * (i % 8)));
}

inline uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace ferry::test
