// The blocking wrappers' deadlines, over both transports between two engines
// of this process: a receive whose deadline passes while its message is
// already landing returns that message, never an error with the bytes still
// arriving and the message lost to the next receive.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

class BlockingCalls : public ::testing::TestWithParam<const char*> {};

TEST_P(BlockingCalls, AReceiveMatchedBeforeItsDeadlineReturnsItsMessage) {
  EnginePair p = connect_pair(GetParam());
  ASSERT_TRUE(p.ca && p.cb);
  const size_t big = (size_t{256} << 20) + 13;
  std::vector<uint8_t> src(big), dst(big + 3, 0);
  std::mt19937_64 rng(5);
  for (size_t i = 0; i < big; i += 4096) src[i] = static_cast<uint8_t>(rng() | 1);
  src[big - 1] = 0xab;
  uint8_t small[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
  ASSERT_TRUE(p.a->reg(small, sizeof small).ok());
  ASSERT_TRUE(p.b->reg(dst.data(), dst.size()).ok());
  Transfer s1 = p.ca->send_async(src.data(), big);
  std::this_thread::sleep_for(100ms);  // the message is announced: the receive matches at once
  auto r1 = p.cb->recv(dst.data() + 3, big, after(1ms));
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  EXPECT_EQ(r1.value(), big);
  EXPECT_EQ(0, std::memcmp(dst.data() + 3, src.data(), big)) << "recv returned before its bytes were in place";
  ASSERT_TRUE(s1.wait(after(30s)).ok());
  // The next receive gets the next message.
  Transfer s2 = p.ca->send_async(small, sizeof small);
  auto r2 = p.cb->recv(dst.data(), 64, after(10s));
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  EXPECT_EQ(r2.value(), sizeof small);
  EXPECT_EQ(0, std::memcmp(dst.data(), small, sizeof small));
  EXPECT_TRUE(s2.wait(after(10s)).ok());
  // With nothing sent, the deadline still holds: the receive is withdrawn.
  auto r3 = p.cb->recv(dst.data(), 64, after(20ms));
  EXPECT_EQ(r3.status().code(), Code::kDeadlineExceeded);
}

INSTANTIATE_TEST_SUITE_P(Transports, BlockingCalls, ::testing::Values("tcp", "local"));

}  // namespace
}  // namespace ferry
