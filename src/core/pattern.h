// Reproducible test data and a fast checksum, shared by `ferry bench
// --verify` and the tests: both sides of a transfer generate the same bytes
// from a seed and compare checksums instead of shipping the data back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>

namespace ferry::core {

// Fills [p, p+n) with bytes determined by `seed` alone.
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

// FNV-1a over 8-byte words (then the tail bytes): fast enough to check 64 MiB
// well within the time it took to move.
inline uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace ferry::core
