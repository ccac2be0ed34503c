// The local transport's connection between two engines of this process, on
// host memory: what happens at its limits and while it fails (control
// messages too large for the channel, operations posted as it closes).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

EnginePair connect_local() { return connect_pair("local"); }

// A sendv of more parts than one control message can describe fails at once
// with a message that says why, and the connection goes on working: it used
// to wait for room in the channel forever, with every later message behind it.
TEST(LocalConnection, SendvOfMorePartsThanTheChannelCarriesFailsAndTheConnectionGoesOn) {
  EnginePair p = connect_local();
  ASSERT_TRUE(p.ca && p.cb);
  ASSERT_EQ(p.ca->transport_name(), "local");
  // Parts with gaps between them (adjacent ones would travel as one).
  const size_t parts = 40000, each = 4, stride = 8;
  std::vector<uint8_t> src(parts * stride), dst(parts * each + 7);
  std::mt19937_64 rng(3);
  for (auto& v : src) v = static_cast<uint8_t>(rng());
  ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
  ASSERT_TRUE(p.b->reg(dst.data(), dst.size()).ok());
  std::vector<ConstBuffer> v;
  for (size_t i = 0; i < parts; ++i) v.push_back({src.data() + i * stride, each});
  Transfer s = p.ca->sendv_async(v);
  Status st = s.wait(after(5s));
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("control message"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("fewer or larger parts"), std::string::npos) << st.to_string();
  // The same bytes in fewer parts, and a notification, still go through.
  std::vector<ConstBuffer> few;
  for (size_t i = 0; i < 1000; ++i) few.push_back({src.data() + i * 160, 160});
  Transfer r = p.cb->recv_async(dst.data() + 7, 160000);
  ASSERT_TRUE(p.ca->sendv(few, after(10s)).ok());
  ASSERT_TRUE(r.wait(after(10s)).ok());
  EXPECT_EQ(r.bytes(), 160000u);
  EXPECT_EQ(0, std::memcmp(dst.data() + 7, src.data(), 160000));
  ASSERT_TRUE(p.ca->notify("still here", after(5s)).ok());
  auto note = p.cb->wait_notification(after(5s));
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(note.value(), "still here");
}

// Operations posted from several threads while the connection closes all
// complete (with the reason), none is left pending: one posted between the
// check of the connection's health and its entry in a table that close()
// had just emptied used to wait forever.
TEST(LocalConnection, OperationsPostedWhileItClosesAllComplete) {
  for (int round = 0; round < 5; ++round) {
    EnginePair p = connect_local();
    ASSERT_TRUE(p.ca && p.cb);
    std::vector<uint8_t> buf(1 << 16);
    ASSERT_TRUE(p.b->reg(buf.data(), buf.size()).ok());
    ASSERT_TRUE(p.a->reg(buf.data(), buf.size()).ok());
    std::atomic<bool> stop{false};
    std::vector<std::vector<Transfer>> posted(3);
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        while (!stop.load()) {
          posted[static_cast<size_t>(t)].push_back(t == 2 ? p.ca->send_async(buf.data(), 100000)
                                                          : p.cb->recv_async(buf.data(), 4096));
        }
      });
    }
    std::this_thread::sleep_for(5ms);
    p.cb->close();
    std::this_thread::sleep_for(5ms);
    stop.store(true);
    for (auto& t : threads) t.join();
    size_t total = 0;
    for (auto& list : posted) {
      for (Transfer& tr : list) {
        Status s = tr.wait(after(5s));
        ASSERT_NE(s.code(), Code::kDeadlineExceeded) << "transfer " << total << " never completed";
        ++total;
      }
    }
    EXPECT_GT(total, 0u);
  }
}

// A peer (a) writes 512 MiB into this side's (b's) host region while b closes
// the connection and deregisters the region, as `close_then_dereg` orders
// them; it calls `zero` as soon as the dereg returns. Returns how many of
// the region's pages changed after that: bytes that landed after dereg.
using CloseThenDereg = std::function<void(EnginePair&, const Region&, const std::function<void()>& zero)>;
size_t pages_written_after_dereg(const CloseThenDereg& close_then_dereg) {
  EnginePair p = connect_local();
  EXPECT_TRUE(p.ca && p.cb);
  if (!p.ca || !p.cb) return ~size_t{0};
  const size_t n = size_t{512} << 20;
  auto map = [n] {
    void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    EXPECT_NE(m, MAP_FAILED);
    return static_cast<uint8_t*>(m);
  };
  uint8_t* theirs = map();
  uint8_t* mine = map();
  std::memset(theirs, 0x5a, n);
  EXPECT_TRUE(p.a->reg(theirs, n).ok());
  Region region = p.b->reg(mine, n).value();
  RemoteDescriptor desc = p.b->export_region(region, 0, 0).value();
  EXPECT_TRUE(p.ca->write(theirs, 8, desc, 0, {}, after(5s)).ok());  // the export is open
  std::atomic<bool> started{false};
  Transfer w;
  std::thread writer([&] {
    started.store(true);
    w = p.ca->write_async(theirs, n, desc, 0, {});
  });
  while (!started.load()) std::this_thread::yield();
  std::this_thread::sleep_for(2ms);
  close_then_dereg(p, region, [&] { std::memset(mine, 0, n); });  // the application's again
  writer.join();
  (void)w.wait(after(30s));  // finished or failed: either way, over
  size_t changed = 0;
  for (size_t i = 0; i < n; i += 4096) changed += mine[i] != 0;
  ::munmap(theirs, n);
  ::munmap(mine, n);
  return changed;
}

// close() returns only once the peer has stopped, so that after dereg not a
// byte of the region changes. Close used to return at once, and most of a
// large write landed after dereg.
TEST(LocalConnection, NoByteLandsInARegionDeregisteredAfterClose) {
  EXPECT_EQ(pages_written_after_dereg([](EnginePair& p, const Region& r, const std::function<void()>& zero) {
              p.cb->close();
              EXPECT_TRUE(p.b->dereg(r).ok());
              zero();
            }),
            0u);
}

// The same while another thread is closing the connection: the dereg waits
// for that close to settle instead of returning while the peer still writes.
TEST(LocalConnection, NoByteLandsInARegionDeregisteredWhileAnotherThreadCloses) {
  EXPECT_EQ(pages_written_after_dereg([](EnginePair& p, const Region& r, const std::function<void()>& zero) {
              std::thread closer([&] { p.cb->close(); });
              std::this_thread::sleep_for(1ms);  // the close is under way
              EXPECT_TRUE(p.b->dereg(r).ok());
              zero();
              closer.join();
            }),
            0u);
}

// A send larger than the receiver pulls itself (the sender writes into the
// receive buffer it was told of): a dereg of that buffer while the sender
// writes returns only once the sender has stopped. The buffer used to be
// unknown to dereg, which returned at once while the bytes kept landing.
TEST(LocalConnection, NoByteLandsInAReceiveBufferDeregisteredWhileThePeerWritesIt) {
  EnginePair p = connect_local();
  ASSERT_TRUE(p.ca && p.cb);
  const size_t n = size_t{512} << 20;
  auto map = [n] {
    void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    EXPECT_NE(m, MAP_FAILED);
    return static_cast<uint8_t*>(m);
  };
  uint8_t* theirs = map();
  uint8_t* mine = map();
  std::memset(theirs, 0x5a, n);
  ASSERT_TRUE(p.a->reg(theirs, n).ok());
  Region region = p.b->reg(mine, n).value();
  Transfer r = p.cb->recv_async(mine, n);
  Transfer s = p.ca->send_async(theirs, n);
  // The sender's copy has begun once the buffer's first byte changed.
  auto until = Clock::now() + 10s;
  while (reinterpret_cast<volatile uint8_t*>(mine)[0] == 0 && Clock::now() < until) std::this_thread::yield();
  ASSERT_EQ(mine[0], 0x5a) << "the sender never began writing";
  ASSERT_TRUE(p.b->dereg(region).ok());
  std::memset(mine, 0, n);  // the application's again
  (void)s.wait(after(30s));  // finished or failed: either way, over
  (void)r.wait(after(30s));
  size_t changed = 0;
  for (size_t i = 0; i < n; i += 4096) changed += mine[i] != 0;
  EXPECT_EQ(changed, 0u) << "pages of the receive buffer written after its dereg returned";
  ::munmap(theirs, n);
  ::munmap(mine, n);
}

// The first write into an export starts its copy on the progress thread,
// once the peer's answer opening the export arrives. A large host copy there
// used to hold that thread for its whole length, and no acknowledgement or
// notification moved meanwhile: a notification posted right after the write
// finished only after it. The copy now goes to the copier's helpers.
TEST(LocalConnection, AFirstLargeWriteIntoAnExportLeavesTheProgressThreadFree) {
  EnginePair p = connect_local();
  ASSERT_TRUE(p.ca && p.cb);
  const size_t size = (256u << 20) + 13;
  std::vector<uint8_t> src(size), dst(size + 64);
  std::mt19937_64 rng(26);
  for (size_t i = 0; i + 8 <= size; i += 8) {
    uint64_t v = rng();
    std::memcpy(src.data() + i, &v, 8);
  }
  for (size_t i = size & ~size_t{7}; i < size; ++i) src[i] = static_cast<uint8_t>(rng());
  ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
  auto region = p.b->reg(dst.data(), dst.size());
  ASSERT_TRUE(region.ok());
  auto desc = p.b->export_region(*region, 64 - 5, size);
  ASSERT_TRUE(desc.ok());
  Transfer w = p.ca->write_async(src.data(), size, *desc, 0);
  Transfer n = p.ca->notify_async("behind the write");
  ASSERT_TRUE(n.wait(after(20s)).ok());
  bool write_was_running = !w.test();
  ASSERT_TRUE(w.wait(after(60s)).ok());
  EXPECT_TRUE(write_was_running) << "the notification was confirmed only after the 256 MiB copy ended";
  EXPECT_EQ(0, std::memcmp(dst.data() + 64 - 5, src.data(), size));
  auto note = p.cb->wait_notification(after(5s));
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(note.value(), "behind the write");
}

}  // namespace
}  // namespace ferry
