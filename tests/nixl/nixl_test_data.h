// What the NIXL plugin's tests share: hex for passing bytes through a
// peer's command line, and scattered descriptor pairs at odd offsets.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace ferry::test {

inline std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

inline std::string unhex(const std::string& text) {
  std::string out;
  for (size_t i = 0; i + 1 < text.size(); i += 2) out.push_back(static_cast<char>(std::stoi(text.substr(i, 2), nullptr, 16)));
  return out;
}

// One descriptor pair: bytes at offset `local` of the initiator's buffer
// and at offset `remote` of the target's.
struct Range {
  size_t local = 0;
  size_t remote = 0;
  size_t size = 0;
};

// `count` ranges of 1..max_size bytes, at odd offsets with gaps between
// them on both sides, all inside `limit` bytes.
inline std::vector<Range> scattered(size_t count, size_t max_size, uint32_t seed, size_t limit) {
  std::mt19937_64 rng(seed);
  std::vector<Range> out;
  size_t local = 1 + rng() % 61, remote = 3 + rng() % 97;
  for (size_t i = 0; i < count; ++i) {
    const size_t size = 1 + rng() % max_size;
    out.push_back({local, remote, size});
    local += size + 1 + rng() % 29;
    remote += size + 1 + rng() % 31;
  }
  EXPECT_LE(std::max(local, remote), limit);
  return out;
}

}  // namespace ferry::test
