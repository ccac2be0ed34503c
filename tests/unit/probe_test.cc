// Connection::probe: the size of the next message no receive took, without
// taking it, on both transports; its deadline, and the connection's end.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

class Probe : public ::testing::TestWithParam<const char*> {};

TEST_P(Probe, GivesEachSizeWithoutTakingTheMessage) {
  EnginePair p = connect_pair(GetParam());
  ASSERT_TRUE(p.ca && p.cb);
  const std::vector<size_t> sizes = {1, 4099, (3u << 20) + 5};
  std::vector<uint8_t> src((4u << 20)), dst(4u << 20);
  std::mt19937_64 rng(17);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
  ASSERT_TRUE(p.b->reg(dst.data(), dst.size()).ok());
  EXPECT_EQ(p.cb->probe(after(50ms)).status().code(), Code::kDeadlineExceeded);
  std::vector<Transfer> sends;
  size_t at = 0;
  for (size_t n : sizes) {
    sends.push_back(p.ca->send_async(src.data() + at, n));
    at += n;
  }
  at = 0;
  for (size_t n : sizes) {
    auto size = p.cb->probe(after(10s));
    ASSERT_TRUE(size.ok()) << size.status().to_string();
    EXPECT_EQ(*size, n);
    EXPECT_EQ(p.cb->probe(after(1s)).value(), n) << "a probe takes nothing";
    auto got = p.cb->recv(dst.data() + 3, *size, after(10s));  // a buffer of exactly that size
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, n);
    EXPECT_EQ(std::memcmp(dst.data() + 3, src.data() + at, n), 0);
    at += n;
  }
  for (auto& s : sends) EXPECT_TRUE(s.wait(after(10s)).ok());
  // A receive posted first takes the message: nothing for a probe.
  Transfer r = p.cb->recv_async(dst.data(), dst.size());
  ASSERT_TRUE(p.ca->send(src.data(), 77, after(10s)).ok());
  EXPECT_TRUE(r.wait(after(10s)).ok());
  EXPECT_EQ(p.cb->probe(after(50ms)).status().code(), Code::kDeadlineExceeded);
  // The connection's end ends a probe with its reason.
  p.ca->close();
  auto ended = p.cb->probe(after(10s));
  EXPECT_FALSE(ended.ok());
  EXPECT_NE(ended.status().code(), Code::kDeadlineExceeded) << ended.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Transports, Probe, ::testing::Values("tcp", "local"));

}  // namespace
}  // namespace ferry
