// The bytes every soak transfer carries, generated from a seed so that the
// receiver can check them without the data travelling twice.
//
// Byte k of stream `seed` is byte k % 8 of word(seed, k / 8), so any slice of
// a stream can be generated or checked on its own: a read at an odd offset of
// a region filled from one seed is checked against that slice of the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ferry::soak {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t pattern_word(uint64_t seed, uint64_t word) { return mix64(seed ^ mix64(word)); }

inline uint8_t pattern_byte(uint64_t seed, uint64_t k) {
  return static_cast<uint8_t>(pattern_word(seed, k / 8) >> (8 * (k % 8)));
}

// Writes bytes [start, start + n) of stream `seed` to `dst`.
inline void pattern_fill(uint8_t* dst, size_t n, uint64_t seed, uint64_t start) {
  size_t i = 0;
  for (; i < n && (start + i) % 8 != 0; ++i) dst[i] = pattern_byte(seed, start + i);
  for (; i + 8 <= n; i += 8) {
    uint64_t w = pattern_word(seed, (start + i) / 8);
    std::memcpy(dst + i, &w, 8);
  }
  for (; i < n; ++i) dst[i] = pattern_byte(seed, start + i);
}

inline constexpr size_t kNoMismatch = ~size_t{0};

// The index of the first byte of [p, p + n) that differs from bytes
// [start, start + n) of stream `seed`, or kNoMismatch.
inline size_t pattern_check(const uint8_t* p, size_t n, uint64_t seed, uint64_t start) {
  size_t i = 0;
  for (; i < n && (start + i) % 8 != 0; ++i) {
    if (p[i] != pattern_byte(seed, start + i)) return i;
  }
  for (; i + 8 <= n; i += 8) {
    uint64_t w = pattern_word(seed, (start + i) / 8), got;
    std::memcpy(&got, p + i, 8);
    if (got != w) break;
  }
  for (; i < n; ++i) {
    if (p[i] != pattern_byte(seed, start + i)) return i;
  }
  return kNoMismatch;
}

}  // namespace ferry::soak
