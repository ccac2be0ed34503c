// The TCP transport's staging pipeline end to end, with host memory standing
// in for GPU memory: two engines in this process, every connection staging
// all memory through a host copier whose copies finish late (as DMA does).
// Every operation, odd sizes and offsets, random bytes verified; completion
// only once the bytes are in place; slots bounded and all freed at the end,
// also when a connection dies mid-transfer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/syscall.h>

#include "deny_syscall.h"
#include "ferry/ferry.h"
#include "testing/random_data.h"
#include "transport/tcp/staging_copier.h"
#include "transport/tcp/staging_ring.h"

namespace ferry::tcp {
namespace {

using namespace std::chrono_literals;

// Bytes from a seed, as these tests have always drawn them (bits 13..20 of each draw).
void fill(uint8_t* p, size_t n, uint64_t seed) { testing::fill_random_bytes(p, n, seed, 13); }

bool wait_for_no_staging(Deadline deadline) {
  while (staging_bytes_allocated() != 0) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

#define ASSERT_OK(expr)                                      \
  do {                                                       \
    ::ferry::Status s_ = (expr);                             \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.to_string(); \
  } while (0)

// Memory the test has declared off limits (a region after its dereg
// returned), and how many late copies touched it.
struct OffLimits {
  std::atomic<uintptr_t> lo{0}, hi{0};
  std::atomic<int> touched{0};
  void see(const void* dst, const void* src, size_t n) {
    for (const void* p : {dst, src}) {
      auto a = reinterpret_cast<uintptr_t>(p);
      if (a < hi.load() && a + n > lo.load()) touched.fetch_add(1);
    }
  }
};

struct Side {
  std::unique_ptr<Engine> engine;
  std::vector<uint8_t> mem;
  Region region;
  uint8_t* at(size_t off) { return mem.data() + off; }
};

class StagedTcp : public ::testing::Test {
 protected:
  static constexpr size_t kMem = 24 << 20;

  // `watch` sees each staging copy as it runs, on the copier's thread.
  void start(Options a = {}, Options b = {}, std::chrono::microseconds copy_delay = 20us, CopyWatch watch = {}) {
    set_staging_hooks_for_tests(
        StagingHooks{[copy_delay, watch] { return make_host_copier(copy_delay, watch); }, /*stage_host=*/true});
    for (Options* o : {&a, &b}) {
      o->transport = TransportChoice::kTcp;
      o->listen = "127.0.0.1:0";
    }
    open(x_, a);
    open(y_, b);
    auto c = x_.engine->connect(y_.engine->address(), after(10s));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    xc_ = c.value();
    auto d = y_.engine->accept(after(10s));
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    yc_ = d.value();
  }

  // Starts with every copy that lands bytes in y_'s memory slowed by
  // `delay`: y_'s reads from its sockets then lag far behind x_'s sends.
  void start_with_slow_landing(const Options& o, std::chrono::microseconds delay) {
    start(o, o, 20us, [this, delay](const void* dst, const void*, size_t) {
      auto a = reinterpret_cast<uintptr_t>(dst);
      if (a >= slow_lo_.load() && a < slow_hi_.load()) std::this_thread::sleep_for(delay);
    });
    slow_lo_ = reinterpret_cast<uintptr_t>(y_.at(0));
    slow_hi_ = reinterpret_cast<uintptr_t>(y_.at(kMem));
  }

  void open(Side& s, const Options& o) {
    auto e = Engine::create(o);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    s.engine = std::move(e).value();
    s.mem.assign(kMem, 0);
    auto r = s.engine->reg(s.mem.data(), s.mem.size());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    s.region = r.value();
  }

  void TearDown() override {
    if (xc_) xc_->close();
    if (yc_) yc_->close();
    xc_.reset();
    yc_.reset();
    x_.engine.reset();
    y_.engine.reset();
    set_staging_hooks_for_tests({});
    EXPECT_TRUE(wait_for_no_staging(after(10s))) << staging_bytes_allocated() << " staging bytes left";
  }

  Side x_, y_;
  std::shared_ptr<Connection> xc_, yc_;
  std::atomic<uintptr_t> slow_lo_{0}, slow_hi_{0};  // start_with_slow_landing's range
};

TEST_F(StagedTcp, SendRecvEverySizeAndOffsetBothWays) {
  Options small;
  small.staging_chunk_bytes = 64 * 1024;
  small.staging_depth = 3;
  small.streams = 3;
  start(small, small);
  const size_t sizes[] = {1, 4095, 64 * 1024, 64 * 1024 + 1, (1 << 20) + 3, (5 << 20) + 7};
  uint64_t seed = 1;
  for (size_t n : sizes) {
    for (int dir = 0; dir < 2; ++dir) {
      Side& from = dir == 0 ? x_ : y_;
      Side& to = dir == 0 ? y_ : x_;
      Connection& tx = dir == 0 ? *xc_ : *yc_;
      Connection& rx = dir == 0 ? *yc_ : *xc_;
      size_t src_off = 13, dst_off = (8 << 20) + 5;
      fill(from.at(src_off), n, ++seed);
      std::memset(to.at(dst_off), 0, n);
      Transfer r = rx.recv_async(to.at(dst_off), n + 9);
      ASSERT_OK(tx.send(from.at(src_off), n, after(20s)));
      ASSERT_OK(r.wait(after(20s)));
      EXPECT_EQ(r.bytes(), n);
      ASSERT_EQ(0, std::memcmp(to.at(dst_off), from.at(src_off), n)) << "size " << n << " dir " << dir;
    }
  }
}

// Each side counts the chunks it staged, their bytes and the time their
// copies took, in the engine's metrics and its Prometheus text: a message
// sent over the data paths, counted exactly on both ends.
TEST_F(StagedTcp, StagedChunksAreCountedInTheEnginesMetrics) {
  Options o;
  o.staging_chunk_bytes = 256 * 1024;
  o.streams = 2;
  start(o, o);
  EXPECT_TRUE(x_.engine->metrics().staging.empty());
  const size_t n = (3 << 20) + 7;
  fill(x_.at(5), n, 77);
  Transfer r = yc_->recv_async(y_.at(11), n);
  ASSERT_OK(xc_->send(x_.at(5), n, after(20s)));
  ASSERT_OK(r.wait(after(20s)));
  ASSERT_EQ(0, std::memcmp(y_.at(11), x_.at(5), n));
  MetricsSnapshot sent = x_.engine->metrics();
  MetricsSnapshot got = y_.engine->metrics();
  ASSERT_EQ(sent.staging.count("to_host"), 1u);
  ASSERT_EQ(got.staging.count("to_device"), 1u);
  EXPECT_EQ(sent.staging.count("to_device"), 0u);
  const StagingCounts& out = sent.staging.at("to_host");
  const StagingCounts& in = got.staging.at("to_device");
  EXPECT_EQ(out.bytes, n);
  EXPECT_EQ(in.bytes, n);
  EXPECT_GE(out.chunks, n / o.staging_chunk_bytes);
  EXPECT_GE(in.chunks, n / o.staging_chunk_bytes);
  // The host copier of these tests takes 20 us a copy.
  EXPECT_GE(out.seconds, 20e-6 * static_cast<double>(out.chunks));
  EXPECT_GE(in.seconds, 20e-6 * static_cast<double>(in.chunks));
  std::string text = prometheus_text(got);
  EXPECT_NE(text.find("ferry_staging_bytes_total{direction=\"to_device\"} " + std::to_string(n)), std::string::npos)
      << text;
  EXPECT_NE(text.find("ferry_staging_chunks_total{direction=\"to_device\"} " + std::to_string(in.chunks)),
            std::string::npos);
}

TEST_F(StagedTcp, SendvRecvvScatterGatherThroughSlotsSmallerThanTheSendersChunks) {
  Options sender, receiver;
  sender.staging_chunk_bytes = 256 * 1024;
  receiver.staging_chunk_bytes = 16 * 1024;  // a chunk lands through several slots
  receiver.staging_depth = 2;
  start(sender, receiver);
  std::vector<size_t> parts = {7, 300001, 1, 65536, 2 << 20};
  std::vector<ConstBuffer> src;
  size_t off = 3, total = 0;
  for (size_t p : parts) {
    fill(x_.at(off), p, p + 11);
    src.push_back({x_.at(off), p});
    off += p + 101;
    total += p;
  }
  std::vector<MutableBuffer> dst = {{y_.at(1), 1000}, {y_.at(5000), 1}, {y_.at(9 << 20), total}};
  Transfer r = yc_->recvv_async(dst);
  ASSERT_OK(xc_->sendv(src, after(20s)));
  ASSERT_OK(r.wait(after(20s)));
  ASSERT_EQ(r.bytes(), total);
  std::vector<uint8_t> want, got;
  for (auto& b : src) want.insert(want.end(), (const uint8_t*)b.data, (const uint8_t*)b.data + b.size);
  for (auto& b : dst) got.insert(got.end(), (uint8_t*)b.data, (uint8_t*)b.data + b.size);
  got.resize(total);
  EXPECT_EQ(got, want);
}

// A KV cache's write staged on both sides: hundreds of small scattered
// blocks go through slots many to a slot (split where a slot ends), with
// slow copies, and land whole before the write completes.
TEST_F(StagedTcp, ScatteredBlocksLandThroughSharedSlots) {
  Options o;
  o.staging_chunk_bytes = 64 * 1024;
  start(o, o, /*copy_delay=*/100us);
  auto desc = y_.engine->export_region(y_.region);
  ASSERT_TRUE(desc.ok());
  auto pools = xc_->prepare_blocks(std::span(&x_.region, 1), std::span(&desc.value(), 1));
  ASSERT_TRUE(pools.ok()) << pools.status().to_string();
  std::mt19937_64 rng(23);
  fill(x_.at(0), 8 << 20, 3);
  std::vector<Block> blocks;
  std::vector<size_t> dst_slots(600);
  for (size_t i = 0; i < dst_slots.size(); ++i) dst_slots[i] = i;
  std::shuffle(dst_slots.begin(), dst_slots.end(), rng);
  for (size_t i = 0; i < 300; ++i) {
    uint64_t size = 1 + rng() % 20000;  // odd sizes, some past a 64 KiB slot in a few blocks
    blocks.push_back({0, 0, (rng() % 400) * 20000 + rng() % 16, dst_slots[i] * 20032 + 3, size});
  }
  std::memset(y_.at(0), 0, 16 << 20);
  ASSERT_TRUE(xc_->write_blocks_async(*pools, blocks, "kv").wait(after(30s)).ok());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    ASSERT_EQ(0, std::memcmp(y_.at(b.remote_offset), x_.at(b.local_offset), b.size)) << "block " << i;
  }
  auto note = yc_->wait_notification(after(5s));
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(note.value(), "kv");
}

TEST_F(StagedTcp, WriteReadAndNotificationsSeeTheirDataInPlace) {
  Options o;
  o.staging_chunk_bytes = 128 * 1024;
  start(o, o, /*copy_delay=*/200us);  // slow copies: an early completion would show
  auto desc = y_.engine->export_region(y_.region, 4096, 16 << 20);
  ASSERT_TRUE(desc.ok());
  for (size_t n : {size_t{1}, size_t{65537}, size_t{(3 << 20) + 1}}) {
    size_t remote_off = 77 + n % 1000;
    fill(x_.at(11), n, n);
    std::string note = "written " + std::to_string(n);
    ASSERT_OK(xc_->write(x_.at(11), n, desc.value(), remote_off, note, after(20s)));
    // The write completed: its bytes are in the target's memory now.
    ASSERT_EQ(0, std::memcmp(y_.at(4096 + remote_off), x_.at(11), n)) << "write of " << n;
    auto got = yc_->wait_notification(after(5s));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(got.value(), note);
    // Read it back into another place.
    std::memset(x_.at(12 << 20), 0, n);
    ASSERT_OK(xc_->read(x_.at(12 << 20), n, desc.value(), remote_off, after(20s)));
    ASSERT_EQ(0, std::memcmp(x_.at(12 << 20), x_.at(11), n)) << "read of " << n;
  }
  // Vector forms with a trailing notification; standalone notify.
  fill(x_.at(100), 3 << 20, 99);
  std::vector<WriteItem> items = {{x_.at(100), 1 << 20, desc.value(), 0},
                                  {x_.at(100 + (1 << 20)), (2 << 20) - 1, desc.value(), 5 << 20},
                                  {x_.at(100 + (3 << 20) - 1), 1, desc.value(), 9 << 20}};
  ASSERT_TRUE(xc_->writev_async(items, "all three").wait(after(20s)).ok());
  auto note = yc_->wait_notification(after(5s));
  ASSERT_TRUE(note.ok());
  EXPECT_EQ(note.value(), "all three");
  for (auto& it : items) {
    EXPECT_EQ(0, std::memcmp(y_.at(4096 + it.remote_offset), it.local, it.size));
  }
  std::vector<ReadItem> reads = {{x_.at(14 << 20), 1 << 20, desc.value(), 0},
                                 {x_.at(16 << 20), (2 << 20) - 1, desc.value(), 5 << 20}};
  ASSERT_TRUE(xc_->readv_async(reads).wait(after(20s)).ok());
  EXPECT_EQ(0, std::memcmp(x_.at(14 << 20), x_.at(100), 1 << 20));
  EXPECT_EQ(0, std::memcmp(x_.at(16 << 20), x_.at(100 + (1 << 20)), (2 << 20) - 1));
  ASSERT_OK(yc_->notify("bye", after(5s)));
  auto bye = xc_->wait_notification(after(5s));
  ASSERT_TRUE(bye.ok());
  EXPECT_EQ(bye.value(), "bye");
}

// The sender lends its slots' pages to the socket (staging_lend_pages), and
// over loopback the receiving socket reads those very pages, maybe long
// after the send returned. Here the receiver's copies out of its slots are
// slow, so its reads from the socket lag far behind the sender: a slot the
// sender refilled before the peer confirmed its chunk would hand the
// receiver the next chunk's bytes in its place.
TEST_F(StagedTcp, LentSlotsAreRefilledOnlyOnceThePeerConfirmedTheirChunk) {
  Options o;
  o.streams = 2;
  o.staging_depth = 2;
  o.staging_chunk_bytes = 64 * 1024;
  ASSERT_TRUE(o.staging_lend_pages);
  start_with_slow_landing(o, 2ms);
  const size_t n = (6 << 20) + 4097;
  fill(x_.at(3), n, 41);
  Transfer r = yc_->recv_async(y_.at(17), n);
  ASSERT_OK(xc_->send(x_.at(3), n, after(30s)));
  ASSERT_OK(r.wait(after(30s)));
  ASSERT_EQ(0, std::memcmp(y_.at(17), x_.at(3), n));
  // A write, whose chunks carry their place in the target.
  auto desc = y_.engine->export_region(y_.region);
  ASSERT_TRUE(desc.ok());
  fill(x_.at(9 << 20), n, 42);
  ASSERT_OK(xc_->write(x_.at(9 << 20), n, desc.value(), 12 << 20, "", after(30s)));
  ASSERT_EQ(0, std::memcmp(y_.at(12 << 20), x_.at(9 << 20), n));
}

// Closing a connection while its slots are lent to its sockets (the
// receiver slow, so the pages wait in the sockets): the transfer fails, the
// slots are freed (TearDown), and the engine goes on serving. The SIGPIPE a
// splice into a shut socket raises is page_lender_test's.
TEST_F(StagedTcp, ClosingAConnectionWithLentSlotsFailsTheTransferAndFreesThem) {
  Options o;
  o.streams = 2;
  o.staging_chunk_bytes = 64 * 1024;
  start_with_slow_landing(o, 5ms);
  fill(x_.at(0), 16 << 20, 9);
  for (int round = 0; round < 3; ++round) {
    Transfer r = yc_->recv_async(y_.at(0), 16 << 20);
    Transfer s = xc_->send_async(x_.at(0), 16 << 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + 20 * round));
    xc_->close();  // this side: its sockets shut under the splicing workers
    EXPECT_FALSE(s.wait(after(10s)).ok());
    EXPECT_FALSE(r.wait(after(10s)).ok());
    yc_->close();
    auto c = x_.engine->connect(y_.engine->address(), after(10s));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    auto d = y_.engine->accept(after(10s));
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    xc_ = c.value();
    yc_ = d.value();
  }
  slow_hi_ = 0;
  Transfer r = yc_->recv_async(y_.at(0), 1 << 20);
  ASSERT_OK(xc_->send(x_.at(0), 1 << 20, after(10s)));
  ASSERT_OK(r.wait(after(10s)));
  EXPECT_EQ(0, std::memcmp(y_.at(0), x_.at(0), 1 << 20));
}

TEST_F(StagedTcp, StagingStaysWithinDepthTimesChunkPerPathAndDirection) {
  Options o;
  o.streams = 2;
  o.staging_depth = 3;
  o.staging_chunk_bytes = 32 * 1024;
  start(o, o);
  fill(x_.at(0), 8 << 20, 5);
  std::atomic<bool> done{false};
  size_t peak = 0;
  std::thread watch([&] {
    while (!done) {
      peak = std::max(peak, staging_bytes_allocated());
      std::this_thread::sleep_for(100us);
    }
  });
  for (int i = 0; i < 3; ++i) {
    Transfer r = yc_->recv_async(y_.at(0), 8 << 20);
    ASSERT_OK(xc_->send(x_.at(0), 8 << 20, after(20s)));
    ASSERT_OK(r.wait(after(20s)));
  }
  done = true;
  watch.join();
  EXPECT_EQ(0, std::memcmp(y_.at(0), x_.at(0), 8 << 20));
  // Two engines, 2 paths each: at most 2 x depth slots to transmit (lent
  // slots wait for the peer's confirmation) and depth to receive.
  EXPECT_LE(peak, size_t{2 * 2 * (2 * 3 + 3) * 32 * 1024});
  EXPECT_GT(peak, 0u);
}

TEST_F(StagedTcp, AConnectionLostMidTransferFailsInBoundedTimeAndFreesItsSlots) {
  Options o;
  o.staging_chunk_bytes = 16 * 1024;
  o.peer_timeout = 2000ms;
  start(o, o, /*copy_delay=*/1000us);  // 1,024 chunks over 2 paths: ~0.5 s, the close lands mid-transfer
  fill(x_.at(0), 16 << 20, 8);
  Transfer r = yc_->recv_async(y_.at(0), 16 << 20);
  Transfer s = xc_->send_async(x_.at(0), 16 << 20);
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(s.test());
  EXPECT_GT(staging_bytes_allocated(), 0u);
  yc_->close();  // the receiving side goes away mid-transfer
  Status ss = s.wait(after(10s));
  EXPECT_EQ(ss.code(), Code::kPeerLost) << ss.to_string();
  EXPECT_EQ(r.wait(after(1s)).code(), Code::kCancelled);
  EXPECT_TRUE(wait_for_no_staging(after(10s))) << staging_bytes_allocated() << " staging bytes left";
  // The surviving engine still serves: a new connection moves data.
  auto c = x_.engine->connect(y_.engine->address(), after(10s));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto d = y_.engine->accept(after(10s));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  Transfer r2 = d.value()->recv_async(y_.at(0), 1 << 20);
  ASSERT_OK(c.value()->send(x_.at(0), 1 << 20, after(10s)));
  ASSERT_OK(r2.wait(after(10s)));
  EXPECT_EQ(0, std::memcmp(y_.at(0), x_.at(0), 1 << 20));
  c.value()->close();
  d.value()->close();
}

// The sender's path dies with staging copies from the source still queued
// (three chunks claimed ahead, each copy 150 ms late): the failed send's
// region, once dereg returns, is read by no copy. The path used to let the
// region go before waiting for those copies.
TEST(StagedTcpFailure, NoStagingCopyReadsASourceDeregisteredAfterItsSendFailed) {
  auto off = std::make_shared<OffLimits>();
  set_staging_hooks_for_tests(StagingHooks{
      [off] { return make_host_copier(150ms, [off](const void* d, const void* s, size_t n) { off->see(d, s, n); }); },
      /*stage_host=*/true});
  Options o;
  o.transport = TransportChoice::kTcp;
  o.listen = "127.0.0.1:0";
  o.streams = 1;
  o.staging_depth = 3;
  o.staging_chunk_bytes = 64 * 1024;
  auto x = Engine::create(o).value();
  auto y = Engine::create(o).value();
  std::vector<uint8_t> xm(4 << 20), ym(4 << 20);
  fill(xm.data(), xm.size(), 9);
  Region xr = x->reg(xm.data(), xm.size()).value();
  ASSERT_TRUE(y->reg(ym.data(), ym.size()).ok());
  auto xc = x->connect(y->address(), after(10s)).value();
  auto yc = y->accept(after(10s)).value();
  Transfer r = yc->recv_async(ym.data(), ym.size());
  Transfer s = xc->send_async(xm.data(), xm.size());
  std::this_thread::sleep_for(700ms);  // chunks are being staged, 150 ms each
  ASSERT_FALSE(s.test());
  yc->close();
  EXPECT_FALSE(s.wait(after(20s)).ok());
  ASSERT_TRUE(x->dereg(xr).ok());
  off->lo = reinterpret_cast<uintptr_t>(xm.data());
  off->hi = reinterpret_cast<uintptr_t>(xm.data()) + xm.size();
  std::this_thread::sleep_for(1s);  // longer than what was queued
  EXPECT_EQ(off->touched.load(), 0) << "staging copies read the sender's region after its dereg returned";
  off->lo = off->hi = 0;
  xc->close();
  xc.reset();
  yc.reset();
  x.reset();
  y.reset();
  set_staging_hooks_for_tests({});
}

// Closes both ends, lets the engines go (connections first), and restores
// the default staging hooks.
void tear_down(std::shared_ptr<Connection>& xc, std::shared_ptr<Connection>& yc, std::unique_ptr<Engine>& x,
               std::unique_ptr<Engine>& y) {
  xc->close();
  yc->close();
  xc.reset();
  yc.reset();
  x.reset();
  y.reset();
  set_staging_hooks_for_tests({});
}

// Forwards every call to the copier it wraps; the failing copiers below
// change one call each.
class ForwardingCopier : public Copier {
 public:
  explicit ForwardingCopier(std::unique_ptr<Copier> inner) : inner_(std::move(inner)) {}
  Result<void*> alloc_host(int device, size_t bytes) override { return inner_->alloc_host(device, bytes); }
  void free_host(void* p, size_t bytes) override { inner_->free_host(p, bytes); }
  Status copy(int device, void* dst, const void* src, size_t n) override { return inner_->copy(device, dst, src, n); }
  Result<uint64_t> fence() override { return inner_->fence(); }
  Result<bool> done(uint64_t t) override { return inner_->done(t); }
  Status wait(uint64_t t) override { return inner_->wait(t); }
  Status sync() override { return inner_->sync(); }

 private:
  std::unique_ptr<Copier> inner_;
};

// Copies as the host copier makes them, but no fence can be set (as with a
// device that cannot record an event).
class FenceRefusingCopier final : public ForwardingCopier {
 public:
  using ForwardingCopier::ForwardingCopier;
  Result<uint64_t> fence() override { return Status(Code::kInternal, "fence refused by the test"); }
};

// A small send travels on the control stream, its bytes copied out of the
// source by the connection's own copier. When that copy cannot be fenced the
// send fails, and only once the copy has ended: a region deregistered after
// the failure is read by no copy.
TEST(StagedTcpFailure, ASendWhoseCopyCannotBeFencedFailsOnlyOnceTheCopyEnded) {
  auto off = std::make_shared<OffLimits>();
  set_staging_hooks_for_tests(
      StagingHooks{[off] {
                     return std::make_unique<FenceRefusingCopier>(
                         make_host_copier(150ms, [off](const void* d, const void* s, size_t n) { off->see(d, s, n); }));
                   },
                   /*stage_host=*/true});
  Options o;
  o.transport = TransportChoice::kTcp;
  o.listen = "127.0.0.1:0";
  auto x = Engine::create(o).value();
  auto y = Engine::create(o).value();
  std::vector<uint8_t> xm(4097);
  fill(xm.data(), xm.size(), 10);
  Region xr = x->reg(xm.data(), xm.size()).value();
  auto xc = x->connect(y->address(), after(10s)).value();
  auto yc = y->accept(after(10s)).value();
  Status st = xc->send_async(xm.data() + 3, 1001).wait(after(10s));
  EXPECT_EQ(st.code(), Code::kInternal) << st.to_string();
  ASSERT_TRUE(x->dereg(xr).ok());
  off->lo = reinterpret_cast<uintptr_t>(xm.data());
  off->hi = reinterpret_cast<uintptr_t>(xm.data()) + xm.size();
  std::this_thread::sleep_for(500ms);  // longer than the copy's delay
  EXPECT_EQ(off->touched.load(), 0) << "a copy read the send's region after the send failed and dereg returned";
  off->lo = off->hi = 0;
  tear_down(xc, yc, x, y);
}

// Copies as the host copier makes them, but no staging memory can be had.
class AllocRefusingCopier final : public ForwardingCopier {
 public:
  using ForwardingCopier::ForwardingCopier;
  Result<void*> alloc_host(int, size_t) override {
    return Status(Code::kResourceExhausted, "pinned memory refused by the test");
  }
};

// Small payloads ride the control stream through a pinned bounce; where no
// pinned memory can be had they still arrive whole, copied the slow way.
TEST(StagedTcpFailure, SmallPayloadsArriveWholeWithoutPinnedMemory) {
  set_staging_hooks_for_tests(StagingHooks{
      [] { return std::make_unique<AllocRefusingCopier>(make_host_copier(20us)); }, /*stage_host=*/true});
  Options o;
  o.transport = TransportChoice::kTcp;
  o.listen = "127.0.0.1:0";
  auto x = Engine::create(o).value();
  auto y = Engine::create(o).value();
  std::vector<uint8_t> xm(200 * 1024), ym(200 * 1024);
  ASSERT_TRUE(x->reg(xm.data(), xm.size()).ok());
  ASSERT_TRUE(y->reg(ym.data(), ym.size()).ok());
  auto xc = x->connect(y->address(), after(10s)).value();
  auto yc = y->accept(after(10s)).value();
  uint64_t seed = 40;
  for (size_t n : {size_t{1}, size_t{4095}, size_t{64 * 1024}}) {
    for (int dir = 0; dir < 2; ++dir) {
      std::vector<uint8_t>& from = dir == 0 ? xm : ym;
      std::vector<uint8_t>& to = dir == 0 ? ym : xm;
      Connection& tx = dir == 0 ? *xc : *yc;
      Connection& rx = dir == 0 ? *yc : *xc;
      fill(from.data() + 7, n, ++seed);
      std::memset(to.data() + 100003, 0, n);
      Transfer r = rx.recv_async(to.data() + 100003, n + 5);
      ASSERT_OK(tx.send(from.data() + 7, n, after(10s)));
      ASSERT_OK(r.wait(after(10s)));
      EXPECT_EQ(r.bytes(), n);
      ASSERT_EQ(0, std::memcmp(to.data() + 100003, from.data() + 7, n)) << "size " << n << " dir " << dir;
    }
  }
  EXPECT_EQ(staging_bytes_allocated(), 0u);
  tear_down(xc, yc, x, y);
}

// A staged send of random bytes with vmsplice refused; 0 if they arrived whole.
int staged_send_without_vmsplice() {
  if (!ferry::testing::deny_syscall(SYS_vmsplice)) return 3;
  set_staging_hooks_for_tests(StagingHooks{[] { return make_host_copier(20us); }, /*stage_host=*/true});
  Options o;
  o.transport = TransportChoice::kTcp;
  o.listen = "127.0.0.1:0";
  o.streams = 2;
  o.staging_chunk_bytes = 64 * 1024;
  auto x = Engine::create(o).value();
  auto y = Engine::create(o).value();
  const size_t n = (3 << 20) + 5;
  std::vector<uint8_t> xm(n), ym(n);
  fill(xm.data(), n, 77);
  if (!x->reg(xm.data(), n).ok() || !y->reg(ym.data(), n).ok()) return 4;
  auto xc = x->connect(y->address(), after(10s)).value();
  auto yc = y->accept(after(10s)).value();
  Transfer r = yc->recv_async(ym.data(), n);
  if (!xc->send(xm.data(), n, after(20s)).ok() || !r.wait(after(20s)).ok()) return 5;
  return std::memcmp(xm.data(), ym.data(), n) == 0 ? 0 : 6;
}

// A sandbox that refuses vmsplice (a seccomp filter here): staged chunks are
// copied into the socket instead of lent, and every byte still arrives. In
// a child process: the filter cannot be undone.
TEST(StagedTcpDeathTest, WhereVmspliceIsRefusedStagedChunksAreCopied) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(staged_send_without_vmsplice()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace ferry::tcp
