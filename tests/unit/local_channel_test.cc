// The local transport's pieces that need no peer process: the shared-memory
// message rings (order, wrap-around, full ring, wake-ups, a second mapping of
// the same memfd as the peer would have), the span codec, span slicing,
// cross-memory copies within this process, a copy's answer to a peer that
// gave up on the connection while it ran, and a side that closes its channel.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <random>
#include <thread>

#include "transport/local/gpu_sharing.h"

#include "process_holdings.h"
#include "transport/local/cross_memory.h"
#include "transport/local/local_copier.h"
#include "transport/local/shared_span.h"
#include "transport/local/shm_channel.h"

namespace ferry::local {
namespace {

// The peer's view: the same memfd mapped a second time (what pidfd_getfd
// gives the acceptor).
ShmChannel peer_of(const ShmChannel& c, uint64_t nonce) {
  auto p = ShmChannel::attach(::dup(c.fd()), nonce);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return std::move(p).value();
}

TEST(ShmChannel, MessagesArriveInOrderAcrossManyWrapArounds) {
  auto a = ShmChannel::create(4096, 42).value();
  ShmChannel b = peer_of(a, 42);
  std::mt19937_64 rng(7);
  std::deque<std::string> sent;
  std::string got;
  for (int i = 0; i < 5000; ++i) {
    std::string head(1 + rng() % 64, static_cast<char>('a' + i % 26));
    std::string body(rng() % 900, static_cast<char>(rng()));
    if (a.try_post(head, body)) {
      sent.push_back(head + body);
    } else {
      // Full: the consumer drains one and the post then fits.
      ASSERT_TRUE(b.receive(got).value());
      ASSERT_EQ(got, sent.front());
      sent.pop_front();
      --i;
    }
  }
  while (b.receive(got).value()) {
    ASSERT_FALSE(sent.empty());
    ASSERT_EQ(got, sent.front());
    sent.pop_front();
  }
  EXPECT_TRUE(sent.empty());
}

TEST(ShmChannel, BothDirectionsAreIndependent) {
  auto a = ShmChannel::create(1 << 16, 1).value();
  ShmChannel b = peer_of(a, 1);
  ASSERT_TRUE(a.try_post("to-b", ""));
  ASSERT_TRUE(b.try_post("to-a", "!"));
  std::string m;
  ASSERT_TRUE(b.receive(m).value());
  EXPECT_EQ(m, "to-b");
  EXPECT_FALSE(b.receive(m).value());
  ASSERT_TRUE(a.receive(m).value());
  EXPECT_EQ(m, "to-a!");
}

TEST(ShmChannel, FullRingRefusesInsteadOfOverwriting) {
  auto a = ShmChannel::create(4096, 3).value();
  ShmChannel b = peer_of(a, 3);
  int posted = 0;
  while (a.try_post(std::string(500, 'x'), "")) ++posted;
  EXPECT_GT(posted, 3);
  EXPECT_LT(posted, 9);
  std::string m;
  int read = 0;
  while (b.receive(m).value()) {
    EXPECT_EQ(m, std::string(500, 'x'));
    ++read;
  }
  EXPECT_EQ(read, posted);
}

TEST(ShmChannel, AttachRejectsAWrongNonce) {
  auto a = ShmChannel::create(4096, 99).value();
  auto b = ShmChannel::attach(::dup(a.fd()), 98);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kDataLoss);
}

// A reader that armed the channel is rung by the next post, and only then:
// a reader that polls costs the producer nothing, and arming finds a
// message that came first (the reader then reads it instead of sleeping).
TEST(ShmChannel, APostRingsOnlyAnArmedReader) {
  auto a = ShmChannel::create(1 << 16, 5).value();
  ShmChannel b = peer_of(a, 5);
  bool ring = true;
  ASSERT_TRUE(a.try_post("polled", "", &ring));
  EXPECT_FALSE(ring) << "a reader that polls was rung";
  EXPECT_FALSE(b.arm()) << "arming missed a message already posted";
  std::string m;
  ASSERT_TRUE(b.receive(m).value());
  EXPECT_EQ(m, "polled");
  EXPECT_TRUE(b.arm());
  ASSERT_TRUE(a.try_post("armed", "", &ring));
  EXPECT_TRUE(ring) << "an armed reader was not rung";
  ASSERT_TRUE(a.try_post("again", "", &ring));
  EXPECT_TRUE(ring) << "the reader is armed until it disarms";
  b.disarm();
  ASSERT_TRUE(a.try_post("disarmed", "", &ring));
  EXPECT_FALSE(ring);
  // The other direction has its own flag.
  EXPECT_TRUE(a.arm());
  ASSERT_TRUE(b.try_post("to a", "", &ring));
  EXPECT_TRUE(ring);
  ASSERT_TRUE(a.try_post("to b", "", &ring));
  EXPECT_FALSE(ring);
}

// A channel of the previous version (woken by a futex) is refused with a
// message that says so.
TEST(ShmChannel, AttachRefusesAnOlderVersionByName) {
  auto a = ShmChannel::create(4096, 9).value();
  const uint64_t v1 = 0x314d485359524546ull;  // "FERYSHM1"
  ASSERT_EQ(::pwrite(a.fd(), &v1, sizeof(v1), 0), static_cast<ssize_t>(sizeof(v1)));
  auto b = ShmChannel::attach(::dup(a.fd()), 9);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("older ferry"), std::string::npos) << b.status().to_string();
}

TEST(ShmChannel, HeartbeatsAreSeenByThePeerOnly) {
  auto a = ShmChannel::create(4096, 8).value();
  ShmChannel b = peer_of(a, 8);
  EXPECT_EQ(b.peer_beats(), 0u);
  a.beat();
  a.beat();
  EXPECT_EQ(b.peer_beats(), 2u);
  EXPECT_EQ(a.peer_beats(), 0u);
}

TEST(SharedSpan, RoundTripsAndRejectsMalformedLists) {
  SharedSpan host;
  host.address = 0x1234;
  host.length = 77;
  SharedSpan gpu;
  gpu.kind = MemoryKind::kCuda;
  gpu.handle_type = HandleType::kPosixFd;
  gpu.device = 1;
  gpu.alloc_base = 0x7000;
  gpu.alloc_size = 0x2000;
  gpu.address = 0x7100;
  gpu.length = 0x100;
  gpu.fd = 41;
  gpu.alloc_id = 0x0102030405060708;
  gpu.pci = {'0', '0', '0', '0', ':', '1', '8', ':', '0', '0', '.', '0'};
  gpu.ipc[5] = 9;
  std::string bytes;
  encode_spans({host, gpu}, bytes);
  ASSERT_EQ(bytes.size(), 2 * kSharedSpanBytes);
  auto back = decode_spans(bytes).value();
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].address, 0x1234u);
  EXPECT_EQ(back[0].length, 77u);
  EXPECT_FALSE(back[0].gpu());
  EXPECT_EQ(back[1].handle_type, HandleType::kPosixFd);
  EXPECT_EQ(back[1].fd, 41);
  EXPECT_EQ(back[1].alloc_id, gpu.alloc_id);
  EXPECT_EQ(back[1].device, 1);
  EXPECT_EQ(back[1].pci, gpu.pci);
  EXPECT_EQ(back[1].ipc, gpu.ipc);

  EXPECT_EQ(decode_spans(bytes.substr(1)).status().code(), Code::kDataLoss);
  std::string outside;
  gpu.length = 0x2000;  // runs past its allocation
  encode_spans({gpu}, outside);
  EXPECT_EQ(decode_spans(outside).status().code(), Code::kDataLoss);
  std::string kind = bytes.substr(0, kSharedSpanBytes);
  kind[0] = 9;
  EXPECT_EQ(decode_spans(kind).status().code(), Code::kDataLoss);
  // Lengths chosen so that address + length wraps past 2^64: refused, not
  // taken for a short span inside the allocation.
  gpu.address = 0x7ff0;
  gpu.length = ~uint64_t{0} - 7;
  std::string wrapping;
  encode_spans({gpu}, wrapping);
  EXPECT_EQ(decode_spans(wrapping).status().code(), Code::kDataLoss);
  host.address = ~uint64_t{0} - 100;
  host.length = 200;
  std::string host_wrapping;
  encode_spans({host}, host_wrapping);
  EXPECT_EQ(decode_spans(host_wrapping).status().code(), Code::kDataLoss);
}

TEST(SharedSpan, SlicingKeepsAllocationsAndMovesAddresses) {
  std::vector<SharedSpan> spans(3);
  for (int i = 0; i < 3; ++i) {
    spans[i].address = 1000 * (i + 1);
    spans[i].length = 100;
  }
  auto s = slice_spans(spans, 150, 120);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].address, 2050u);
  EXPECT_EQ(s[0].length, 50u);
  EXPECT_EQ(s[1].address, 3000u);
  EXPECT_EQ(s[1].length, 70u);
}

TEST(CrossMemory, CopiesBetweenIovecListsOfDifferentShapes) {
  // This process as its own peer: the kernel path is the same.
  std::vector<uint8_t> src(1 << 20), dst(1 << 20, 0);
  std::mt19937 rng(3);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  std::vector<iovec> local, remote;
  for (size_t at = 0; at < src.size(); at += 4099) local.push_back({&src[at], std::min<size_t>(4099, src.size() - at)});
  for (size_t at = 0; at < dst.size(); at += 65537)
    remote.push_back({&dst[at], std::min<size_t>(65537, dst.size() - at)});
  ASSERT_GT(local.size(), 200u);  // more than one call's worth is fine too
  ASSERT_TRUE(cross_write(::getpid(), local, remote).ok());
  EXPECT_EQ(src, dst);
  std::vector<uint8_t> back(src.size(), 0);
  std::vector<iovec> one{{back.data(), back.size()}};
  ASSERT_TRUE(cross_read(::getpid(), one, remote).ok());
  EXPECT_EQ(back, src);
}

TEST(ShmChannel, GivingUpIsSeenByThePeerOnly) {
  auto a = ShmChannel::create(4096, 5).value();
  ShmChannel b = peer_of(a, 5);
  EXPECT_FALSE(a.peer_gave_up());
  EXPECT_FALSE(b.peer_gave_up());
  b.give_up();
  EXPECT_TRUE(a.peer_gave_up());
  EXPECT_FALSE(b.peer_gave_up()) << "a side reads the other's record, never its own";
}

// Closing a side records that it gave up, unmaps its channel and closes its
// descriptor; its later calls touch nothing, and the peer still reads what
// was posted before.
TEST(ShmChannel, ClosingGivesUpUnmapsAndLaterCallsTouchNothing) {
  auto a = ShmChannel::create(4096, 6).value();
  ShmChannel b = peer_of(a, 6);
  ASSERT_TRUE(a.try_post("before", ""));
  const size_t maps = ferry::testing::mappings_of("memfd:ferry-local");
  ASSERT_TRUE(a.close(std::chrono::steady_clock::now() + std::chrono::seconds(1)));
  EXPECT_TRUE(a.closed());
  EXPECT_EQ(a.fd(), -1);
  EXPECT_EQ(ferry::testing::mappings_of("memfd:ferry-local"), maps - 1);
  EXPECT_TRUE(b.peer_gave_up()) << "a side that closed did not record that it gave up";
  EXPECT_FALSE(a.try_post("after", ""));
  a.beat();
  a.give_up();
  EXPECT_EQ(a.peer_beats(), 0u);
  EXPECT_TRUE(a.peer_gave_up()) << "a copy that ends after the close must not be trusted";
  std::string m;
  ASSERT_TRUE(b.receive(m).value());
  EXPECT_EQ(m, "before");
  EXPECT_FALSE(b.receive(m).value());
  EXPECT_TRUE(a.close(std::chrono::steady_clock::now() + std::chrono::seconds(1)));
}

// Host memory described as the peer would describe it (this process is the
// peer: the kernel path is the same).
std::vector<SharedSpan> far_spans(std::vector<uint8_t>& mem) {
  SharedSpan s;
  s.address = reinterpret_cast<uint64_t>(mem.data());
  s.length = mem.size();
  return {s};
}

core::SegmentList near_list(std::vector<uint8_t>& mem) {
  auto entry = std::make_shared<core::RegionEntry>();
  entry->region = Region{1, mem.data(), mem.size(), MemoryKind::kHost, -1};
  core::SegmentList list;
  list.add(core::MemorySpan{entry, mem.data(), mem.size()});
  return list;
}

// A peer check that answers OK `ok_calls` times, then kPeerLost.
LocalCopier::PeerCheck gives_up_after(std::shared_ptr<std::atomic<int>> calls, int ok_calls) {
  return [calls, ok_calls] {
    return calls->fetch_add(1) < ok_calls ? Status() : Status(Code::kPeerLost, "the peer gave up");
  };
}

TEST(LocalCopier, StopsBeforeTheNextPieceOnceThePeerGaveUp) {
  // 12 MiB + 5: one thread, a first piece of 8 MiB and a second of the rest.
  const size_t size = (12u << 20) + 5;
  std::vector<uint8_t> src(size), dst(size, 0xEE);
  std::mt19937 rng(9);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  GpuImports imports;
  auto calls = std::make_shared<std::atomic<int>>(0);
  // Calls: before the copy, before piece 0, before piece 1 (gave up).
  LocalCopier copier(imports, 1, ::getpid(), gives_up_after(calls, 2));
  int completions = 0;
  Status s = copier.start(near_list(src), far_spans(dst), size, /*to_remote=*/true,
                          [&](const Status&) { ++completions; });
  EXPECT_EQ(s.code(), Code::kPeerLost) << s.to_string();
  EXPECT_EQ(completions, 0) << "start's own error is the only answer";
  const size_t piece = 8u << 20;
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), piece), 0) << "the first piece was copied before the peer gave up";
  EXPECT_TRUE(std::all_of(dst.begin() + piece, dst.end(), [](uint8_t b) { return b == 0xEE; }))
      << "nothing may be written into the peer's memory once it gave up";
}

TEST(LocalCopier, ACopyThatEndsAfterThePeerGaveUpFails) {
  const size_t size = (1u << 20) + 3;
  std::vector<uint8_t> src(size, 7), dst(size, 0);
  GpuImports imports;
  auto calls = std::make_shared<std::atomic<int>>(0);
  // Calls: before the copy, before its one piece, then once it has ended
  // (gave up meanwhile: the bytes read may be the peer's reused memory).
  LocalCopier copier(imports, 1, ::getpid(), gives_up_after(calls, 2));
  std::vector<Status> completions;
  Status s = copier.start(near_list(dst), far_spans(src), size, /*to_remote=*/false,
                          [&](const Status& st) { completions.push_back(st); });
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(completions.size(), 1u);
  EXPECT_EQ(completions[0].code(), Code::kPeerLost) << completions[0].to_string();
  // A peer that stands by the connection: the same copy succeeds.
  LocalCopier steady(imports, 1, ::getpid(), [] { return Status(); });
  completions.clear();
  ASSERT_TRUE(steady.start(near_list(dst), far_spans(src), size, false,
                           [&](const Status& st) { completions.push_back(st); })
                  .ok());
  ASSERT_EQ(completions.size(), 1u);
  EXPECT_TRUE(completions[0].ok()) << completions[0].to_string();
  EXPECT_EQ(dst, src);
  // One that gave up before the copy: refused at once.
  LocalCopier gone(imports, 1, ::getpid(), gives_up_after(std::make_shared<std::atomic<int>>(0), 0));
  EXPECT_EQ(gone.start(near_list(dst), far_spans(src), size, false, [](const Status&) {}).code(), Code::kPeerLost);
}

TEST(CrossMemory, ADeadPeerIsPeerLost) {
  pid_t child = ::fork();
  if (child == 0) _exit(0);
  ::waitpid(child, nullptr, 0);
  uint8_t b = 0;
  std::vector<iovec> l{{&b, 1}}, r{{&b, 1}};
  Status s = cross_write(child, l, r);
  EXPECT_EQ(s.code(), Code::kPeerLost) << s.to_string();
  EXPECT_NE(s.message().find(std::to_string(child)), std::string::npos);
  EXPECT_EQ(fetch_peer_fd(child, 0).status().code(), Code::kPeerLost);
}

// A peer that writes garbage into the ring: a length past the ring, or past
// what it published, is refused with kDataLoss and nothing is read.
TEST(ShmChannel, GarbageLengthsAreRefusedNotRead) {
  for (uint32_t bad : {0x7ffffff0u, 4000u, 13u}) {
    auto a = ShmChannel::create(4096, 11).value();
    ShmChannel b = peer_of(a, 11);
    ASSERT_TRUE(a.try_post("hello", ""));
    // The peer's mapping of the same memory: find the message, rewrite its length.
    size_t bytes = static_cast<size_t>(::lseek(a.fd(), 0, SEEK_END));
    auto* m = static_cast<uint8_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd(), 0));
    ASSERT_NE(m, MAP_FAILED);
    uint8_t* at = static_cast<uint8_t*>(::memmem(m, bytes, "hello", 5));
    ASSERT_NE(at, nullptr);
    std::memcpy(at - 4, &bad, 4);
    std::string got;
    Result<bool> r = b.receive(got);
    ASSERT_FALSE(r.ok()) << "length " << bad;
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
    EXPECT_NE(r.status().message().find("garbage"), std::string::npos) << r.status().to_string();
    ::munmap(m, bytes);
  }
}

// fits() promises room once the ring drains, wherever its head stands: a
// message never straddles the end, so that is at most half the ring.
TEST(ShmChannel, OnlyMessagesOfAtMostHalfTheRingFit) {
  auto a = ShmChannel::create(4096, 12).value();
  ShmChannel b = peer_of(a, 12);
  EXPECT_TRUE(a.fits(2040));
  EXPECT_FALSE(a.fits(2100));
  EXPECT_FALSE(a.try_post(std::string(5000, 'x'), ""));
  // With the head moved to 1,512 neither stretch of the empty ring holds
  // 2,600 bytes; half the ring always has room.
  ASSERT_TRUE(a.try_post(std::string(1500, 'y'), ""));
  std::string m;
  ASSERT_TRUE(b.receive(m).value());
  EXPECT_FALSE(a.try_post(std::string(2600, 'z'), ""));  // what fits() refuses can wait for ever
  EXPECT_TRUE(a.try_post(std::string(2040, 'w'), ""));   // what it accepts goes
}

}  // namespace
}  // namespace ferry::local
