// PageLender: bytes lent to a loopback TCP socket arrive intact (odd sizes,
// offsets inside a page, in pieces), and a socket shut for writing fails the
// lend with kPeerLost instead of ending the process with SIGPIPE.
#include "platform/page_lender.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "deny_syscall.h"
#include "loopback_tcp_pair.h"

namespace ferry::platform {
namespace {

using TcpPair = ferry::testing::LoopbackTcpPair;

TEST(PageLender, LentBytesArriveIntactAtOddSizesAndOffsets) {
  TcpPair tcp;
  ASSERT_GE(tcp.b, 0);
  auto lender = PageLender::open(64 * 1024);  // smaller than what is lent: several rounds a call
  ASSERT_TRUE(lender.ok()) << lender.status().to_string();
  const size_t kBytes = 3 << 20;
  auto mem = map_lendable(kBytes);
  ASSERT_TRUE(mem.ok()) << mem.status().to_string();
  auto* p = static_cast<uint8_t*>(mem.value());
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < kBytes; ++i) p[i] = static_cast<uint8_t>(rng() >> 11);
  // Pieces: inside a page, across pages, and one over a megabyte.
  const std::vector<std::pair<size_t, size_t>> pieces = {{1, 1}, {4095, 2}, {5000, 70001}, {100003, (1 << 20) + 17}};
  std::vector<uint8_t> want;
  for (auto [off, n] : pieces) want.insert(want.end(), p + off, p + off + n);
  std::vector<uint8_t> got(want.size());
  std::thread reader([&] {
    size_t at = 0;
    while (at < got.size()) {
      ssize_t k = ::recv(tcp.b, got.data() + at, got.size() - at, 0);
      if (k <= 0) break;
      at += static_cast<size_t>(k);
    }
  });
  for (size_t i = 0; i < pieces.size(); ++i) {
    Status s = lender.value().lend(tcp.a, p + pieces[i].first, pieces[i].second, i + 1 < pieces.size());
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  reader.join();
  EXPECT_EQ(got, want);
  unmap_lendable(p, kBytes);
}

// What block_sigpipe_in_this_thread() prevents: the lend of a thread that
// did not block SIGPIPE ends the process.
TEST(PageLenderDeathTest, ASocketShutForWritingRaisesSigpipeInAThreadThatDidNotBlockIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        TcpPair tcp;
        ::shutdown(tcp.a, SHUT_WR);
        auto lender = PageLender::open(4096);
        auto mem = map_lendable(4096);
        if (lender.ok() && mem.ok()) (void)lender.value().lend(tcp.a, mem.value(), 4096, false);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGPIPE), "");
}

// A sandbox that refuses vmsplice: open() says so (its caller copies), it
// does not hand out a lender whose first lend would fail a live socket.
TEST(PageLenderDeathTest, OpenFailsWhereVmspliceIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!ferry::testing::deny_syscall(SYS_vmsplice)) std::_Exit(3);
        auto lender = PageLender::open(4096);
        std::_Exit(!lender.ok() && lender.status().code() == Code::kUnimplemented &&
                           lender.status().to_string().find("vmsplice") != std::string::npos
                       ? 0
                       : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(PageLender, ASocketShutForWritingFailsTheLendNotTheProcess) {
  Status result;
  std::thread worker([&] {
    block_sigpipe_in_this_thread();
    TcpPair tcp;
    ASSERT_GE(tcp.b, 0);
    ::shutdown(tcp.a, SHUT_WR);
    auto lender = PageLender::open(4096);
    ASSERT_TRUE(lender.ok()) << lender.status().to_string();
    auto mem = map_lendable(4096);
    ASSERT_TRUE(mem.ok());
    result = lender.value().lend(tcp.a, mem.value(), 4096, false);
    unmap_lendable(mem.value(), 4096);
  });
  worker.join();
  EXPECT_EQ(result.code(), Code::kPeerLost) << result.to_string();
  EXPECT_NE(result.to_string().find("splice"), std::string::npos) << result.to_string();
}

}  // namespace
}  // namespace ferry::platform
