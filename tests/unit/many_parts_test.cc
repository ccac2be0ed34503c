// Vector operations of thousands of parts, over both transports between two
// engines of this process: more parts than one system call takes (IOV_MAX,
// 1024) used to fail the whole TCP connection. Random bytes, odd part sizes
// and offsets, verified end to end, for eager and rendezvous sizes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

class ManyParts : public ::testing::TestWithParam<const char*> {};

TEST_P(ManyParts, SendvAndRecvvOfThousandsOfPartsArriveIntact) {
  Options o;
  o.transport = GetParam();
  auto a = Engine::create(o).value();
  auto b = Engine::create(o).value();
  std::shared_ptr<Connection> ca, cb;
  std::thread t([&] { cb = b->accept(after(10s)).value(); });
  ca = a->connect(b->address(), after(10s)).value();
  t.join();
  ASSERT_EQ(ca->transport_name(), std::string_view(GetParam()));
  std::mt19937_64 rng(17);
  // 2,500 parts of 1..23 bytes (an eager message), then 6,000 parts of
  // 700..1,500 bytes (a rendezvous of ~6 MiB, chunks of hundreds of parts).
  for (auto [count, lo, hi] : {std::tuple<size_t, size_t, size_t>{2500, 1, 23}, {6000, 700, 1500}}) {
    std::vector<size_t> sizes(count);
    size_t total = 0;
    for (auto& n : sizes) total += n = lo + rng() % (hi - lo + 1);
    std::vector<uint8_t> src(total + 2 * count + 5), dst(total + 3 * count + 7, 0);
    for (auto& v : src) v = static_cast<uint8_t>(rng());
    ASSERT_TRUE(a->reg(src.data(), src.size()).ok());
    ASSERT_TRUE(b->reg(dst.data(), dst.size()).ok());
    std::vector<ConstBuffer> out;
    std::vector<MutableBuffer> in;
    std::vector<uint8_t> expect;
    size_t at_src = 5, at_dst = 7;
    for (size_t n : sizes) {
      out.push_back({src.data() + at_src, n});
      expect.insert(expect.end(), src.data() + at_src, src.data() + at_src + n);
      at_src += n + 2;  // gaps: the parts are not one run of memory
    }
    // The receiver's parts cut the message differently.
    std::vector<std::pair<size_t, size_t>> pieces;  // (offset in dst, size)
    for (size_t left = total; left > 0;) {
      size_t n = std::min(left, 1 + static_cast<size_t>(rng() % (2 * hi)));
      in.push_back({dst.data() + at_dst, n});
      pieces.push_back({at_dst, n});
      at_dst += n + 3;
      left -= n;
    }
    Transfer r = cb->recvv_async(in);
    Status s = ca->sendv(out, after(30s));
    ASSERT_TRUE(s.ok()) << count << " parts: " << s.to_string();
    ASSERT_TRUE(r.wait(after(30s)).ok()) << count << " parts: " << r.status().to_string();
    EXPECT_EQ(r.bytes(), total);
    size_t from = 0;
    for (auto [off, n] : pieces) {
      ASSERT_EQ(0, std::memcmp(dst.data() + off, expect.data() + from, n)) << count << " parts, at " << from;
      from += n;
    }
    EXPECT_TRUE(ca->health().ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ManyParts, ::testing::Values("tcp", "local"));

}  // namespace
}  // namespace ferry
