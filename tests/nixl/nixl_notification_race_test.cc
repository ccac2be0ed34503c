// Notifications between two agents that have loaded each other's metadata,
// as vLLM's NixlConnector handshakes: "decode" (a nixl_agent_peer process)
// registers a pool and publishes its metadata, "prefill" (this process)
// loads it, and decode loads prefill's too, before or after the first
// transfer, in either order. Prefill then writes 256 scattered 16 KiB blocks
// with prepXferDlist + makeXferReq and a note, and both sides send notes
// with genNotif (decode first in some rounds, so either side dials first);
// in some rounds prefill forgets decode's metadata and loads it again before
// the second write, which then goes on a new connection. With both agents dialing each other there are two
// connections between them; every note must reach the application, named by
// its sender, after its data, whichever connection came up first.
//
// Each round starts both agents afresh (new engines, new connections), so
// the order in which connections come up varies from round to round.
// FERRY_NIXL_ROUNDS sets the rounds (default 200); the test stops at the
// first failed round unless FERRY_NIXL_FAILED_ROUNDS allows more (to count
// them). ctest runs it over TCP and
// over the local transport. FERRY_NIXL_RACE_VRAM=1 puts both pools in GPU
// 0's memory (skipped without a GPU), as a KV cache is.
#include <gtest/gtest.h>
#include <nixl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/pattern.h"
#include "gpu/gpu_memory.h"
#include "nixl/agent_process.h"
#include "nixl/nixl_test_data.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ferry::test::hex;
using ferry::test::unhex;

constexpr size_t kBlock = 16 * 1024;
constexpr int kPoolBlocks = 512;  // each side's pool; a round moves 256 of them
constexpr int kMoved = 256;
constexpr size_t kPoolOffset = 5;  // pools start at an odd offset of each buffer
constexpr size_t kBufferBytes = kPoolOffset + kPoolBlocks * kBlock + 11;

int rounds() {
  const char* v = std::getenv("FERRY_NIXL_ROUNDS");
  return v != nullptr ? std::max(1, std::atoi(v)) : 200;
}

// Rounds that may fail before the test stops (FERRY_NIXL_FAILED_ROUNDS,
// default 1): counting every failed round of a broken build takes up to
// half a minute a round.
int failed_rounds_allowed() {
  const char* v = std::getenv("FERRY_NIXL_FAILED_ROUNDS");
  return v != nullptr ? std::max(1, std::atoi(v)) : 1;
}

bool in_vram() {
  const char* v = std::getenv("FERRY_NIXL_RACE_VRAM");
  return v != nullptr && std::string(v) == "1";
}

struct Seen {
  std::string agent;
  std::string message;
  uint64_t buffer_hash = 0;  // decode's whole buffer when it saw the note
};

class NixlNotificationRace : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> args{"decode", std::to_string(kBufferBytes)};
    if (vram_) {
      if (ferry::testing::gpu_count() == 0) GTEST_SKIP() << "FERRY_NIXL_RACE_VRAM=1 needs a GPU";
      gpu_ = ferry::testing::gpu_alloc(0, kBufferBytes);
      ASSERT_NE(gpu_.ptr, nullptr);
      args.push_back("memory=vram");
    }
    decode_ = std::make_unique<ferry::test::AgentProcess>(NIXL_AGENT_PEER, args);
    ASSERT_TRUE(decode_->started());
    local_.resize(kBufferBytes);
    image_.resize(kBufferBytes);
    auto addr = decode_->ask("addr");
    ASSERT_TRUE(addr && addr->rfind("addr ", 0) == 0) << addr.value_or("no answer");
    std::istringstream in(addr->substr(5));
    in >> decode_base_;
  }

  // A new "decode" agent in the peer process and a new "prefill" here, with
  // fresh bytes on both sides.
  void start_round(int round) {
    prefill_.reset();
    ASSERT_EQ(decode_->ask("reset decode"), "ok");
    ASSERT_EQ(decode_->ask("fill " + std::to_string(1000 + round)), "ok");
    ferry::core::fill_random(image_.data(), image_.size(), 1000 + round);
    ferry::core::fill_random(local_.data(), local_.size(), 2000 + round);
    if (vram_) {
      ASSERT_TRUE(ferry::testing::copy_to(gpu_.ptr, local_.data(), kBufferBytes));
    }
    prefill_ = std::make_unique<nixlAgent>("prefill", nixlAgentConfig(false));
    nixlBackendH* backend = nullptr;
    ASSERT_EQ(prefill_->createBackend("FERRY", {}, backend), NIXL_SUCCESS);
    nixl_reg_dlist_t reg(memory_kind());
    reg.addDesc(nixlBlobDesc(local_base(), kBufferBytes, 0, ""));
    ASSERT_EQ(prefill_->registerMem(reg), NIXL_SUCCESS);
  }

  void prefill_loads_decode() {
    auto md = decode_->ask("md");
    ASSERT_TRUE(md && md->rfind("md ", 0) == 0) << md.value_or("no answer");
    std::string name;
    ASSERT_EQ(prefill_->loadRemoteMD(unhex(md->substr(3)), name), NIXL_SUCCESS);
    ASSERT_EQ(name, "decode");
  }

  void decode_loads_prefill() {
    nixl_blob_t md;
    ASSERT_EQ(prefill_->getLocalMD(md), NIXL_SUCCESS);
    ASSERT_EQ(decode_->ask("load " + hex(md)), "ok prefill");
  }

  // vLLM's prepared write: 256 blocks picked at random on each side, one
  // request, one note. Waits for DONE and updates the image of decode's
  // buffer.
  void write_blocks(uint32_t seed, const std::string& note) {
    nixl_xfer_dlist_t local(memory_kind()), remote(memory_kind());
    for (int i = 0; i < kPoolBlocks; ++i) {
      local.addDesc(nixlBasicDesc(local_base() + kPoolOffset + i * kBlock, kBlock, 0));
      remote.addDesc(nixlBasicDesc(decode_base_ + kPoolOffset + i * kBlock, kBlock, 0));
    }
    nixlDlistH* local_side = nullptr;
    nixlDlistH* remote_side = nullptr;
    ASSERT_EQ(prefill_->prepXferDlist(NIXL_INIT_AGENT, local, local_side), NIXL_SUCCESS);
    ASSERT_EQ(prefill_->prepXferDlist("decode", remote, remote_side), NIXL_SUCCESS);
    std::vector<int> from(kPoolBlocks), to(kPoolBlocks);
    std::iota(from.begin(), from.end(), 0);
    std::iota(to.begin(), to.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(from.begin(), from.end(), rng);
    std::shuffle(to.begin(), to.end(), rng);
    from.resize(kMoved);
    to.resize(kMoved);
    nixl_opt_args_t extra;
    extra.notif = note;
    extra.hasNotif = true;
    nixlXferReqH* request = nullptr;
    ASSERT_EQ(prefill_->makeXferReq(NIXL_WRITE, local_side, from, remote_side, to, request, &extra), NIXL_SUCCESS);
    nixl_status_t s = prefill_->postXferReq(request);
    const auto deadline = Clock::now() + 30s;
    while (s == NIXL_IN_PROG && Clock::now() < deadline) {
      std::this_thread::sleep_for(50us);
      s = prefill_->getXferStatus(request);
    }
    ASSERT_EQ(s, NIXL_SUCCESS) << "the write did not finish";
    for (int i = 0; i < kMoved; ++i) {
      std::copy_n(local_.data() + kPoolOffset + from[i] * kBlock, kBlock, image_.data() + kPoolOffset + to[i] * kBlock);
    }
    EXPECT_EQ(prefill_->releaseXferReq(request), NIXL_SUCCESS);
    EXPECT_EQ(prefill_->releasedDlistH(local_side), NIXL_SUCCESS);
    EXPECT_EQ(prefill_->releasedDlistH(remote_side), NIXL_SUCCESS);
  }

  // The notes decode's application gets, up to `count`, within `within`.
  std::vector<Seen> decode_notes(size_t count, std::chrono::milliseconds within = 20s) {
    auto line = decode_->ask("notifs " + std::to_string(count) + " " + std::to_string(within.count()), within + 10s);
    std::vector<Seen> out;
    if (!line) return out;
    std::istringstream in(*line);
    std::string word;
    size_t n = 0;
    in >> word >> n;
    for (size_t i = 0; i < n; ++i) {
      std::string item;
      in >> item;
      const size_t a = item.find(':'), b = item.rfind(':');
      out.push_back({item.substr(0, a), unhex(item.substr(a + 1, b - a - 1)), std::stoull(item.substr(b + 1))});
    }
    return out;
  }

  // The notes prefill's application gets from `from`, up to `count`.
  std::vector<std::string> prefill_notes(const std::string& from, size_t count, std::chrono::milliseconds within = 20s) {
    std::vector<std::string> out;
    const auto deadline = Clock::now() + within;
    while (out.size() < count && Clock::now() < deadline) {
      nixl_notifs_t got;
      EXPECT_EQ(prefill_->getNotifs(got), NIXL_SUCCESS);
      for (auto& [agent, messages] : got) {
        EXPECT_EQ(agent, from);
        for (auto& m : messages) out.push_back(m);
      }
      if (got.empty()) std::this_thread::sleep_for(200us);
    }
    return out;
  }

  uint64_t image_hash() const { return ferry::core::fnv1a(image_.data(), image_.size()); }
  nixl_mem_t memory_kind() const { return vram_ ? VRAM_SEG : DRAM_SEG; }
  // Prefill's pool: its GPU memory, or local_ itself.
  uintptr_t local_base() const { return reinterpret_cast<uintptr_t>(vram_ ? gpu_.ptr : local_.data()); }

  // One round: the order of the metadata loads, then a write and notes both
  // ways, then the same again on the connections that are up by now.
  void round(int r) {
    ASSERT_NO_FATAL_FAILURE(start_round(r));
    const bool decode_first = (r & 1) != 0;
    const bool decode_loads_late = (r & 2) != 0;
    // Decode dials first: it speaks to prefill before prefill's first write.
    const bool decode_dials_first = !decode_loads_late && (r & 4) != 0;
    const std::string tag = std::to_string(r);
    if (!decode_loads_late && decode_first) {
      ASSERT_NO_FATAL_FAILURE(decode_loads_prefill());
    }
    ASSERT_NO_FATAL_FAILURE(prefill_loads_decode());
    if (!decode_loads_late && !decode_first) {
      ASSERT_NO_FATAL_FAILURE(decode_loads_prefill());
    }
    if (decode_dials_first) {
      ASSERT_EQ(decode_->ask("gennotif prefill " + hex("hello-" + tag)), "ok");
      ASSERT_EQ(prefill_notes("decode", 1), std::vector<std::string>{"hello-" + tag}) << "round " << r;
    }

    ASSERT_NO_FATAL_FAILURE(write_blocks(r, "req-" + tag + " done"));
    auto first = decode_notes(1);
    ASSERT_EQ(first.size(), 1u) << "round " << r << ": decode never got the write's notification";
    EXPECT_EQ(first[0].agent, "prefill");
    EXPECT_EQ(first[0].message, "req-" + tag + " done");
    EXPECT_EQ(first[0].buffer_hash, image_hash()) << "round " << r << ": the note came before the data";

    if (decode_loads_late) {
      ASSERT_NO_FATAL_FAILURE(decode_loads_prefill());
    }
    if ((r & 8) != 0) {
      // Prefill forgets decode and loads it again (as after a metadata
      // refresh): its next notes come on a new connection while decode may
      // not have seen the old one end yet.
      ASSERT_EQ(prefill_->invalidateRemoteMD("decode"), NIXL_SUCCESS);
      ASSERT_NO_FATAL_FAILURE(prefill_loads_decode());
    }
    // Decode speaks to prefill: it dials prefill now if it had not.
    ASSERT_EQ(decode_->ask("gennotif prefill " + hex("ack-" + tag)), "ok");
    auto acks = prefill_notes("decode", 1);
    ASSERT_EQ(acks, std::vector<std::string>{"ack-" + tag}) << "round " << r << ": prefill lost decode's note";

    // Both connections are up: a note alone and a write's note from prefill.
    ASSERT_EQ(prefill_->genNotif("decode", "gen-" + tag), NIXL_SUCCESS);
    ASSERT_NO_FATAL_FAILURE(write_blocks(r + 7919, "req-" + tag + " again"));
    auto second = decode_notes(2);
    ASSERT_EQ(second.size(), 2u) << "round " << r << ": decode lost a note";
    EXPECT_EQ(second[0].agent, "prefill");
    EXPECT_EQ(second[1].agent, "prefill");
    EXPECT_EQ(second[0].message, "gen-" + tag);
    EXPECT_EQ(second[1].message, "req-" + tag + " again");
    EXPECT_EQ(second[1].buffer_hash, image_hash()) << "round " << r << ": the note came before the data";
    ASSERT_EQ(decode_->ask("gennotif prefill " + hex("bye-" + tag)), "ok");
    EXPECT_EQ(prefill_notes("decode", 1), std::vector<std::string>{"bye-" + tag});
  }

  const bool vram_ = in_vram();
  ferry::testing::GpuBuffer gpu_;  // prefill's pool when in VRAM
  std::unique_ptr<ferry::test::AgentProcess> decode_;
  std::unique_ptr<nixlAgent> prefill_;
  std::vector<uint8_t> local_;  // prefill's pool, or its host image (VRAM)
  std::vector<uint8_t> image_;  // what decode's buffer must hold
  uintptr_t decode_base_ = 0;
};

TEST_F(NixlNotificationRace, EveryNoteArrivesWhenBothAgentsLoadedEachOther) {
  const int n = rounds();
  const int stop_after = failed_rounds_allowed();
  const testing::TestResult& result = *testing::UnitTest::GetInstance()->current_test_info()->result();
  int completed = 0, failed = 0, played = 0;
  for (int r = 0; r < n && failed < stop_after; ++r, ++played) {
    const int before = result.total_part_count();
    round(r);
    if (result.total_part_count() == before) {
      ++completed;
    } else {
      ++failed;
    }
  }
  std::printf("%d of %d rounds without a lost note (%d failed, %d not played)\n", completed, n, failed, n - played);
  EXPECT_EQ(completed, n);
}

}  // namespace
