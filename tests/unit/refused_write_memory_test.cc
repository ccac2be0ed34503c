// A write the peer refuses returns only once nothing of ferry reads its
// source any more: the caller may unmap the memory the moment the call
// returns. Each round posts a large write (chunks on every path at once) to
// a descriptor the peer let go of; as soon as the call returns, the source
// is made inaccessible. A path still copying from it would crash the test;
// one still sending it would fail its send (EFAULT) and lose the path,
// which the log says.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"
#include "ferry/log.h"
#include "testing/random_data.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

class RefusedWriteMemory : public PairTest {};

TEST_P(RefusedWriteMemory, NoPathReadsTheSourceAfterTheCallReturns) {
  constexpr size_t kSize = (24u << 20) + 4099;
  void* map = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* src = static_cast<uint8_t*>(map);
  testing::fill_random_bytes(src, kSize, /*seed=*/9);
  auto mine = a_->reg(src, kSize);
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  std::vector<uint8_t> theirs(kSize, 0);
  queue_log_lines(4096);

  constexpr int kRounds = 12;
  for (int round = 0; round < kRounds; ++round) {
    auto region = b_->reg(theirs.data(), theirs.size());
    ASSERT_TRUE(region.ok()) << region.status().to_string();
    RemoteDescriptor stale = b_->export_region(*region).value();
    ASSERT_TRUE(b_->dereg(*region).ok());
    Status w = ca_->write(src, kSize, stale, 0, {}, after(20s));
    ASSERT_EQ(w.code(), Code::kNotFound) << "round " << round << ": " << w.to_string();
    ASSERT_EQ(::mprotect(src, kSize, PROT_NONE), 0);
    std::this_thread::sleep_for(20ms);
    ASSERT_EQ(::mprotect(src, kSize, PROT_READ | PROT_WRITE), 0);
  }
  LogLines logs = take_log_lines(100ms);
  log_to_stderr();
  for (const LogLine& l : logs.lines) {
    EXPECT_EQ(l.message.find("lost"), std::string::npos) << "after a refused write returned: " << l.message;
  }
  // The connection carries on with every path.
  std::vector<uint8_t> got(kSize, 0);
  auto back = b_->reg(got.data(), got.size());
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE(ca_->write(src, kSize, b_->export_region(*back).value(), 0, {}, after(20s)).ok());
  EXPECT_EQ(std::memcmp(got.data(), src, kSize), 0);
  ASSERT_TRUE(a_->dereg(*mine).ok());
  ::munmap(map, kSize);
}

INSTANTIATE_TEST_SUITE_P(Transports, RefusedWriteMemory, ::testing::Values("tcp", "local"));

}  // namespace
}  // namespace ferry
