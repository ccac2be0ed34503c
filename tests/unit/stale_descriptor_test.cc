// Memory registered again at the same address is a new registration: a
// descriptor of the old one reaches nothing. Allocators hand an address out
// again as soon as it is freed, so a peer still holding the old descriptor
// (a KV block's, say) must be refused before a byte moves, on both
// transports, for writes and reads, with the new descriptor working.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"
#include "testing/random_data.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

class StaleDescriptor : public PairTest {};

TEST_P(StaleDescriptor, MemoryRegisteredAgainAtTheSameAddressRefusesTheOldDescriptor) {
  constexpr size_t kSize = (256u << 10) + 13;
  std::vector<uint8_t> theirs(kSize, 0), mine(kSize), back(kSize, 0);
  testing::fill_random_bytes(mine.data(), mine.size(), /*seed=*/41);
  auto local = a_->reg(mine.data(), mine.size());
  auto local_back = a_->reg(back.data(), back.size());
  ASSERT_TRUE(local.ok() && local_back.ok());

  auto first = b_->reg(theirs.data(), theirs.size());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  RemoteDescriptor old = b_->export_region(*first).value();
  ASSERT_TRUE(ca_->write(mine.data(), 4099, old, 7, {}, after(10s)).ok());
  ASSERT_EQ(std::memcmp(theirs.data() + 7, mine.data(), 4099), 0);

  // The owner lets the region go and registers the same bytes again.
  ASSERT_TRUE(b_->dereg(*first).ok());
  auto second = b_->reg(theirs.data(), theirs.size());
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  ASSERT_EQ(second->base, first->base);
  std::vector<uint8_t> before = theirs;

  Status w = ca_->write(mine.data(), kSize - 100, old, 100, "stale", after(10s));
  EXPECT_EQ(w.code(), Code::kNotFound) << w.to_string();
  EXPECT_EQ(theirs, before) << "a write with the old descriptor landed in memory registered again";
  Status r = ca_->read(back.data(), kSize, old, 0, after(10s));
  EXPECT_EQ(r.code(), Code::kNotFound) << r.to_string();
  EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t v) { return v == 0; }))
      << "a read with the old descriptor delivered bytes";
  // A write refused before it started moved nothing, and its notification
  // is not delivered as if it had landed.
  auto note = cb_->poll_notification();
  EXPECT_FALSE(note.has_value()) << "the refused write's notification arrived: " << *note;

  // The new registration's descriptor works, and the connection goes on.
  RemoteDescriptor fresh = b_->export_region(*second).value();
  ASSERT_TRUE(ca_->health().ok()) << ca_->health().to_string();
  ASSERT_TRUE(ca_->write(mine.data(), kSize - 100, fresh, 100, "fresh", after(10s)).ok());
  EXPECT_EQ(std::memcmp(theirs.data() + 100, mine.data(), kSize - 100), 0);
  auto got = cb_->wait_notification(after(10s));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "fresh");
  ASSERT_TRUE(ca_->read(back.data(), kSize, fresh, 0, after(10s)).ok());
  EXPECT_EQ(back, theirs);
  // Deregistered before the vectors go: dereg returns once the engine no
  // longer uses the memory (the refused write's chunks may still be on
  // their way out when the call returns).
  EXPECT_TRUE(a_->dereg(*local).ok());
  EXPECT_TRUE(a_->dereg(*local_back).ok());
  EXPECT_TRUE(b_->dereg(*second).ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, StaleDescriptor, ::testing::Values("tcp", "local"));

}  // namespace
}  // namespace ferry
