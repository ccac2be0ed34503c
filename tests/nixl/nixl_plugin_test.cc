// The FERRY NIXL plugin end to end: this process's nixlAgent against a
// nixl_agent_peer process, both with the FERRY backend loaded by NIXL's
// plugin manager (NIXL_PLUGIN_DIR), metadata exchanged as NIXL users do
// (getLocalMD, then loadRemoteMD). Random bytes at odd sizes and offsets;
// the bytes around every range are checked untouched. ctest runs every case
// over TCP and over the local transport.
#include <gtest/gtest.h>
#include <nixl.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/pattern.h"
#include "nixl/agent_process.h"
#include "nixl/nixl_test_data.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr size_t kBufferBytes = (64u << 20) + 64 * 1024;
constexpr uint64_t kTargetSeed = 0x7a26e7;
constexpr const char* kPeerTimeoutMs = "1000";

using ferry::test::hex;
using ferry::test::Range;
using ferry::test::unhex;

std::vector<Range> scattered(size_t count, size_t max_size, uint32_t seed) {
  return ferry::test::scattered(count, max_size, seed, kBufferBytes);
}

struct Notification {
  std::string agent;
  std::string message;
  uint64_t buffer_hash = 0;  // the target's whole buffer when it saw it
};

class NixlPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    peer_ = std::make_unique<ferry::test::AgentProcess>(
        NIXL_AGENT_PEER, std::vector<std::string>{"target", std::to_string(kBufferBytes),
                                                  std::string("peer_timeout_ms=") + kPeerTimeoutMs});
    ASSERT_TRUE(peer_->started());
    agent_ = std::make_unique<nixlAgent>("initiator", nixlAgentConfig(false));
    nixl_b_params_t params = {{"peer_timeout_ms", kPeerTimeoutMs}};
    ASSERT_EQ(agent_->createBackend("FERRY", params, backend_), NIXL_SUCCESS);
    local_.resize(kBufferBytes);
    ferry::core::fill_random(local_.data(), local_.size(), 0x10ca1);
    nixl_reg_dlist_t reg(DRAM_SEG);
    reg.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(local_.data()), local_.size(), 0, ""));
    ASSERT_EQ(agent_->registerMem(reg), NIXL_SUCCESS);

    auto md = peer_->ask("md");
    ASSERT_TRUE(md && md->rfind("md ", 0) == 0) << md.value_or("no answer");
    std::string remote_name;
    ASSERT_EQ(agent_->loadRemoteMD(unhex(md->substr(3)), remote_name), NIXL_SUCCESS);
    ASSERT_EQ(remote_name, "target");
    auto addr = peer_->ask("addr");
    ASSERT_TRUE(addr);
    std::istringstream in(addr->substr(5));
    size_t length = 0;
    in >> target_base_ >> length;
    ASSERT_EQ(length, kBufferBytes);
    ASSERT_EQ(peer_->ask("fill " + std::to_string(kTargetSeed)), "ok");
    target_image_.resize(kBufferBytes);
    ferry::core::fill_random(target_image_.data(), target_image_.size(), kTargetSeed);
  }

  // The target learns this agent's metadata too (for its genNotif).
  void introduce_to_target() {
    nixl_blob_t md;
    ASSERT_EQ(agent_->getLocalMD(md), NIXL_SUCCESS);
    ASSERT_EQ(peer_->ask("load " + hex(md)), "ok initiator");
  }

  nixl_status_t create(nixl_xfer_op_t op, const std::vector<Range>& ranges, const std::string* note,
                       nixlXferReqH*& request, size_t remote_base_shift = 0) {
    nixl_xfer_dlist_t local(DRAM_SEG), remote(DRAM_SEG);
    for (const Range& r : ranges) {
      local.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(local_.data()) + r.local, r.size, 0));
      remote.addDesc(nixlBasicDesc(target_base_ + remote_base_shift + r.remote, r.size, 0));
    }
    nixl_opt_args_t extra;
    if (note != nullptr) extra.notif = *note;
    return agent_->createXferReq(op, local, remote, "target", request, &extra);
  }

  // Posts and waits for the end (deadline `within`); the final status.
  nixl_status_t run(nixlXferReqH* request, std::chrono::milliseconds within = 30s) {
    nixl_status_t s = agent_->postXferReq(request);
    const auto deadline = Clock::now() + within;
    while (s == NIXL_IN_PROG && Clock::now() < deadline) {
      std::this_thread::sleep_for(100us);
      s = agent_->getXferStatus(request);
    }
    return s;
  }

  std::vector<Notification> target_notifs(size_t count, std::chrono::milliseconds within = 20s) {
    auto line = peer_->ask("notifs " + std::to_string(count) + " " + std::to_string(within.count()), within + 10s);
    std::vector<Notification> out;
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

  uint64_t target_hash() {
    auto line = peer_->ask("hash 0 " + std::to_string(kBufferBytes));
    return line ? std::stoull(line->substr(5)) : 0;
  }
  uint64_t image_hash() const { return ferry::core::fnv1a(target_image_.data(), target_image_.size()); }

  // Writes `ranges` with a notification and checks the target's whole
  // buffer: the written bytes, the untouched ones, and that the
  // notification came after the data.
  void write_and_check(const std::vector<Range>& ranges, const std::string& note) {
    nixlXferReqH* request = nullptr;
    ASSERT_EQ(create(NIXL_WRITE, ranges, &note, request), NIXL_SUCCESS);
    ASSERT_EQ(run(request), NIXL_SUCCESS);
    for (const Range& r : ranges) std::copy_n(local_.data() + r.local, r.size, target_image_.data() + r.remote);
    auto notes = target_notifs(1);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_EQ(notes[0].agent, "initiator");
    EXPECT_EQ(notes[0].message, note);
    EXPECT_EQ(notes[0].buffer_hash, image_hash()) << "the notification came before the data, or bytes differ";
    EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
  }

  void read_and_check(const std::vector<Range>& ranges, const std::string& note) {
    std::vector<uint8_t> expected = local_;
    for (const Range& r : ranges) std::copy_n(target_image_.data() + r.remote, r.size, expected.data() + r.local);
    nixlXferReqH* request = nullptr;
    ASSERT_EQ(create(NIXL_READ, ranges, &note, request), NIXL_SUCCESS);
    ASSERT_EQ(run(request), NIXL_SUCCESS);
    EXPECT_TRUE(local_ == expected) << "read bytes or their neighbours differ";
    auto notes = target_notifs(1);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_EQ(notes[0].message, note);
    EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
  }

  std::unique_ptr<ferry::test::AgentProcess> peer_;
  std::unique_ptr<nixlAgent> agent_;
  nixlBackendH* backend_ = nullptr;
  std::vector<uint8_t> local_;
  std::vector<uint8_t> target_image_;
  uintptr_t target_base_ = 0;
};

TEST_F(NixlPlugin, TheAgentFindsTheFerryBackendAndItsParameters) {
  std::vector<nixl_backend_t> plugins;
  ASSERT_EQ(agent_->getAvailPlugins(plugins), NIXL_SUCCESS);
  EXPECT_NE(std::find(plugins.begin(), plugins.end(), "FERRY"), plugins.end());
  nixl_mem_list_t mems;
  nixl_b_params_t params;
  ASSERT_EQ(agent_->getPluginParams("FERRY", mems, params), NIXL_SUCCESS);
  EXPECT_TRUE(params.contains("nics"));
  EXPECT_TRUE(params.contains("auth_token"));
  EXPECT_NE(std::find(mems.begin(), mems.end(), VRAM_SEG), mems.end());
}

TEST_F(NixlPlugin, AnUnknownParameterFailsTheBackend) {
  nixlAgent other("other", nixlAgentConfig(false));
  nixlBackendH* b = nullptr;
  EXPECT_NE(other.createBackend("FERRY", {{"stream", "4"}}, b), NIXL_SUCCESS);
  EXPECT_NE(other.createBackend("FERRY", {{"streams", "many"}}, b), NIXL_SUCCESS);
  EXPECT_EQ(other.createBackend("FERRY", {{"streams", "3"}}, b), NIXL_SUCCESS);
}

TEST_F(NixlPlugin, WritesOneByte) { write_and_check({{7, 11, 1}}, "one byte"); }

TEST_F(NixlPlugin, Writes64MiBAtOddOffsets) { write_and_check({{3, 5, (64u << 20) + 3}}, "big"); }

TEST_F(NixlPlugin, WritesSevenScatteredDescriptors) { write_and_check(scattered(7, 1u << 20, 7), "seven"); }

TEST_F(NixlPlugin, Writes256ScatteredDescriptorsAndReportsACost) {
  write_and_check(scattered(256, 16 * 1024, 256), "kv blocks");
  write_and_check(scattered(3, 8u << 20, 3), "then larger");
  nixlXferReqH* request = nullptr;
  ASSERT_EQ(create(NIXL_WRITE, scattered(256, 16 * 1024, 9), nullptr, request), NIXL_SUCCESS);
  std::chrono::microseconds duration{}, margin{};
  nixl_cost_t method{};
  ASSERT_EQ(agent_->estimateXferCost(request, duration, margin, method), NIXL_SUCCESS);
  EXPECT_GT(duration.count(), 0);
  EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
}

TEST_F(NixlPlugin, ReadsDescriptorListsAndNotifiesAfter) {
  read_and_check({{1, 2, 1}}, "read one");
  read_and_check(scattered(7, 1u << 20, 17), "read seven");
  read_and_check(scattered(256, 16 * 1024, 18), "read 256");
  read_and_check({{9, 13, (64u << 20) + 5}}, "read big");
}

TEST_F(NixlPlugin, ARequestCanBePostedAgain) {
  auto ranges = scattered(16, 4096, 21);
  nixlXferReqH* request = nullptr;
  const std::string note = "again";
  ASSERT_EQ(create(NIXL_WRITE, ranges, &note, request), NIXL_SUCCESS);
  for (int round = 0; round < 3; ++round) {
    ferry::core::fill_random(local_.data(), local_.size(), 100 + round);
    ASSERT_EQ(run(request), NIXL_SUCCESS);
    for (const Range& r : ranges) std::copy_n(local_.data() + r.local, r.size, target_image_.data() + r.remote);
    auto notes = target_notifs(1);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_EQ(notes[0].buffer_hash, image_hash()) << "round " << round;
  }
  EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
}

TEST_F(NixlPlugin, NotificationsGoBothWaysWithTheSendersName) {
  introduce_to_target();
  ASSERT_EQ(agent_->genNotif("target", "hello target"), NIXL_SUCCESS);
  auto notes = target_notifs(1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].agent, "initiator");
  EXPECT_EQ(notes[0].message, "hello target");

  std::string binary("\0\x01\xff tail", 8);
  ASSERT_EQ(peer_->ask("gennotif initiator " + hex(binary)), "ok");
  nixl_notifs_t got;
  const auto deadline = Clock::now() + 10s;
  while (got.empty() && Clock::now() < deadline) {
    ASSERT_EQ(agent_->getNotifs(got), NIXL_SUCCESS);
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got["target"].size(), 1u);
  EXPECT_EQ(got["target"][0], binary);
}

TEST_F(NixlPlugin, APeerCannotSpeakForAnAgentThatIsTalkingToTheTarget) {
  ASSERT_EQ(agent_->genNotif("target", "mine"), NIXL_SUCCESS);
  auto first = target_notifs(1);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first[0].agent, "initiator");
  // Another process that calls itself "initiator" too, with the target's
  // metadata, as any peer on the network could.
  ferry::test::AgentProcess impostor(NIXL_AGENT_PEER, {"initiator", "4096"});
  ASSERT_TRUE(impostor.started());
  auto md = peer_->ask("md");
  ASSERT_TRUE(md);
  ASSERT_EQ(impostor.ask("load " + md->substr(3)), "ok target");
  ASSERT_EQ(impostor.ask("gennotif target " + hex("free blocks 1-9")), "ok");
  EXPECT_TRUE(target_notifs(1, 2s).empty()) << "the target took a forged notification";
  // The real agent still speaks.
  ASSERT_EQ(agent_->genNotif("target", "still mine"), NIXL_SUCCESS);
  auto later = target_notifs(1);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].message, "still mine");
}

// The squatter speaks first: before the real "initiator" said a word, a peer
// calling itself "initiator" sends a forged "done" and a forged failure. The
// target has loaded the real initiator's metadata, so only the engine that
// metadata names speaks for that name: both forgeries are dropped, and the
// real agent's notes arrive.
TEST_F(NixlPlugin, ASquatterThatSpeaksFirstIsRefusedForALoadedAgent) {
  introduce_to_target();
  ferry::test::AgentProcess impostor(NIXL_AGENT_PEER, {"initiator", "4096"});
  ASSERT_TRUE(impostor.started());
  auto md = peer_->ask("md");
  ASSERT_TRUE(md);
  ASSERT_EQ(impostor.ask("load " + md->substr(3)), "ok target");
  ASSERT_EQ(impostor.ask("gennotif target " + hex("req-7 done")), "ok");
  ASSERT_EQ(impostor.ask("gennotif target " + hex("FERRY_XFER_FAILED:req-8")), "ok");
  EXPECT_TRUE(target_notifs(1, 1s).empty()) << "the target took a forged notification";
  ASSERT_EQ(agent_->genNotif("target", "mine"), NIXL_SUCCESS);
  auto later = target_notifs(1, 2s);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].agent, "initiator");
  EXPECT_EQ(later[0].message, "mine");
  write_and_check(scattered(5, 4096, 5), "real done");
  // The impostor goes on speaking; nothing of it gets through.
  ASSERT_EQ(impostor.ask("gennotif target " + hex("late forgery")), "ok");
  EXPECT_TRUE(target_notifs(1, 1s).empty()) << "the target took a forged notification";
}

// notif_senders=loaded: a note naming an agent whose metadata the target
// never loaded is dropped; once loaded, that agent's engine speaks.
TEST_F(NixlPlugin, OnlyLoadedAgentsSpeakWhenTheTargetAsksForIt) {
  ferry::test::AgentProcess strict(NIXL_AGENT_PEER, {"strict", "4096", "notif_senders=loaded"});
  ASSERT_TRUE(strict.started());
  auto md = strict.ask("md");
  ASSERT_TRUE(md);
  std::string name;
  ASSERT_EQ(agent_->loadRemoteMD(unhex(md->substr(3)), name), NIXL_SUCCESS);
  ASSERT_EQ(agent_->genNotif("strict", "unknown to it"), NIXL_SUCCESS);
  auto none = strict.ask("notifs 1 1000", 10s);
  EXPECT_EQ(none, "notifs 0");
  nixl_blob_t mine;
  ASSERT_EQ(agent_->getLocalMD(mine), NIXL_SUCCESS);
  ASSERT_EQ(strict.ask("load " + hex(mine)), "ok initiator");
  ASSERT_EQ(agent_->genNotif("strict", "known"), NIXL_SUCCESS);
  auto some = strict.ask("notifs 1 10000", 20s);
  ASSERT_TRUE(some);
  EXPECT_EQ(some->substr(0, some->find(' ', 8)), "notifs 1") << *some;
  EXPECT_NE(some->find("initiator:" + hex("known") + ":"), std::string::npos) << *some;
}

TEST_F(NixlPlugin, ATooLongNotificationIsRefused) {
  EXPECT_NE(agent_->genNotif("target", std::string(64 * 1024, 'x')), NIXL_SUCCESS);
  EXPECT_EQ(agent_->genNotif("target", std::string(32 * 1024, 'x')), NIXL_SUCCESS);
}

TEST_F(NixlPlugin, BadDescriptorsAreRefusedAndNothingIsWritten) {
  const uint64_t before = target_hash();
  nixlXferReqH* request = nullptr;
  // Past the end of the target's registration.
  EXPECT_NE(create(NIXL_WRITE, {{0, kBufferBytes - 10, 11}}, nullptr, request), NIXL_SUCCESS);
  // Before its start.
  EXPECT_NE(create(NIXL_WRITE, {{0, 0, 16}}, nullptr, request, static_cast<size_t>(-8)), NIXL_SUCCESS);
  // Local memory that is not registered.
  std::vector<uint8_t> stray(4096);
  nixl_xfer_dlist_t local(DRAM_SEG), remote(DRAM_SEG);
  local.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(stray.data()), stray.size(), 0));
  remote.addDesc(nixlBasicDesc(target_base_, stray.size(), 0));
  EXPECT_NE(agent_->createXferReq(NIXL_WRITE, local, remote, "target", request), NIXL_SUCCESS);
  // Length mismatch between the sides.
  nixl_xfer_dlist_t l2(DRAM_SEG), r2(DRAM_SEG);
  l2.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(local_.data()), 100, 0));
  r2.addDesc(nixlBasicDesc(target_base_, 99, 0));
  EXPECT_NE(agent_->createXferReq(NIXL_WRITE, l2, r2, "target", request), NIXL_SUCCESS);
  EXPECT_EQ(target_hash(), before);
  // The engine goes on working.
  write_and_check({{5, 6, 777}}, "still fine");
}

TEST_F(NixlPlugin, AWriteIntoDeregisteredMemoryFailsAndTheTargetIsToldSo) {
  ASSERT_EQ(peer_->ask("dereg"), "ok");
  nixlXferReqH* request = nullptr;
  const std::string note = "lease-7";
  ASSERT_EQ(create(NIXL_WRITE, scattered(5, 4096, 5), &note, request), NIXL_SUCCESS);
  EXPECT_LT(run(request), 0);
  auto notes = target_notifs(1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].agent, "initiator");
  EXPECT_EQ(notes[0].message, "FERRY_XFER_FAILED:lease-7");
  EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
}

TEST_F(NixlPlugin, AReadOfDeregisteredMemoryFailsAndTheTargetIsToldSo) {
  ASSERT_EQ(peer_->ask("dereg"), "ok");
  nixlXferReqH* request = nullptr;
  const std::string note = "lease-8";
  ASSERT_EQ(create(NIXL_READ, scattered(3, 4096, 6), &note, request), NIXL_SUCCESS);
  EXPECT_LT(run(request), 0);
  auto notes = target_notifs(1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].message, "FERRY_XFER_FAILED:lease-8");
  EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
}

// The target deregisters its buffer and registers the same memory again:
// metadata loaded before names the old registration, and a transfer made
// from it is refused before a byte moves; the new metadata works.
TEST_F(NixlPlugin, MemoryRegisteredAgainAtTheSameAddressRefusesTheOldMetadata) {
  ASSERT_EQ(peer_->ask("dereg"), "ok");
  ASSERT_EQ(peer_->ask("rereg"), "ok");
  const uint64_t before = target_hash();
  for (nixl_xfer_op_t op : {NIXL_WRITE, NIXL_READ}) {
    nixlXferReqH* request = nullptr;
    const std::string note = op == NIXL_WRITE ? "stale-write" : "stale-read";
    const std::vector<uint8_t> local_before = local_;
    if (create(op, scattered(5, 4096, 11), &note, request) == NIXL_SUCCESS) {
      EXPECT_LT(run(request), 0) << note << " with the old metadata succeeded";
      auto notes = target_notifs(1);
      ASSERT_EQ(notes.size(), 1u);
      EXPECT_EQ(notes[0].message, "FERRY_XFER_FAILED:" + note);
      EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
    }
    EXPECT_EQ(target_hash(), before) << note << " landed in the memory registered again";
    EXPECT_TRUE(local_ == local_before) << note << " delivered bytes";
  }
  auto md = peer_->ask("md");
  ASSERT_TRUE(md && md->rfind("md ", 0) == 0) << md.value_or("no answer");
  ASSERT_EQ(agent_->invalidateRemoteMD("target"), NIXL_SUCCESS);
  std::string remote_name;
  ASSERT_EQ(agent_->loadRemoteMD(unhex(md->substr(3)), remote_name), NIXL_SUCCESS);
  write_and_check(scattered(5, 4096, 12), "fresh");
  read_and_check(scattered(3, 4096, 13), "fresh read");
}

// A frozen or killed peer: the transfer's status turns to an error within
// the peer timeout (1 s here), never hangs.
TEST_F(NixlPlugin, AFrozenPeerFailsTheTransferWithinThePeerTimeout) {
  nixlXferReqH* request = nullptr;
  ASSERT_EQ(create(NIXL_WRITE, {{0, 0, 64u << 20}}, nullptr, request), NIXL_SUCCESS);
  ASSERT_TRUE(peer_->freeze());
  const auto start = Clock::now();
  nixl_status_t s = agent_->postXferReq(request);
  if (s == NIXL_IN_PROG) {
    nixl_status_t last = NIXL_IN_PROG;
    while (last == NIXL_IN_PROG && Clock::now() - start < 15s) {
      std::this_thread::sleep_for(1ms);
      last = agent_->getXferStatus(request);
    }
    s = last;
  }
  EXPECT_LT(s, 0);
  EXPECT_LT(Clock::now() - start, 5s) << "the error came past the peer timeout";
  EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
  peer_->signal(SIGKILL);
}

// releaseXferReq of a READ whose target froze mid-way returns within its
// bound, and nothing of the read lands after it returned, even once the
// target runs again: NIXL lets the application reuse the buffer at once.
TEST_F(NixlPlugin, NothingOfAReleasedReadLandsAfterTheReleaseReturned) {
  constexpr size_t kBig = 512u << 20;
  ferry::test::AgentProcess big(NIXL_AGENT_PEER, {"big", std::to_string(kBig), std::string("peer_timeout_ms=") + kPeerTimeoutMs});
  ASSERT_TRUE(big.started());
  auto md = big.ask("md");
  ASSERT_TRUE(md);
  std::string name;
  ASSERT_EQ(agent_->loadRemoteMD(unhex(md->substr(3)), name), NIXL_SUCCESS);
  auto addr = big.ask("addr");
  ASSERT_TRUE(addr);
  uintptr_t base = std::stoull(addr->substr(5, addr->find(' ', 5) - 5));
  ASSERT_EQ(big.ask("fill 99", 60s), "ok");
  std::vector<uint8_t> into(kBig, 0);
  nixl_reg_dlist_t reg(DRAM_SEG);
  reg.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(into.data()), into.size(), 0, ""));
  ASSERT_EQ(agent_->registerMem(reg), NIXL_SUCCESS);
  nixl_xfer_dlist_t local(DRAM_SEG), remote(DRAM_SEG);
  local.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(into.data()), kBig, 0));
  remote.addDesc(nixlBasicDesc(base, kBig, 0));
  nixlXferReqH* request = nullptr;
  ASSERT_EQ(agent_->createXferReq(NIXL_READ, local, remote, "big", request), NIXL_SUCCESS);
  // Frozen as soon as the first bytes land, while most of the read is to come.
  std::atomic<bool> landing{false};
  std::thread watcher([&] {
    const auto until = Clock::now() + 20s;
    while (Clock::now() < until && into[4096] == 0 && into[8192] == 0) {
    }
    landing = true;
    (void)big.freeze();
  });
  nixl_status_t s = agent_->postXferReq(request);
  watcher.join();
  ASSERT_TRUE(landing.load());
  if (s == NIXL_IN_PROG) s = agent_->getXferStatus(request);
  if (s != NIXL_IN_PROG) {
    big.signal(SIGCONT);
    GTEST_SKIP() << "the read ended (" << s << ") before its target froze; nothing to release mid-way";
  }
  const auto start = Clock::now();
  EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
  EXPECT_LT(Clock::now() - start, 4s) << "releaseXferReq waited on a frozen target";
  std::fill(into.begin(), into.end(), 0x5a);
  big.signal(SIGCONT);
  std::this_thread::sleep_for(1500ms);
  const size_t changed = static_cast<size_t>(std::count_if(into.begin(), into.end(), [](uint8_t b) { return b != 0x5a; }));
  EXPECT_EQ(changed, 0u) << changed << " bytes landed after releaseXferReq returned";
  EXPECT_EQ(agent_->deregisterMem(reg), NIXL_SUCCESS);
}

TEST_F(NixlPlugin, APeerKilledMidTransferFailsItWithinThePeerTimeout) {
  nixlXferReqH* request = nullptr;
  ASSERT_EQ(create(NIXL_READ, {{0, 0, 64u << 20}}, nullptr, request), NIXL_SUCCESS);
  ASSERT_TRUE(peer_->freeze());
  const auto start = Clock::now();
  nixl_status_t s = agent_->postXferReq(request);
  std::this_thread::sleep_for(100ms);
  peer_->signal(SIGKILL);
  while (s == NIXL_IN_PROG && Clock::now() - start < 15s) {
    std::this_thread::sleep_for(1ms);
    s = agent_->getXferStatus(request);
  }
  EXPECT_LT(s, 0);
  EXPECT_LT(Clock::now() - start, 5s) << "the error came past the peer timeout";
  EXPECT_EQ(agent_->releaseXferReq(request), NIXL_SUCCESS);
}

}  // namespace
