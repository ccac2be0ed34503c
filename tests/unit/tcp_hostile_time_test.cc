// A peer cannot stretch a call's time: heartbeats prove it alive, not that an
// operation moves. A write the peer reads whole and never acknowledges, a
// chunk it stalls mid-way, a write into an export it never finishes: each
// ends within its bounds (the caller's deadline, plus peer_timeout while a
// chunk is cut off), and once a call returned no byte of it lands.
#include <atomic>
#include <cstring>
#include <mutex>

#include "hostile_peer.h"

namespace ferry::hostile {
namespace {

constexpr auto kPeerTimeout = 1000ms;

Options quick_options() {
  Options o = Target::options();
  o.peer_timeout = kPeerTimeout;
  o.heartbeat_interval = 100ms;
  return o;
}

// The hostile peer's background: heartbeats on the control stream every
// 100 ms (so the engine never finds it silent), and everything the engine
// sends on the control stream and on every data stream read and dropped.
// Frames the test sends meanwhile go through send() (one writer at a time).
class AliveButIdle {
 public:
  explicit AliveButIdle(Peer& p) : peer_(p) {
    beats_ = std::thread([this] {
      while (!stop_.load()) {
        wire::FrameHeader hb;
        hb.type = wire::FrameType::kHeartbeat;
        {
          std::lock_guard<std::mutex> lock(mu_);
          (void)peer_.frame(hb);
        }
        std::this_thread::sleep_for(100ms);
      }
    });
    drain_ = std::thread([this] {
      std::vector<int> fds{peer_.ctl.fd()};
      for (auto& d : peer_.data) fds.push_back(d.fd());
      char buf[65536];
      while (!stop_.load()) {
        std::vector<pollfd> p;
        for (int fd : fds) p.push_back({fd, POLLIN, 0});
        if (::poll(p.data(), p.size(), 20) <= 0) continue;
        for (auto& q : p) {
          if (q.revents & POLLIN) (void)::recv(q.fd, buf, sizeof buf, MSG_DONTWAIT);
        }
      }
    });
  }
  ~AliveButIdle() {
    stop_ = true;
    beats_.join();
    drain_.join();
  }
  bool send(const wire::FrameHeader& h, const void* bytes = nullptr, size_t n = 0, int stream = -1) {
    std::lock_guard<std::mutex> lock(mu_);
    return peer_.frame(h, bytes, n, stream);
  }

 private:
  Peer& peer_;
  std::mutex mu_;
  std::atomic<bool> stop_{false};
  std::thread beats_, drain_;
};

// The hostile peer's made-up export of `bytes`.
RemoteDescriptor far_export(size_t bytes) {
  RemoteDescriptor far;
  far.engine_id = Peer::kEngineId;
  far.export_id = 5;
  far.key = 6;
  far.length = bytes;
  return far;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The peer reads the whole write and never acknowledges it, while it
// heartbeats: the write fails within about peer_timeout of its last chunk,
// and a blocking write returns by its deadline.
TEST(TcpHostileTime, AWriteThePeerNeverAcknowledgesFailsWhileItHeartbeats) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(quick_options()));
  std::vector<uint8_t> mem(4u << 20, 7);
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  AliveButIdle idle(t.peer);
  const auto start = Clock::now();
  Status s = t.conn->write(mem.data(), mem.size(), far_export(mem.size()), 0, "", after(3s));
  const double took = seconds_since(start);
  EXPECT_FALSE(s.ok());
  EXPECT_LT(took, 3.0 + 1.5) << "a write the peer never acknowledged held its caller for " << took << " s";
  // Without a deadline of the caller's: peer_timeout bounds it.
  Target u;
  ASSERT_NO_FATAL_FAILURE(u.open(quick_options()));
  ASSERT_TRUE(u.engine->reg(mem.data(), mem.size()).ok());
  AliveButIdle idle_too(u.peer);
  const auto posted = Clock::now();
  Transfer w = u.conn->write_async(mem.data(), mem.size(), far_export(mem.size()), 0);
  Status ended = w.wait(after(10s));
  EXPECT_EQ(ended.code(), Code::kPeerLost) << ended.to_string();
  EXPECT_LT(seconds_since(posted), 2.5) << "the unacknowledged write outlived peer_timeout by far";
  EXPECT_NE(ended.message().find("owes"), std::string::npos) << ended.to_string();
}

// The peer answers a read with the first 100 bytes of its one chunk and
// then only heartbeats. A blocking read returns by its deadline plus at most
// peer_timeout, and the rest of the chunk, sent after it returned, lands
// nowhere.
TEST(TcpHostileTime, AReadStalledMidChunkReturnsByItsBound) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(quick_options(), 2));
  constexpr size_t kSize = 1 << 20;
  std::vector<uint8_t> mem(kSize, 0);
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  Status s;
  std::thread reader([&] { s = t.conn->read(mem.data(), kSize, far_export(kSize), 0, after(2s)); });
  auto req = t.peer.next_control_frame(after(5s));
  ASSERT_TRUE(req.ok()) << req.status().to_string();
  ASSERT_EQ(req->type, wire::FrameType::kReadReq);
  const auto start = Clock::now();
  AliveButIdle idle(t.peer);
  wire::FrameHeader h;
  h.type = wire::FrameType::kData;
  h.id = req->id;
  h.payload_len = kSize;
  std::vector<uint8_t> bytes(kSize, 0xab);
  ASSERT_TRUE(idle.send(h, bytes.data(), 100, /*stream=*/0));
  reader.join();
  const double took = seconds_since(start);
  EXPECT_FALSE(s.ok()) << "a read completed with most of its chunk missing";
  EXPECT_LT(took, 2.0 + 1.0 + 1.0) << "a stalled chunk held read(timeout=2 s) for " << took << " s";
  std::vector<uint8_t> seen = mem;
  (void)::send(t.peer.data[0].fd(), bytes.data() + 100, kSize - 100, MSG_NOSIGNAL | MSG_DONTWAIT);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(mem, seen) << "bytes landed after read() returned";
}

// What NIXL's releaseReqH and the Mooncake facade do with a read they give
// up on: Transfer::cancel. The peer stalls the read's chunk after 100 bytes
// and heartbeats; cancel returns within its bound with the read stopped,
// and the rest of the chunk, sent after, lands nowhere.
TEST(TcpHostileTime, CancelOfAReadStalledMidChunkReturnsAndNothingLandsAfter) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(quick_options(), 2));
  constexpr size_t kSize = 1 << 20;
  std::vector<uint8_t> mem(kSize, 0);
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  Transfer read = t.conn->read_async(mem.data(), kSize, far_export(kSize), 0);
  auto req = t.peer.next_control_frame(after(5s));
  ASSERT_TRUE(req.ok()) << req.status().to_string();
  AliveButIdle idle(t.peer);
  wire::FrameHeader h;
  h.type = wire::FrameType::kData;
  h.id = req->id;
  h.payload_len = kSize;
  std::vector<uint8_t> bytes(kSize, 0xcd);
  ASSERT_TRUE(idle.send(h, bytes.data(), 100, /*stream=*/0));
  // Not polled: the engine's reader writes `mem` meanwhile. 300 ms is far
  // more than 100 bytes on loopback take to land.
  std::this_thread::sleep_for(300ms);
  const auto start = Clock::now();
  EXPECT_TRUE(read.cancel()) << "a read moving data was not stopped";
  EXPECT_TRUE(read.test()) << "cancel returned while the read could still land bytes";
  EXPECT_LT(seconds_since(start), 1.0 + 1.0) << "cancel waited on the stalled chunk past peer_timeout";
  std::vector<uint8_t> seen = mem;
  (void)::send(t.peer.data[0].fd(), bytes.data() + 100, kSize - 100, MSG_NOSIGNAL | MSG_DONTWAIT);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(mem, seen) << "bytes landed after cancel() returned";
}

// The read's first chunk arrives whole, then the peer goes quiet (and
// heartbeats). At the deadline the read is stopped at once, not at
// peer_timeout; its second chunk, sent afterwards, is dropped; the
// connection stays up.
TEST(TcpHostileTime, AReadStoppedAtItsDeadlineTakesNothingAfter) {
  Target t;
  Options o = quick_options();
  o.peer_timeout = 10s;
  ASSERT_NO_FATAL_FAILURE(t.open(o));
  constexpr size_t kChunk = 64 << 10;
  std::vector<uint8_t> mem(2 * kChunk, 0);
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  Status s;
  std::thread reader([&] { s = t.conn->read(mem.data(), mem.size(), far_export(mem.size()), 0, after(1s)); });
  auto req = t.peer.next_control_frame(after(5s));
  ASSERT_TRUE(req.ok()) << req.status().to_string();
  const auto start = Clock::now();
  AliveButIdle idle(t.peer);
  wire::FrameHeader h;
  h.type = wire::FrameType::kData;
  h.id = req->id;
  h.payload_len = kChunk;
  std::vector<uint8_t> first(kChunk, 0x11), second(kChunk, 0x22);
  ASSERT_TRUE(idle.send(h, first.data(), first.size(), 0));
  reader.join();
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.to_string();
  EXPECT_LT(seconds_since(start), 2.5) << "the read was not stopped at its deadline";
  h.a = kChunk;
  ASSERT_TRUE(idle.send(h, second.data(), second.size(), 0));
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(std::all_of(mem.begin() + kChunk, mem.end(), [](uint8_t b) { return b == 0; }))
      << "the second chunk landed after read() returned";
  EXPECT_TRUE(t.conn->health().ok()) << t.conn->health().to_string();
}

// A receive whose message stalls after its first chunk gets half of
// peer_timeout past its deadline to finish, then is stopped: the sender is
// told (its send fails) and nothing lands afterwards.
TEST(TcpHostileTime, AReceiveStoppedAtItsDeadlineTellsTheSender) {
  Target t;
  Options o = quick_options();
  o.peer_timeout = 4s;
  ASSERT_NO_FATAL_FAILURE(t.open(o));
  constexpr size_t kSize = 1 << 20;
  std::vector<uint8_t> mem(kSize, 0);
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  wire::FrameHeader rts;
  rts.type = wire::FrameType::kRts;
  rts.id = 41;
  rts.a = kSize;
  ASSERT_TRUE(t.peer.frame(rts));
  Status s;
  std::thread receiver([&] { s = t.conn->recv(mem.data(), kSize, after(1s)).status(); });
  auto cts = t.peer.next_control_frame(after(5s));
  ASSERT_TRUE(cts.ok()) << cts.status().to_string();
  ASSERT_EQ(cts->type, wire::FrameType::kCts);
  wire::FrameHeader h;
  h.type = wire::FrameType::kData;
  h.id = cts->a;
  h.payload_len = 4096;
  std::vector<uint8_t> part(4096, 0x33);
  const auto start = Clock::now();
  ASSERT_TRUE(t.peer.frame(h, part.data(), part.size(), 0));
  receiver.join();
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.to_string();
  EXPECT_LT(seconds_since(start), 1.0 + 2.0 + 1.0) << "the stalled receive was not stopped after its grace";
  auto ack = t.peer.next_control_frame(after(5s));
  ASSERT_TRUE(ack.ok()) << "the sender was not told: " << ack.status().to_string();
  EXPECT_EQ(ack->type, wire::FrameType::kAck);
  EXPECT_EQ(ack->id, 41u);
  EXPECT_EQ(ack->code, static_cast<uint32_t>(Code::kCancelled));
  h.a = 4096;
  ASSERT_TRUE(t.peer.frame(h, part.data(), part.size(), 0));
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(std::all_of(mem.begin() + 4096, mem.end(), [](uint8_t b) { return b == 0; }))
      << "a chunk landed after recv() returned";
  EXPECT_TRUE(t.conn->health().ok()) << t.conn->health().to_string();
}

// The peer writes 100 bytes of a chunk into an export and stalls, holding
// the region's reader mid-landing while it heartbeats: dereg returns within
// about peer_timeout (the stalled path is cut off), not whenever the peer
// likes.
TEST(TcpHostileTime, ADeregisterIsNotHeldByAWriteThePeerStalls) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(quick_options(), 2));
  std::vector<uint8_t> mem(1 << 20, 0);
  Region r = t.engine->reg(mem.data(), mem.size()).value();
  RemoteDescriptor d = t.engine->export_region(r, 0, mem.size()).value();
  AliveButIdle idle(t.peer);
  wire::FrameHeader h;
  h.type = wire::FrameType::kWrite;
  h.id = 12;
  h.a = d.export_id;
  h.b = d.key;
  h.d = mem.size();
  h.payload_len = 1 << 19;
  std::vector<uint8_t> some(100, 0x44);
  ASSERT_TRUE(idle.send(h, some.data(), some.size(), 0));
  // Not polled: the engine's reader writes `mem` meanwhile (the landing
  // holds the region); 300 ms is far more than 100 bytes take to land.
  std::this_thread::sleep_for(300ms);
  const auto start = Clock::now();
  Status s = t.engine->dereg(r);
  const double took = seconds_since(start);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_LT(took, 1.0 + 1.5) << "a stalled write held dereg() for " << took << " s";
}

}  // namespace
}  // namespace ferry::hostile
