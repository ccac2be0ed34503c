// Reproducible random bytes for tests, written once: one byte per draw of a
// std::mt19937_64, from a seed or from a generator the test goes on drawing
// from, into memory, a byte array, a std::string or a std::vector. The tests
// that used to carry their own copy kept different bits of each draw;
// `shift` says which, so each keeps the bytes (and the checks) it had.
//
// (core::fill_random, eight bytes a draw, is what `ferry bench --verify` and
// the integration tests' peer generate on both sides of a transfer; it stays
// in the library.)
//
// Example:
//   std::mt19937_64 rng(7);
//   std::string aux = testing::random_bytes<std::string>(rng() % 300, rng);
//   std::vector<uint8_t> host = testing::random_bytes(1001, /*seed=*/1);
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace ferry::testing {

// Fills `n` bytes at `p`, one draw of `rng` each: bits [shift, shift + 8) of
// the draw (REQUIRES: shift <= 56).
inline void fill_random_bytes(void* p, size_t n, std::mt19937_64& rng, unsigned shift = 0) {
  auto* bytes = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(rng() >> shift);
}

// The same from a generator seeded with `seed` alone.
inline void fill_random_bytes(void* p, size_t n, uint64_t seed, unsigned shift = 0) {
  std::mt19937_64 rng(seed);
  fill_random_bytes(p, n, rng, shift);
}

// Every byte of `bytes` (a container of one-byte elements with data() and
// size(): std::array<uint8_t, N>, std::string, std::vector<uint8_t>).
template <typename Bytes>
void fill_random_bytes(Bytes& bytes, std::mt19937_64& rng, unsigned shift = 0) {
  static_assert(sizeof(*bytes.data()) == 1, "one-byte elements");
  fill_random_bytes(bytes.data(), bytes.size(), rng, shift);
}

// `n` bytes in a new Bytes (std::vector<uint8_t> unless said otherwise),
// drawn from `rng`.
template <typename Bytes = std::vector<uint8_t>>
Bytes random_bytes(size_t n, std::mt19937_64& rng, unsigned shift = 0) {
  Bytes bytes(n, 0);
  fill_random_bytes(bytes, rng, shift);
  return bytes;
}

// `n` bytes from a generator seeded with `seed` alone.
template <typename Bytes = std::vector<uint8_t>>
Bytes random_bytes(size_t n, uint64_t seed, unsigned shift = 0) {
  std::mt19937_64 rng(seed);
  return random_bytes<Bytes>(n, rng, shift);
}

}  // namespace ferry::testing
