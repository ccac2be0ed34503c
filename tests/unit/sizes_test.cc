// ferry bench size parsing: parse_bytes, parse_sizes (lists and ranges), format_bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ferry/bench_sizes.h"

namespace ferry::cli {
namespace {

constexpr uint64_t K = 1ull << 10, M = 1ull << 20, G = 1ull << 30;

uint64_t bytes(std::string_view s) {
  auto r = parse_bytes(s);
  EXPECT_TRUE(r.ok()) << s << ": " << r.status().to_string();
  return r.ok() ? r.value() : ~0ull;
}

std::vector<uint64_t> sizes(std::string_view s) {
  auto r = parse_sizes(s);
  EXPECT_TRUE(r.ok()) << s << ": " << r.status().to_string();
  return r.ok() ? r.value() : std::vector<uint64_t>{};
}

void expect_bad_bytes(std::string_view s) {
  auto r = parse_bytes(s);
  ASSERT_FALSE(r.ok()) << "\"" << s << "\" parsed as " << r.value();
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

void expect_bad_sizes(std::string_view s) {
  auto r = parse_sizes(s);
  ASSERT_FALSE(r.ok()) << "\"" << s << "\" parsed (" << r->size() << " sizes)";
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

TEST(ParseBytes, NumbersAndUnits) {
  EXPECT_EQ(bytes("0"), 0u);
  EXPECT_EQ(bytes("4096"), 4096u);
  EXPECT_EQ(bytes("64K"), 64 * K);
  EXPECT_EQ(bytes("64k"), 64 * K);
  EXPECT_EQ(bytes("3KiB"), 3 * K);
  EXPECT_EQ(bytes("1M"), M);
  EXPECT_EQ(bytes("5MiB"), 5 * M);
  EXPECT_EQ(bytes("2G"), 2 * G);
  EXPECT_EQ(bytes("7B"), 7u);
  EXPECT_EQ(bytes("17179869183G"), 17179869183ull * G);  // largest whole G that fits
}

// Every usual spelling of a unit, all 1024-based (issue 59: "1m" and "1KB"
// were refused while "1k" and "1KiB" were taken).
TEST(ParseBytes, EveryUnitInEverySpelling) {
  constexpr uint64_t T = 1ull << 40;
  for (const char* u : {"k", "K", "KB", "kB", "kb", "KiB", "kib"}) EXPECT_EQ(bytes(std::string("3") + u), 3 * K) << u;
  for (const char* u : {"m", "M", "MB", "mb", "MiB"}) EXPECT_EQ(bytes(std::string("3") + u), 3 * M) << u;
  for (const char* u : {"g", "G", "GB", "GiB"}) EXPECT_EQ(bytes(std::string("3") + u), 3 * G) << u;
  for (const char* u : {"t", "T", "TB", "TiB"}) EXPECT_EQ(bytes(std::string("3") + u), 3 * T) << u;
  EXPECT_EQ(bytes("7b"), 7u);
  EXPECT_EQ(bytes("16777215T"), 16777215ull * T);  // largest whole T that fits
  expect_bad_bytes("16777216T");                   // 2^64 bytes
  expect_bad_bytes("1KBB");
  expect_bad_bytes("1iB");
  expect_bad_bytes("1Ki");
  expect_bad_bytes("1P");
  auto r = parse_bytes("1Q");
  EXPECT_NE(r.status().message().find("1024"), std::string::npos) << r.status().message();
}

TEST(ParseBytes, Errors) {
  expect_bad_bytes("12Q");
  expect_bad_bytes("");
  expect_bad_bytes("K");
  expect_bad_bytes("-1");
  expect_bad_bytes("1.5M");
  expect_bad_bytes("1 M");
  expect_bad_bytes("1MM");
  expect_bad_bytes("17179869184G");             // 2^64 bytes
  expect_bad_bytes("99999999999999999999999");  // beyond uint64
  auto r = parse_bytes("12Q");
  EXPECT_NE(r.status().message().find("12Q"), std::string::npos);
}

TEST(ParseSizes, GeometricRange) {
  std::vector<uint64_t> want;
  for (uint64_t v = K; v <= 256 * M; v *= 4) want.push_back(v);
  ASSERT_EQ(want.size(), 10u);
  EXPECT_EQ(sizes("1K:256M:x4"), want);
  // The end is included only when it is hit.
  EXPECT_EQ(sizes("1K:5K:x2"), (std::vector<uint64_t>{K, 2 * K, 4 * K}));
  EXPECT_EQ(sizes("1K:1K:x2"), (std::vector<uint64_t>{K}));
}

TEST(ParseSizes, GeometricRangeUpToTheLargestValueDoesNotOverflow) {
  auto v = sizes("1:18446744073709551615:x2");
  ASSERT_EQ(v.size(), 64u);
  EXPECT_EQ(v.front(), 1u);
  EXPECT_EQ(v.back(), 1ull << 63);
}

TEST(ParseSizes, ArithmeticRange) {
  std::vector<uint64_t> want;
  for (uint64_t v = K; v <= 8 * K; v += K) want.push_back(v);
  EXPECT_EQ(sizes("1K:8K:+1K"), want);
  EXPECT_EQ(sizes("0:10:+4"), (std::vector<uint64_t>{0, 4, 8}));
}

TEST(ParseSizes, ArithmeticRangeNearTheLargestValueDoesNotWrap) {
  EXPECT_EQ(sizes("18446744073709551610:18446744073709551615:+4"),
            (std::vector<uint64_t>{18446744073709551610ull, 18446744073709551614ull}));
}

TEST(ParseSizes, ListsKeepTheirOrder) {
  EXPECT_EQ(sizes("4K,1M,64M"), (std::vector<uint64_t>{4 * K, M, 64 * M}));
  EXPECT_EQ(sizes("64M,4K"), (std::vector<uint64_t>{64 * M, 4 * K}));
  EXPECT_EQ(sizes("1,1K:4K:x2,7"), (std::vector<uint64_t>{1, K, 2 * K, 4 * K, 7}));
  EXPECT_EQ(sizes("4096"), (std::vector<uint64_t>{4096}));
}

TEST(ParseSizes, Errors) {
  expect_bad_sizes("");
  expect_bad_sizes("8K:1K:x2");  // backwards
  expect_bad_sizes("1K:8K:x1");  // factor below 2
  expect_bad_sizes("1K:8K:x0");
  expect_bad_sizes("0:8K:x2");   // geometric from 0
  expect_bad_sizes("1K:8K:+0");  // no progress
  expect_bad_sizes("1K:8K:*2");  // unknown step
  expect_bad_sizes("1K:8K:x");   // missing factor
  expect_bad_sizes("1K:8K");     // two parts
  expect_bad_sizes("1K:2K:4K:x2");
  expect_bad_sizes("1K,,2K");  // empty item
  expect_bad_sizes("1K,12Q");
  expect_bad_sizes("0:1G:+1");  // too many sizes
  auto r = parse_sizes("8K:1K:x2");
  EXPECT_NE(r.status().message().find("backwards"), std::string::npos) << r.status().message();
}

TEST(FormatBytes, UsesTheLargestExactUnit) {
  EXPECT_EQ(format_bytes(0), "0");
  EXPECT_EQ(format_bytes(1), "1");
  EXPECT_EQ(format_bytes(1023), "1023");
  EXPECT_EQ(format_bytes(1024), "1K");
  EXPECT_EQ(format_bytes(1536), "1536");
  EXPECT_EQ(format_bytes(65536), "64K");
  EXPECT_EQ(format_bytes(1048579), "1048579");
  EXPECT_EQ(format_bytes(M), "1M");
  EXPECT_EQ(format_bytes(M + K), "1025K");
  EXPECT_EQ(format_bytes(3 * G), "3G");
  EXPECT_EQ(format_bytes(G + M), "1025M");
}

TEST(FormatBytes, RoundTripsThroughParseBytes) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 5000; ++i) {
    uint64_t n = rng() >> (rng() % 64);
    if (i % 3 == 0) n &= ~(K - 1);  // exercise the unit paths too
    ASSERT_EQ(bytes(format_bytes(n)), n) << format_bytes(n);
  }
}

TEST(RotatingOffset, TakesPageAlignedSlotsInTurnAndStaysInside) {
  // 1 MiB + 1 in 8 MiB: slots of 1 MiB + 4 KiB, seven of them.
  const uint64_t size = M + 1, stride = M + 4 * K, span = 8 * M;
  for (uint64_t i = 0; i < 20; ++i) {
    uint64_t at = rotating_offset(i, size, span);
    EXPECT_EQ(at, (i % 7) * stride) << "operation " << i;
    EXPECT_EQ(at % 4096, 0u);
    EXPECT_LE(at + size, span) << "operation " << i << " runs past the buffer";
    if (i > 0 && i % 7 != 0) {
      EXPECT_NE(at, rotating_offset(i - 1, size, span)) << "consecutive operations share memory";
    }
  }
  EXPECT_EQ(rotating_offset(5, 100, 4096), 0u);     // one slot: always the start
  EXPECT_EQ(rotating_offset(3, 8 * M, 8 * M), 0u);  // the size is the span
  EXPECT_EQ(rotating_offset(2, 0, 16 * K), 8 * K);  // empty operations still take a page each
  std::mt19937_64 rng(9);
  for (int k = 0; k < 2000; ++k) {
    uint64_t n = rng() % (64 * M) + 1, sp = n + rng() % (G);
    uint64_t i = rng() % 100000;
    ASSERT_LE(rotating_offset(i, n, sp) + n, sp) << "size " << n << " span " << sp << " operation " << i;
  }
}

}  // namespace
}  // namespace ferry::cli
