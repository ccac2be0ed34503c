// Vector operations of thousands of parts, over both transports between two
// engines of this process: more parts than one system call takes (IOV_MAX,
// 1024) used to fail the whole TCP connection. Random bytes, odd part sizes
// and offsets, verified end to end, for eager and rendezvous sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

class ManyParts : public ::testing::TestWithParam<const char*> {};

TEST_P(ManyParts, SendvAndRecvvOfThousandsOfPartsArriveIntact) {
  EnginePair p = connect_pair(GetParam());
  ASSERT_TRUE(p.ca && p.cb);
  std::mt19937_64 rng(17);
  // 2,500 parts of 1..23 bytes (an eager message), then 6,000 parts of
  // 700..1,500 bytes (a rendezvous of ~6 MiB, chunks of hundreds of parts).
  for (auto [count, lo, hi] : {std::tuple<size_t, size_t, size_t>{2500, 1, 23}, {6000, 700, 1500}}) {
    std::vector<size_t> sizes(count);
    size_t total = 0;
    for (auto& n : sizes) total += n = lo + rng() % (hi - lo + 1);
    std::vector<uint8_t> src(total + 2 * count + 5), dst(total + 3 * count + 7, 0);
    for (auto& v : src) v = static_cast<uint8_t>(rng());
    ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
    ASSERT_TRUE(p.b->reg(dst.data(), dst.size()).ok());
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
    Transfer r = p.cb->recvv_async(in);
    Status s = p.ca->sendv(out, after(30s));
    ASSERT_TRUE(s.ok()) << count << " parts: " << s.to_string();
    ASSERT_TRUE(r.wait(after(30s)).ok()) << count << " parts: " << r.status().to_string();
    EXPECT_EQ(r.bytes(), total);
    size_t from = 0;
    for (auto [off, n] : pieces) {
      ASSERT_EQ(0, std::memcmp(dst.data() + off, expect.data() + from, n)) << count << " parts, at " << from;
      from += n;
    }
    EXPECT_TRUE(p.ca->health().ok());
  }
}

// A readv whose first item fails part way (its region deregistered at the
// target): the readv finishes with that error only once its other item has
// landed, not while its bytes still arrive in the caller's buffer.
TEST(VectorOperations, AReadvWithAFailedItemEndsAfterItsOtherItems) {
  // The buffers outlive the engines: the target may still be sending item 1
  // from src1 (registered to the end) when the readv has finished.
  const size_t n = size_t{64} << 20;
  std::vector<uint8_t> src0(n, 0x11), src1(n, 0xab), dst(2 * n, 0);
  EnginePair p = connect_pair("tcp");
  ASSERT_TRUE(p.ca && p.cb);
  auto& x = p.a;  // the reader
  auto& y = p.b;  // the target
  auto& xc = p.ca;
  Region r0 = y->reg(src0.data(), n).value();
  Region r1 = y->reg(src1.data(), n).value();
  ASSERT_TRUE(x->reg(dst.data(), dst.size()).ok());
  auto d0 = y->export_region(r0, 0, 0).value();
  auto d1 = y->export_region(r1, 0, 0).value();
  ReadItem items[2] = {{dst.data(), n, d0, 0}, {dst.data() + n, n, d1, 0}};
  Transfer read = xc->readv_async(items);
  std::this_thread::sleep_for(2ms);
  ASSERT_TRUE(y->dereg(r0).ok());
  Status s = read.wait(after(30s));
  size_t at_end = static_cast<size_t>(std::count(dst.begin() + n, dst.end(), 0xab));
  std::this_thread::sleep_for(300ms);
  size_t later = static_cast<size_t>(std::count(dst.begin() + n, dst.end(), 0xab));
  EXPECT_EQ(later, at_end) << "item 1 went on landing after the readv finished (" << s.to_string() << ")";
  if (s.ok()) {
    EXPECT_EQ(at_end, n);  // the dereg came too late to fail item 0
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ManyParts, ::testing::Values("tcp", "local"));

}  // namespace
}  // namespace ferry
