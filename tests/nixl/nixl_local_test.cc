// The FERRY NIXL plugin within one agent (supportsLocal): a single nixlAgent
// moves bytes between descriptor lists of its own, naming itself as the
// remote agent, as NIXL's single-agent examples do. Random bytes at odd
// sizes and offsets, between two registrations and within one; after each
// transfer every byte of both buffers is checked, and the notification comes
// back to the agent itself after the data. Every wait has a deadline. ctest
// runs each case over TCP and over the local transport.
#include <gtest/gtest.h>
#include <nixl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/pattern.h"
#include "nixl/nixl_test_data.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ferry::test::Range;

constexpr const char* kName = "solo";
// Odd, so that no range lines up with a page or a chunk by chance.
constexpr size_t kBytes = (16u << 20) + 4099;

std::vector<Range> scattered(size_t count, size_t max_size, uint32_t seed, size_t limit = kBytes) {
  return ferry::test::scattered(count, max_size, seed, limit);
}

uint64_t hash(const std::vector<uint8_t>& v) { return ferry::core::fnv1a(v.data(), v.size()); }

class NixlWithinOneAgent : public ::testing::Test {
 protected:
  void SetUp() override {
    agent_ = std::make_unique<nixlAgent>(kName, nixlAgentConfig(false));
    ASSERT_EQ(agent_->createBackend("FERRY", {{"peer_timeout_ms", "1000"}}, backend_), NIXL_SUCCESS);
    for (int i = 0; i < 2; ++i) {
      buf_[i].resize(kBytes);
      ferry::core::fill_random(buf_[i].data(), kBytes, 0x5e1f + i);
      image_[i] = buf_[i];
    }
    ASSERT_EQ(agent_->registerMem(registration()), NIXL_SUCCESS);
  }

  void TearDown() override {
    if (agent_) {
      EXPECT_EQ(agent_->deregisterMem(registration()), NIXL_SUCCESS);
    }
    agent_.reset();  // before the buffers go
  }

  // Both buffers, as two registrations.
  nixl_reg_dlist_t registration() {
    nixl_reg_dlist_t reg(DRAM_SEG);
    for (auto& b : buf_) reg.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(b.data()), b.size(), 0, ""));
    return reg;
  }

  uintptr_t at(int buffer, size_t offset) const { return reinterpret_cast<uintptr_t>(buf_[buffer].data()) + offset; }

  nixl_status_t create(nixl_xfer_op_t op, const std::vector<Range>& ranges, int from, int to, const std::string* note,
                       nixlXferReqH*& request) {
    nixl_xfer_dlist_t local(DRAM_SEG), remote(DRAM_SEG);
    for (const Range& r : ranges) {
      local.addDesc(nixlBasicDesc(at(from, r.local), r.size, 0));
      remote.addDesc(nixlBasicDesc(at(to, r.remote), r.size, 0));
    }
    nixl_opt_args_t extra;
    if (note != nullptr) extra.notif = *note;
    return agent_->createXferReq(op, local, remote, kName, request, &extra);
  }

  // Posts `request` and waits, at most `within`, for its end; the status.
  nixl_status_t run(nixlXferReqH* request, std::chrono::milliseconds within = 30s) {
    nixl_status_t s = agent_->postXferReq(request);
    const auto deadline = Clock::now() + within;
    while (s == NIXL_IN_PROG && Clock::now() < deadline) {
      std::this_thread::sleep_for(50us);
      s = agent_->getXferStatus(request);
    }
    return s;
  }

  // One look at the agent's notifications, which must all be from itself:
  // appended to `out`. `seen` gets the hash of buffer `watched` when the
  // first arrives.
  void poll_notes(std::vector<std::string>& out, int watched = -1, uint64_t* seen = nullptr) {
    nixl_notifs_t got;
    EXPECT_EQ(agent_->getNotifs(got), NIXL_SUCCESS);
    for (auto& [agent, messages] : got) {
      EXPECT_EQ(agent, kName) << "a notification from another agent";
      if (!messages.empty() && out.empty() && seen != nullptr) *seen = hash(buf_[watched]);
      out.insert(out.end(), messages.begin(), messages.end());
    }
  }

  // The agent's notifications, waiting at most `within` for `count`.
  std::vector<std::string> notes_to_self(size_t count, std::chrono::milliseconds within = 20s) {
    std::vector<std::string> out;
    const auto deadline = Clock::now() + within;
    while (out.size() < count && Clock::now() < deadline) {
      poll_notes(out);
      if (out.size() < count) std::this_thread::sleep_for(200us);
    }
    return out;
  }

  // What `op` of `ranges` from buffer `from` to buffer `to` leaves in the
  // images (a READ moves bytes from `to` into `from`).
  void expect_moved(nixl_xfer_op_t op, const std::vector<Range>& ranges, int from, int to) {
    for (const Range& r : ranges) {
      if (op == NIXL_WRITE) {
        std::copy_n(image_[from].data() + r.local, r.size, image_[to].data() + r.remote);
      } else {
        std::copy_n(image_[to].data() + r.remote, r.size, image_[from].data() + r.local);
      }
    }
  }

  void check_buffers(const std::string& what) {
    for (int i = 0; i < 2; ++i) {
      if (buf_[i] == image_[i]) continue;
      const auto diff = std::mismatch(buf_[i].begin(), buf_[i].end(), image_[i].begin());
      ADD_FAILURE() << what << ": buffer " << i << " differs first at byte " << (diff.first - buf_[i].begin());
    }
  }

  // Moves `ranges` with a notification, then checks every byte of both
  // buffers, and that the notification came once the data was in place.
  void move_and_check(nixl_xfer_op_t op, const std::vector<Range>& ranges, int from, int to, const std::string& note) {
    expect_moved(op, ranges, from, to);
    // Where the data lands: the notification must find it complete.
    const int landing = op == NIXL_WRITE ? to : from;
    const uint64_t expected = hash(image_[landing]);
    nixlXferReqH* request = nullptr;
    ASSERT_EQ(create(op, ranges, from, to, &note, request), NIXL_SUCCESS);
    // Both polled, as NIXL's users do: a READ's notification leaves when a
    // status check finds its data in.
    nixl_status_t s = agent_->postXferReq(request);
    std::vector<std::string> notes;
    uint64_t seen = 0;
    const auto deadline = Clock::now() + 30s;
    while ((s == NIXL_IN_PROG || notes.empty()) && s >= 0 && Clock::now() < deadline) {
      if (s == NIXL_IN_PROG) s = agent_->getXferStatus(request);
      if (notes.empty()) poll_notes(notes, landing, &seen);
    }
    ASSERT_EQ(s, NIXL_SUCCESS) << note;
    ASSERT_EQ(notes.size(), 1u) << note;
    EXPECT_EQ(notes[0], note);
    EXPECT_EQ(seen, expected) << note << ": the notification came before the data, or the bytes differ";
    check_buffers(note);
    EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
  }

  std::unique_ptr<nixlAgent> agent_;
  nixlBackendH* backend_ = nullptr;
  std::vector<uint8_t> buf_[2];
  std::vector<uint8_t> image_[2];
};

TEST_F(NixlWithinOneAgent, WritesBetweenTwoRegistrations) {
  move_and_check(NIXL_WRITE, {{7, 11, 1}}, 0, 1, "one byte");
  move_and_check(NIXL_WRITE, scattered(7, 1u << 20, 7), 0, 1, "seven");
  move_and_check(NIXL_WRITE, scattered(256, 16 * 1024, 256), 0, 1, "kv blocks");
  move_and_check(NIXL_WRITE, {{3, 5, (16u << 20) + 3}}, 1, 0, "big, the other way");
}

TEST_F(NixlWithinOneAgent, ReadsBetweenTwoRegistrations) {
  move_and_check(NIXL_READ, {{2, 9, 1}}, 0, 1, "read one");
  move_and_check(NIXL_READ, scattered(7, 1u << 20, 17), 0, 1, "read seven");
  move_and_check(NIXL_READ, scattered(256, 16 * 1024, 18), 1, 0, "read 256");
  move_and_check(NIXL_READ, {{9, 1, (16u << 20) + 5}}, 0, 1, "read big");
}

TEST_F(NixlWithinOneAgent, MovesWithinOneRegistration) {
  // Ranges in the first half of buffer 0 to and from its second half.
  const size_t half = kBytes / 2;
  auto ranges = scattered(64, 32 * 1024, 31, half);
  for (Range& r : ranges) r.remote += half;
  move_and_check(NIXL_WRITE, ranges, 0, 0, "write within");
  ferry::core::fill_random(buf_[0].data(), half, 0xbeef);
  std::copy_n(buf_[0].data(), half, image_[0].data());
  auto back = scattered(64, 32 * 1024, 32, half);
  for (Range& r : back) r.remote += half;
  move_and_check(NIXL_READ, back, 0, 0, "read within");
}

TEST_F(NixlWithinOneAgent, PreparedListsNamingTheAgentItselfArePostedAgain) {
  auto ranges = scattered(32, 8 * 1024, 41);
  nixl_xfer_dlist_t local(DRAM_SEG), remote(DRAM_SEG);
  for (const Range& r : ranges) {
    local.addDesc(nixlBasicDesc(at(0, r.local), r.size, 0));
    remote.addDesc(nixlBasicDesc(at(1, r.remote), r.size, 0));
  }
  nixlDlistH* local_side = nullptr;
  nixlDlistH* remote_side = nullptr;
  ASSERT_EQ(agent_->prepXferDlist(NIXL_INIT_AGENT, local, local_side), NIXL_SUCCESS);
  ASSERT_EQ(agent_->prepXferDlist(kName, remote, remote_side), NIXL_SUCCESS);
  // Every other block, in reverse order.
  std::vector<int> picked;
  std::vector<Range> moved;
  for (int i = static_cast<int>(ranges.size()) - 1; i >= 0; i -= 2) {
    picked.push_back(i);
    moved.push_back(ranges[i]);
  }
  nixl_opt_args_t extra;
  extra.notif = "prepped";
  nixlXferReqH* request = nullptr;
  ASSERT_EQ(agent_->makeXferReq(NIXL_WRITE, local_side, picked, remote_side, picked, request, &extra), NIXL_SUCCESS);
  for (int round = 0; round < 3; ++round) {
    ferry::core::fill_random(buf_[0].data(), kBytes, 900 + round);
    image_[0] = buf_[0];
    expect_moved(NIXL_WRITE, moved, 0, 1);
    ASSERT_EQ(run(request), NIXL_SUCCESS) << "round " << round;
    auto notes = notes_to_self(1);
    ASSERT_EQ(notes.size(), 1u) << "round " << round;
    EXPECT_EQ(notes[0], "prepped");
    check_buffers("round " + std::to_string(round));
  }
  EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);

  nixlXferReqH* read = nullptr;
  ASSERT_EQ(agent_->makeXferReq(NIXL_READ, local_side, picked, remote_side, picked, read), NIXL_SUCCESS);
  ferry::core::fill_random(buf_[1].data(), kBytes, 77);
  image_[1] = buf_[1];
  expect_moved(NIXL_READ, moved, 0, 1);
  ASSERT_EQ(run(read), NIXL_SUCCESS);
  check_buffers("prepped read");
  EXPECT_EQ(agent_->releaseXferReq(read), NIXL_SUCCESS);
  EXPECT_EQ(agent_->releasedDlistH(local_side), NIXL_SUCCESS);
  EXPECT_EQ(agent_->releasedDlistH(remote_side), NIXL_SUCCESS);
}

TEST_F(NixlWithinOneAgent, NotificationsReachTheAgentItselfInOrder) {
  const std::string binary("\0\x01\xff self", 9);
  ASSERT_EQ(agent_->genNotif(kName, binary), NIXL_SUCCESS);
  ASSERT_EQ(agent_->genNotif(kName, "second"), NIXL_SUCCESS);
  auto notes = notes_to_self(2);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0], binary);
  EXPECT_EQ(notes[1], "second");
  EXPECT_TRUE(notes_to_self(1, 200ms).empty()) << "a notification came twice";
}

TEST_F(NixlWithinOneAgent, BadDescriptorsAreRefusedAndNothingMoves) {
  nixlXferReqH* request = nullptr;
  // Past the end of the target registration, and before its start.
  EXPECT_NE(create(NIXL_WRITE, {{0, kBytes - 10, 11}}, 0, 1, nullptr, request), NIXL_SUCCESS);
  nixl_xfer_dlist_t local(DRAM_SEG), remote(DRAM_SEG);
  local.addDesc(nixlBasicDesc(at(0, 0), 16, 0));
  remote.addDesc(nixlBasicDesc(at(1, 0) - 8, 16, 0));
  EXPECT_NE(agent_->createXferReq(NIXL_WRITE, local, remote, kName, request), NIXL_SUCCESS);
  // Local memory that is not registered.
  std::vector<uint8_t> stray(4096);
  nixl_xfer_dlist_t l2(DRAM_SEG), r2(DRAM_SEG);
  l2.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(stray.data()), stray.size(), 0));
  r2.addDesc(nixlBasicDesc(at(1, 0), stray.size(), 0));
  EXPECT_NE(agent_->createXferReq(NIXL_WRITE, l2, r2, kName, request), NIXL_SUCCESS);
  // Lengths that differ between the sides.
  nixl_xfer_dlist_t l3(DRAM_SEG), r3(DRAM_SEG);
  l3.addDesc(nixlBasicDesc(at(0, 0), 100, 0));
  r3.addDesc(nixlBasicDesc(at(1, 0), 99, 0));
  EXPECT_NE(agent_->createXferReq(NIXL_WRITE, l3, r3, kName, request), NIXL_SUCCESS);
  check_buffers("after refusals");
  move_and_check(NIXL_WRITE, {{5, 6, 777}}, 0, 1, "still fine");
}

// The target registration goes away between prepare and post: the write
// fails, and the agent, its own target, is told so through the
// notification's failed form.
TEST_F(NixlWithinOneAgent, AWriteIntoMemoryDeregisteredMeanwhileFailsAndTheAgentIsToldSo) {
  nixlXferReqH* request = nullptr;
  const std::string note = "lease-9";
  ASSERT_EQ(create(NIXL_WRITE, scattered(5, 4096, 5), 0, 1, &note, request), NIXL_SUCCESS);
  nixl_reg_dlist_t target(DRAM_SEG);
  target.addDesc(nixlBlobDesc(at(1, 0), kBytes, 0, ""));
  ASSERT_EQ(agent_->deregisterMem(target), NIXL_SUCCESS);
  EXPECT_LT(run(request), 0);
  auto notes = notes_to_self(1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "FERRY_XFER_FAILED:lease-9");
  EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
  check_buffers("after the failed write");
  // Gone from NIXL's view of the agent too, until registered again.
  EXPECT_NE(create(NIXL_WRITE, {{0, 0, 64}}, 0, 1, nullptr, request), NIXL_SUCCESS);
  ASSERT_EQ(agent_->registerMem(target), NIXL_SUCCESS);
  move_and_check(NIXL_WRITE, {{1, 2, 4097}}, 0, 1, "registered again");
}

// NIXL may reuse the buffers once releaseXferReq returns: a large write
// released at once stops, the release returns within its bound, and the
// agent goes on.
TEST_F(NixlWithinOneAgent, AReleasedWriteEndsAndTheAgentGoesOn) {
  for (int round = 0; round < 5; ++round) {
    nixlXferReqH* request = nullptr;
    ASSERT_EQ(create(NIXL_WRITE, {{0, 0, 16u << 20}}, 0, 1, nullptr, request), NIXL_SUCCESS);
    ASSERT_GE(agent_->postXferReq(request), 0);
    const auto start = Clock::now();
    EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
    EXPECT_LT(Clock::now() - start, 5s) << "round " << round;
  }
  // Whatever landed of those writes, a fresh one moves every byte.
  image_[1] = buf_[1];
  move_and_check(NIXL_WRITE, scattered(9, 64 * 1024, 51), 0, 1, "after releases");
}

}  // namespace
