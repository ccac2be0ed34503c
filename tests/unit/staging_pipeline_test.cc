// Staging pipelines with host memory standing in for device memory: the
// transmit side's bytes are the source's once its copies are done; the
// receive side lands frames through slots (pieces larger than a slot too),
// runs completions in arrival order and only after the copies finished, and
// never leaves a completion waiting for the next frame.
#include "transport/tcp/staging_pipeline.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <thread>
#include <vector>

#include "gpu/staging_kernel.h"
#include "loopback_tcp_pair.h"
#include "platform/socket.h"
#include "testing/random_data.h"

namespace ferry::tcp {
namespace {

using namespace std::chrono_literals;

using testing::random_bytes;

// Copies happen only when the test says so: complete(t) runs every copy
// fenced by tickets up to t.
class ManualCopier final : public Copier {
 public:
  Result<void*> alloc_host(int, size_t bytes) override { return std::malloc(bytes); }
  void free_host(void* p, size_t) override { std::free(p); }
  Status copy(int, void* dst, const void* src, size_t n) override {
    if (++copies_ == fail_copy_) return Status(Code::kInternal, "copy refused by the test");
    queued_.push_back({dst, src, n, 0});
    return Status();
  }
  Result<uint64_t> fence() override {
    if (++fences_ == fail_fence_) return Status(Code::kInternal, "fence refused by the test");
    queued_.push_back({nullptr, nullptr, 0, ++issued_});
    return issued_;
  }
  Status sync() override {
    while (!queued_.empty()) {
      Job j = queued_.front();
      queued_.pop_front();
      if (j.ticket == 0) std::memcpy(j.dst, j.src, j.n);
    }
    completed_ = issued_;
    return Status();
  }
  Result<bool> done(uint64_t t) override { return completed_ >= t; }
  Status wait(uint64_t t) override {
    complete(t);
    return Status();
  }
  void complete(uint64_t t) {
    while (!queued_.empty() && completed_ < t) {
      Job j = queued_.front();
      queued_.pop_front();
      if (j.ticket != 0) {
        completed_ = j.ticket;
      } else {
        std::memcpy(j.dst, j.src, j.n);
      }
    }
  }
  uint64_t issued() const { return issued_; }
  // Copies queued and not yet run.
  size_t unrun() const {
    size_t n = 0;
    for (const Job& j : queued_) n += j.ticket == 0;
    return n;
  }
  // The n-th copy (from 1) fails to queue.
  void fail_copy(int n) { fail_copy_ = n; }
  // The n-th fence (from 1) fails.
  void fail_fence(int n) { fail_fence_ = n; }

 private:
  struct Job {
    void* dst;
    const void* src;
    size_t n;
    uint64_t ticket;
  };
  std::deque<Job> queued_;
  uint64_t issued_ = 0, completed_ = 0;
  int copies_ = 0, fail_copy_ = 0, fences_ = 0, fail_fence_ = 0;
};

struct SocketPair {
  int a = -1, b = -1;
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~SocketPair() {
    ::close(a);
    ::close(b);
  }
};

TEST(TxStager, StagedChunkCarriesTheSourceBytesOnceItsCopiesAreDone) {
  auto owned = std::make_unique<ManualCopier>();
  ManualCopier* copier = owned.get();
  TxStager tx(std::move(owned), 64 * 1024, 2);
  auto host = random_bytes(1001, 1);
  auto dev1 = random_bytes(30001, 2);
  auto dev2 = random_bytes(7, 3);
  std::vector<Piece> pieces = {
      {dev1.data(), dev1.size(), 0, true}, {host.data(), host.size(), -1, false}, {dev2.data(), dev2.size(), 0, true}};
  TxStager::Staged s;
  ASSERT_TRUE(tx.stage(pieces, s).ok());
  ASSERT_EQ(s.iov.size(), 3u);
  EXPECT_EQ(s.iov[1].iov_base, host.data());  // host bytes are never staged
  EXPECT_NE(s.iov[0].iov_base, dev1.data());
  EXPECT_NE(std::memcmp(s.iov[0].iov_base, dev1.data(), dev1.size()), 0);  // not copied yet
  ASSERT_TRUE(tx.wait(s).ok());
  std::vector<uint8_t> sent, expected;
  for (const auto& v : s.iov) {
    auto* p = static_cast<uint8_t*>(v.iov_base);
    sent.insert(sent.end(), p, p + v.iov_len);
  }
  for (auto* v : {&dev1, &host, &dev2}) expected.insert(expected.end(), v->begin(), v->end());
  EXPECT_EQ(sent, expected);
  tx.release(s);
  EXPECT_GE(copier->issued(), 1u);
}

// A staged transfer gives every path two chunks when a slot each would leave
// paths idle (a batch of blocks one); never more than a slot, never under
// 64 KiB (or the slot), in whole pages.
TEST(StagedChunkBytes, EveryPathGetsTwoChunksWithinLimits) {
  constexpr uint64_t kSlot = 1 << 20;
  EXPECT_EQ(staged_chunk_bytes(256ull << 20, 16, kSlot), kSlot);      // plenty: whole slots
  EXPECT_EQ(staged_chunk_bytes(16ull << 20, 16, kSlot), 512u << 10);  // 32 chunks for 16 paths
  EXPECT_EQ(staged_chunk_bytes(1ull << 20, 4, kSlot), 128u << 10);
  EXPECT_EQ(staged_chunk_bytes(1ull << 20, 1, kSlot), 512u << 10);
  EXPECT_EQ(staged_chunk_bytes(1ull << 20, 16, kSlot), kMinStagedChunk);  // floor
  EXPECT_EQ(staged_chunk_bytes(100, 4, kSlot), kMinStagedChunk);
  EXPECT_EQ(staged_chunk_bytes(1000001, 3, kSlot), 167936u);            // 1000001 / 6 rounded up to 4 KiB
  EXPECT_EQ(staged_chunk_bytes(1ull << 20, 2, 16 * 1024), 16u * 1024);  // slots below the floor win
  EXPECT_EQ(staged_chunk_bytes(1ull << 20, 0, kSlot), 512u << 10);      // no paths counted: as one
  // A batch of blocks: one chunk a path.
  EXPECT_EQ(staged_chunk_bytes(4ull << 20, 16, kSlot, 1), 256u << 10);
  EXPECT_EQ(staged_chunk_bytes(64ull << 20, 16, kSlot, 1), kSlot);
  EXPECT_EQ(staged_chunk_bytes(256u << 10, 16, kSlot, 1), kMinStagedChunk);
}

// The copy kernel moves 16 bytes a thread: anything else goes to the engines.
TEST(StagingKernels, FitOnlyWhereAddressesAndSizeAreMultiplesOf16) {
  alignas(64) static uint8_t a[4096], b[4096];
  EXPECT_TRUE(platform::StagingKernels::fits(a, b, 4096));
  EXPECT_TRUE(platform::StagingKernels::fits(a + 16, b + 32, 1024));
  EXPECT_FALSE(platform::StagingKernels::fits(a + 1, b, 1024));
  EXPECT_FALSE(platform::StagingKernels::fits(a, b + 8, 1024));
  EXPECT_FALSE(platform::StagingKernels::fits(a, b, 1000));
}

// A lending stager lends the pages of a chunk that fills its slot, which
// then stays held until the peer confirms that chunk; a chunk smaller than
// its slot is copied into the socket and its slot comes free at once (a
// short transfer would finish behind the confirmations). Either way the
// bytes arrive intact.
TEST(TxStager, LendsOnlyChunksThatFillTheirSlot) {
  testing::LoopbackTcpPair tcp;
  ASSERT_GE(tcp.b, 0);
  constexpr size_t kSlot = 64 * 1024;
  auto src = random_bytes(kSlot, 9);
  TxStager tx(make_host_copier(), kSlot, 1, /*lend=*/true);  // two slots
  std::vector<uint8_t> expected;
  auto send = [&](size_t n, uint64_t seq, bool lent) {
    std::vector<Piece> pieces = {{src.data(), n, 0, true}};
    TxStager::Staged s;
    ASSERT_TRUE(tx.stage(pieces, s).ok());
    ASSERT_TRUE(tx.wait(s).ok());
    if (lent && !tx.lends(s)) GTEST_SKIP() << "this host lends no pages (vmsplice refused)";
    EXPECT_EQ(tx.lends(s), lent) << n << " bytes in a slot of " << kSlot;
    char head[8] = {'c', 'h', 'u', 'n', 'k', static_cast<char>('0' + seq), '\n', '\n'};
    std::vector<struct iovec> iov = {{head, sizeof head}};
    ASSERT_TRUE(tx.send(tcp.a, iov, s, seq).ok());
    expected.insert(expected.end(), head, head + sizeof head);
    expected.insert(expected.end(), src.begin(), src.begin() + static_cast<long>(n));
  };
  ASSERT_NO_FATAL_FAILURE(send(kSlot - 4096, 1, false));
  EXPECT_EQ(tx.slot_after(), 0u) << "a copied chunk's slot is free at once";
  ASSERT_NO_FATAL_FAILURE(send(kSlot, 2, true));
  if (::testing::Test::IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(send(kSlot - 1, 3, false));
  // The next slot in turn is the one lent to chunk 2.
  EXPECT_EQ(tx.slot_after(), 2u);
  tx.confirmed(1);
  EXPECT_EQ(tx.slot_after(), 2u);
  tx.confirmed(2);
  EXPECT_EQ(tx.slot_after(), 0u);
  std::vector<uint8_t> got(expected.size());
  ASSERT_TRUE(platform::recv_exact(tcp.b, got.data(), got.size()).ok());
  EXPECT_EQ(got, expected);
}

TEST(TxStager, RefusesMoreThanASlotAndMoreThanDepthChunks) {
  // Outlives the stager: its destructor drains copies that read it.
  auto dev = random_bytes(8192, 4);
  TxStager tx(std::make_unique<ManualCopier>(), 4096, 2);
  std::vector<Piece> big = {{dev.data(), 4097, 0, true}};
  TxStager::Staged s;
  EXPECT_EQ(tx.stage(big, s).code(), Code::kInternal);
  std::vector<Piece> ok = {{dev.data(), 4096, 0, true}};
  TxStager::Staged a, b, c;
  ASSERT_TRUE(tx.stage(ok, a).ok());
  ASSERT_TRUE(tx.stage(ok, b).ok());
  EXPECT_EQ(tx.stage(ok, c).code(), Code::kInternal);  // both slots held
  tx.release(a);
  EXPECT_TRUE(tx.stage(ok, c).ok());
  EXPECT_EQ(tx.ring().allocated(), 2);
}

TEST(RxStager, LandsThroughSlotsAndCompletesInOrderOnlyAfterTheCopies) {
  SocketPair sp;
  auto owned = std::make_unique<ManualCopier>();
  ManualCopier* copier = owned.get();
  constexpr size_t kSlot = 4096;
  RxStager rx(std::move(owned), kSlot, 8);
  // Frame 1: a staged piece of 3 slots and a bit, then a host piece.
  auto f1 = random_bytes(3 * kSlot + 123 + 555, 5);
  // Frame 2: staged, 17 bytes.
  auto f2 = random_bytes(17, 6);
  ASSERT_TRUE(platform::send_all_by(sp.a, f1.data(), f1.size(), Clock::now() + 5s).ok());
  ASSERT_TRUE(platform::send_all_by(sp.a, f2.data(), f2.size(), Clock::now() + 5s).ok());
  std::vector<uint8_t> dev1(3 * kSlot + 123, 0), host1(555, 0), dev2(17, 0);
  std::vector<int> order;
  std::vector<Piece> p1 = {{dev1.data(), dev1.size(), 0, true}, {host1.data(), host1.size(), -1, false}};
  ASSERT_TRUE(rx.receive(sp.b, p1, [&] {
                  order.push_back(1);
                  // The bytes are in place when the completion runs.
                  EXPECT_EQ(0, std::memcmp(dev1.data(), f1.data(), dev1.size()));
                  return Status();
                }).ok());
  EXPECT_EQ(0, std::memcmp(host1.data(), f1.data() + dev1.size(), host1.size()));  // host pieces land at once
  std::vector<Piece> p2 = {{dev2.data(), dev2.size(), 0, true}};
  ASSERT_TRUE(rx.receive(sp.b, p2, [&] {
                  order.push_back(2);
                  EXPECT_EQ(0, std::memcmp(dev2.data(), f2.data(), dev2.size()));
                  return Status();
                }).ok());
  // A frame without copies (host memory) queues behind the staged ones.
  ASSERT_TRUE(rx.then([&] {
                  order.push_back(3);
                  return Status();
                }).ok());
  EXPECT_TRUE(order.empty());
  EXPECT_EQ(rx.entries(), 3u);
  ASSERT_TRUE(rx.retire(false).ok());
  EXPECT_TRUE(order.empty());              // nothing copied yet
  copier->complete(copier->issued() - 1);  // frame 1's copies done, frame 2's not
  ASSERT_TRUE(rx.retire(false).ok());
  EXPECT_EQ(order, (std::vector<int>{1}));
  // Nothing to read: before_read waits for the rest rather than block on the socket.
  ASSERT_TRUE(rx.before_read(sp.b).ok());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(rx.idle());
  // With nothing in flight, a completion runs at once.
  ASSERT_TRUE(rx.then([&] {
                  order.push_back(4);
                  return Status();
                }).ok());
  EXPECT_EQ(order.back(), 4);
}

TEST(RxStager, ManyFramesThroughFewSlotsWithAsynchronousCopies) {
  SocketPair sp;
  constexpr size_t kSlot = 8192;
  RxStager rx(make_host_copier(50us), kSlot, 2);
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint8_t>> frames;
  for (int i = 0; i < 40; ++i) frames.push_back(random_bytes(1 + rng() % (3 * kSlot), 100 + i));
  std::thread writer([&] {
    for (auto& f : frames) ASSERT_TRUE(platform::send_all_by(sp.a, f.data(), f.size(), Clock::now() + 10s).ok());
  });
  std::vector<std::vector<uint8_t>> dest;
  dest.reserve(frames.size());
  int completed = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    ASSERT_TRUE(rx.before_read(sp.b).ok());
    dest.emplace_back(frames[i].size(), 0);
    // Odd split: a host head, then the rest staged.
    size_t head = frames[i].size() / 3;
    std::vector<Piece> p = {{dest[i].data(), head, -1, false},
                            {dest[i].data() + head, frames[i].size() - head, 0, true}};
    ASSERT_TRUE(rx.receive(sp.b, p, [&, i] {
                    EXPECT_EQ(static_cast<size_t>(completed), i) << "out of order";
                    EXPECT_EQ(dest[i], frames[i]) << "frame " << i << " completed before its bytes landed";
                    ++completed;
                    return Status();
                  }).ok());
    EXPECT_LE(rx.ring().allocated(), 2);
  }
  ASSERT_TRUE(rx.retire(true).ok());
  writer.join();
  EXPECT_EQ(completed, 40);
}

// A chunk whose second piece cannot be queued: the first piece's copy, which
// reads the source region and writes the slot, ends before stage() returns
// (the caller then lets the region go and the slot is reused).
TEST(TxStager, AFailedPieceWaitsForTheCopiesQueuedBeforeIt) {
  auto owned = std::make_unique<ManualCopier>();
  ManualCopier* copier = owned.get();
  copier->fail_copy(2);
  TxStager tx(std::move(owned), 1 << 16, 2);
  auto a = random_bytes(4096, 31), b = random_bytes(100, 32);
  std::vector<Piece> pieces = {{a.data(), a.size(), 0, true}, {b.data(), b.size(), 0, true}};
  TxStager::Staged s;
  Status st = tx.stage(pieces, s);
  EXPECT_EQ(st.code(), Code::kInternal);
  EXPECT_EQ(copier->unrun(), 0u) << "a copy from the source was still queued when stage() gave up";
  EXPECT_EQ(s.slot, nullptr);
}

// A chunk whose copies were queued but could not be fenced: nothing would
// tell when they end, so stage() waits for them before it gives the slot
// back (the next chunk would be copied into it while they still run).
TEST(TxStager, AFailedFenceWaitsForTheChunksCopies) {
  auto owned = std::make_unique<ManualCopier>();
  ManualCopier* copier = owned.get();
  copier->fail_fence(1);
  TxStager tx(std::move(owned), 1 << 16, 1);
  auto a = random_bytes(4096, 34), b = random_bytes(333, 35);
  std::vector<Piece> pieces = {{a.data(), a.size(), 0, true}, {b.data(), b.size(), 0, true}};
  TxStager::Staged s;
  Status st = tx.stage(pieces, s);
  EXPECT_EQ(st.code(), Code::kInternal);
  EXPECT_EQ(copier->unrun(), 0u) << "stage() gave the slot back with unfenced copies into it still queued";
  EXPECT_EQ(s.slot, nullptr);
  // The slot serves the next chunk, whose bytes are its own.
  ASSERT_TRUE(tx.stage(std::vector<Piece>{{b.data(), b.size(), 0, true}}, s).ok());
  ASSERT_TRUE(tx.wait(s).ok());
  EXPECT_EQ(std::memcmp(s.iov[0].iov_base, b.data(), b.size()), 0);
  tx.release(s);
}

// The receive side's copy out of a slot that could not be fenced ends before
// the frame gives up (its destination is let go and the slot reused).
TEST(RxStager, AFailedFenceLandsTheSlotsCopyBeforeGivingUp) {
  SocketPair sp;
  auto owned = std::make_unique<ManualCopier>();
  ManualCopier* copier = owned.get();
  copier->fail_fence(2);
  constexpr size_t kSlot = 8 * 1024;
  RxStager rx(std::move(owned), kSlot, 2);
  auto sent = random_bytes(3 * kSlot - 5, 36);
  ASSERT_TRUE(platform::send_all_by(sp.a, sent.data(), sent.size(), Clock::now() + 5s).ok());
  std::vector<uint8_t> dest(sent.size(), 0);
  std::vector<Piece> p = {{dest.data(), dest.size(), 0, true}};
  Status st = rx.receive(sp.b, p, [] { return Status(); });
  EXPECT_EQ(st.code(), Code::kInternal);
  EXPECT_EQ(copier->unrun(), 0u) << "the frame gave up with an unfenced copy out of a slot still queued";
  EXPECT_EQ(std::memcmp(dest.data(), sent.data(), 2 * kSlot), 0) << "the two slots' copies did not land";
}

// A frame that breaks off after some of its slots were copied on: those
// copies into the destination land before the frame's completion (which
// holds the destination region open) is let go.
TEST(RxStager, AFrameThatBreaksOffLandsItsQueuedCopiesBeforeLettingGo) {
  SocketPair sp;
  auto owned = std::make_unique<ManualCopier>();
  ManualCopier* copier = owned.get();
  constexpr size_t kSlot = 16 * 1024;
  RxStager rx(std::move(owned), kSlot, 2);
  auto sent = random_bytes(20 * 1024, 33);  // of a 64 KiB frame
  ASSERT_TRUE(platform::send_all_by(sp.a, sent.data(), sent.size(), Clock::now() + 5s).ok());
  ASSERT_EQ(::shutdown(sp.a, SHUT_WR), 0);
  std::vector<uint8_t> dest(64 * 1024, 0);
  struct Probe {
    const std::vector<uint8_t>* dest;
    const std::vector<uint8_t>* sent;
    bool* landed;
    ~Probe() { *landed = std::memcmp(dest->data(), sent->data(), kSlot) == 0; }
  };
  bool landed = false;
  auto probe = std::make_shared<Probe>(Probe{&dest, &sent, &landed});
  std::vector<Piece> p = {{dest.data(), dest.size(), 0, true}};
  Status st = rx.receive(sp.b, p, [probe] { return Status(); });
  probe.reset();  // what remains of the frame's hold on the destination
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(landed) << "the frame let go of its destination with a copy into it still queued";
  EXPECT_EQ(copier->unrun(), 0u);
}

TEST(RxStager, ACompletionErrorStopsRetiring) {
  SocketPair sp;
  auto owned = std::make_unique<ManualCopier>();
  RxStager rx(std::move(owned), 4096, 2);
  auto f = random_bytes(100, 9);
  ASSERT_TRUE(platform::send_all_by(sp.a, f.data(), f.size(), Clock::now() + 5s).ok());
  std::vector<uint8_t> dev(100);
  std::vector<Piece> p = {{dev.data(), dev.size(), 0, true}};
  ASSERT_TRUE(rx.receive(sp.b, p, [] { return Status(Code::kDataLoss, "bad frame"); }).ok());
  bool second = false;
  ASSERT_TRUE(rx.then([&] {
                  second = true;
                  return Status();
                }).ok());
  EXPECT_EQ(rx.retire(true).code(), Code::kDataLoss);
  EXPECT_FALSE(second);
}

}  // namespace
}  // namespace ferry::tcp
