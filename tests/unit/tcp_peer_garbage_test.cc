// A TCP engine facing a hand-made peer that speaks the handshake and then
// misbehaves on the control stream: what it sends is refused with a clear
// error, and nothing the engine's application waits on is left pending.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "../hand_made_identity.h"
#include "ferry/ferry.h"
#include "platform/socket.h"
#include "transport/handshake_io.h"
#include "peek_landing.h"
#include "sanitizer_build.h"
#include "testing/hand_made_handshake.h"
#include "transport/tcp/staging_copier.h"
#include "wire/handshake.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// Connects as an engine would (no secret), with `streams` data streams; then
// frames, on the control stream or on a data stream.
struct HandMadePeer {
  static inline const uint64_t kEngineId = testing::hand_made_engine_id();
  platform::Socket ctl;
  std::vector<platform::Socket> data;

  bool dial(const std::string& address, int streams) {
    auto hp = platform::parse_host_port(address);
    if (!hp.ok()) return false;
    Deadline d = after(5s);
    auto c = platform::connect_tcp(hp.value(), d);
    if (!c.ok()) return false;
    ctl = std::move(c).value();
    return testing::hand_made_tcp_handshake(ctl.fd(), hp.value(), "hand-made-peer", streams, d, data).ok();
  }

  // A frame header and the bytes after it (aux, then payload) on the control
  // stream (stream -1) or on data stream `stream`.
  bool frame(const wire::FrameHeader& h, const void* after_header = nullptr, size_t n = 0, int stream = -1) {
    int fd = stream < 0 ? ctl.fd() : data[static_cast<size_t>(stream)].fd();
    wire::HeaderBytes hb;
    wire::encode_header(h, hb);
    if (::send(fd, hb.data(), hb.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hb.size())) return false;
    return n == 0 || ::send(fd, after_header, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }

  // The next frame on the control stream other than a heartbeat (its aux is
  // read and dropped), within `deadline`.
  Result<wire::FrameHeader> next_control_frame(Deadline deadline) {
    for (;;) {
      pollfd p{ctl.fd(), POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
        return Status(Code::kDeadlineExceeded, "no control frame");
      }
      wire::HeaderBytes hb;
      FERRY_RETURN_IF_ERROR(platform::recv_exact(ctl.fd(), hb.data(), hb.size()));
      FERRY_ASSIGN_OR_RETURN(wire::FrameHeader h, wire::decode_header(hb.data(), hb.size()));
      std::string aux(h.aux_len, '\0');
      if (h.aux_len > 0) FERRY_RETURN_IF_ERROR(platform::recv_exact(ctl.fd(), aux.data(), aux.size()));
      if (h.type != wire::FrameType::kHeartbeat) return h;
    }
  }

  // Whether the engine closed data stream `stream` within `deadline`.
  bool data_stream_closed(int stream, Deadline deadline) {
    int fd = data[static_cast<size_t>(stream)].fd();
    while (Clock::now() < deadline) {
      char c;
      ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
};

struct Target {
  std::unique_ptr<Engine> engine;
  std::shared_ptr<Connection> conn;
  HandMadePeer peer;

  void open(int streams = 1) {
    Options o;
    o.transport = TransportChoice::kTcp;
    o.listen = "127.0.0.1:0";
    engine = Engine::create(o).value();
    ASSERT_TRUE(peer.dial(engine->address(), streams));
    auto c = engine->accept(after(5s));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    conn = std::move(c).value();
  }
};

// A connector that offers only a version older than this engine accepts is
// turned away at the handshake with a reason that names both versions, and no
// connection is accepted (protocol_version_test.cc has the previous
// protocol's own encoding, and ranges).
TEST(TcpPeerGarbage, AnotherProtocolVersionIsRefusedAtTheHandshake) {
  Options o;
  o.transport = TransportChoice::kTcp;
  o.listen = "127.0.0.1:0";
  auto engine = Engine::create(o).value();
  auto hp = platform::parse_host_port(engine->address());
  ASSERT_TRUE(hp.ok());
  Deadline d = after(5s);
  auto c = platform::connect_tcp(hp.value(), d);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  wire::Hello hello;
  hello.min_version = hello.version = wire::kMinProtocolVersion - 1;
  hello.engine_id = 0x1234;
  hello.host_id = "older-peer";
  ASSERT_TRUE(bootstrap::write_handshake_frame(c->fd(), wire::encode(hello), d).ok());
  auto f = bootstrap::read_handshake_frame(c->fd(), d);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto rejected = wire::decode_rejected(f->header, f->aux);
  ASSERT_TRUE(rejected.ok()) << "expected REJECTED, got frame type " << static_cast<int>(f->header.type);
  EXPECT_EQ(rejected->code, Code::kUnimplemented);
  EXPECT_NE(rejected->message.find(wire::to_string(wire::kSpokenVersions)), std::string::npos) << rejected->message;
  EXPECT_NE(rejected->message.find("version " + std::to_string(wire::kMinProtocolVersion - 1)), std::string::npos)
      << rejected->message;
  EXPECT_FALSE(engine->accept(after(200ms)).ok());
}

// An inline message header larger than any engine sends inline would have
// the engine allocate up to the frame limit before a byte arrived: refused.
TEST(TcpPeerGarbage, AnInlineMessageLargerThanAnyEngineSendsFailsTheConnection) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  wire::FrameHeader h;
  h.type = wire::FrameType::kEager;
  h.id = 1;
  h.a = h.payload_len = 1u << 30;
  ASSERT_TRUE(t.peer.frame(h));
  auto until = after(5s);
  while (t.conn->health().ok() && Clock::now() < until) std::this_thread::sleep_for(5ms);
  Status health = t.conn->health();
  EXPECT_EQ(health.code(), Code::kDataLoss) << health.to_string();
  EXPECT_NE(health.message().find("inline"), std::string::npos) << health.to_string();
}

// A receive matched by an inline message whose sender dies mid-payload ends
// with the connection's failure instead of waiting forever.
TEST(TcpPeerGarbage, AReceiveWhoseInlineMessageBreaksOffFails) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  std::vector<uint8_t> buf(1 << 20);
  ASSERT_TRUE(t.engine->reg(buf.data(), buf.size()).ok());
  Transfer r = t.conn->recv_async(buf.data(), buf.size());
  wire::FrameHeader h;
  h.type = wire::FrameType::kEager;
  h.id = 1;
  h.a = h.payload_len = 60000;
  char part[100] = {};
  ASSERT_TRUE(t.peer.frame(h, part, sizeof part));  // 100 of 60,000 bytes, then gone
  t.peer.ctl.reset();
  t.peer.data.clear();
  Status s = r.wait(after(10s));
  EXPECT_NE(s.code(), Code::kDeadlineExceeded) << "the receive was left pending";
  EXPECT_FALSE(s.ok());
}

// A write the sender aborted (its source deregistered) while other chunks of
// it were still on their way: those chunks are dropped, not landed in an
// entry for a write that can never complete.
TEST(TcpPeerGarbage, ChunksOfAnAbortedWriteThatArriveLateAreDropped) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  std::vector<uint8_t> mem(8192, 0);
  Region r = t.engine->reg(mem.data(), mem.size()).value();
  auto desc = t.engine->export_region(r, 0, 0).value();
  wire::FrameHeader h;
  h.type = wire::FrameType::kWrite;
  h.id = 7;
  h.a = desc.export_id;
  h.b = desc.key;
  h.d = 8192;
  h.flags = 2;  // aborted: no payload
  ASSERT_TRUE(t.peer.frame(h));
  std::vector<uint8_t> late(4096, 0x77);
  h.flags = 0;
  h.c = 4096;
  h.payload_len = static_cast<uint32_t>(late.size());
  ASSERT_TRUE(t.peer.frame(h, late.data(), late.size()));
  // A notification after them shows both frames were read.
  wire::FrameHeader n;
  n.type = wire::FrameType::kNotify;
  n.e = 1;
  const char text[] = "after";
  n.aux_len = sizeof text - 1;
  ASSERT_TRUE(t.peer.frame(n, text, sizeof text - 1));
  auto note = t.conn->wait_notification(after(5s));
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(note.value(), "after");
  EXPECT_EQ(mem[4096], 0) << "a chunk of the aborted write landed";
  EXPECT_TRUE(t.conn->health().ok());
}

// The peer gives up a path in the middle of a chunk (a link that stalled)
// and resends the chunk on another path, which completes the operation. What
// the stalled path brings later must not land in memory the application has
// taken back since: the target shuts that path as the resend arrives, and
// completes the operation only once the stalled chunk stopped being written.
// Bytes of the chunk the peer sends on each path; the first part of the
// stalled copy, then the rest, which differs (a stale copy must not land).
struct StalledChunk {
  static constexpr size_t kSize = 96 * 1024 + 13;
  static constexpr size_t kFirst = 20 * 1024 + 7;  // what the stalled path brings before it stalls
  std::vector<uint8_t> bytes = random_bytes(kSize, 11);
  std::vector<uint8_t> stale_rest = random_bytes(kSize - kFirst, 12);

  static std::vector<uint8_t> random_bytes(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
  }
};

// After the operation ended: the application takes `mem` back (fills it
// with a mark), the stalled path's late bytes are sent, the target has shut
// that path, and `mem` keeps the mark.
void stale_bytes_do_not_land(Target& t, const StalledChunk& c, std::vector<uint8_t>& mem) {
  const uint8_t mark = 0x5a;
  std::memset(mem.data(), mark, mem.size());
  (void)::send(t.peer.data[0].fd(), c.stale_rest.data(), c.stale_rest.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(t.peer.data_stream_closed(0, after(3s))) << "the stalled path was left open";
  // Bytes still in flight on loopback arrive within microseconds; give the
  // target's path worker ample time to have written them, were it reading.
  std::this_thread::sleep_for(200ms);
  size_t changed = 0;
  for (uint8_t b : mem) changed += b != mark;
  EXPECT_EQ(changed, 0u) << "bytes of the stalled path landed after the operation completed";
  EXPECT_TRUE(t.conn->health().ok()) << t.conn->health().to_string();
}

// Whether `n` bytes at `mem` came to equal `want` within `deadline`.
bool wait_for_bytes(const volatile uint8_t* mem, const std::vector<uint8_t>& want, size_t n, Deadline deadline) {
  while (Clock::now() < deadline) {
    size_t i = 0;
    while (i < n && testing::peek_landing(&mem[i]) == want[i]) ++i;
    if (i == n) return true;
    std::this_thread::sleep_for(2ms);
  }
  return false;
}

// The hand-made peer's (made-up) export of StalledChunk::kSize bytes.
RemoteDescriptor peer_export() {
  RemoteDescriptor far;
  far.engine_id = HandMadePeer::kEngineId;
  far.export_id = 5;
  far.key = 6;
  far.length = StalledChunk::kSize;
  return far;
}

// A read of StalledChunk::kSize bytes into `mem` (registered here) from the
// hand-made peer, posted and asked for; `reply` is the header of its DATA.
void start_read(Target& t, std::vector<uint8_t>& mem, Transfer& read, wire::FrameHeader& reply) {
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  RemoteDescriptor far = peer_export();
  read = t.conn->read_async(mem.data(), mem.size(), far, 0);
  auto req = t.peer.next_control_frame(after(5s));
  ASSERT_TRUE(req.ok()) << req.status().to_string();
  ASSERT_EQ(req->type, wire::FrameType::kReadReq);
  reply.type = wire::FrameType::kData;
  reply.id = req->id;
  reply.payload_len = static_cast<uint32_t>(StalledChunk::kSize);
}

// Chunk `h` (after `aux`) on data stream 0, which stalls after its first
// part; returns once that part is at `lands_at`.
void stall_on_stream_zero(Target& t, const wire::FrameHeader& h, const std::string& aux, const StalledChunk& c,
                          const uint8_t* lands_at) {
  std::vector<uint8_t> first(aux.begin(), aux.end());
  first.insert(first.end(), c.bytes.begin(), c.bytes.begin() + StalledChunk::kFirst);
  ASSERT_TRUE(t.peer.frame(h, first.data(), first.size(), /*stream=*/0));
  ASSERT_TRUE(wait_for_bytes(lands_at, c.bytes, StalledChunk::kFirst, after(5s))) << "the first part never landed";
}

// A target with `streams` data streams whose read from the peer has the
// first part of its chunk landed through stream 0, which then stalls.
struct StalledRead {
  StalledChunk c;
  std::vector<uint8_t> mem = std::vector<uint8_t>(StalledChunk::kSize, 0);  // outlives the engine
  Target t;
  Transfer read;
  wire::FrameHeader h;

  void start(int streams) {
    ASSERT_NO_FATAL_FAILURE(t.open(streams));
    ASSERT_NO_FATAL_FAILURE(start_read(t, mem, read, h));
    ASSERT_NO_FATAL_FAILURE(stall_on_stream_zero(t, h, "", c, mem.data()));
  }
};

// `h` as an aborted frame (no payload) for the chunk at `offset`.
wire::FrameHeader aborted_frame(wire::FrameHeader h, uint64_t offset) {
  h.flags = 2;
  h.code = static_cast<uint32_t>(Code::kNotFound);
  h.payload_len = 0;
  h.aux_len = 0;
  (h.type == wire::FrameType::kData ? h.a : h.c) = offset;
  return h;
}

// A write of StalledChunk::kSize bytes into `desc`, as the peer frames it.
wire::FrameHeader write_frame(uint64_t op, const RemoteDescriptor& desc) {
  wire::FrameHeader h;
  h.type = wire::FrameType::kWrite;
  h.id = op;
  h.a = desc.export_id;
  h.b = desc.key;
  h.d = StalledChunk::kSize;
  h.payload_len = static_cast<uint32_t>(StalledChunk::kSize);
  return h;
}

TEST(TcpPeerGarbage, AWriteChunkResentOnAnotherPathLandsOnceAndTheStalledPathIsShut) {
  if (sanitizer_build::kThread) GTEST_SKIP() << sanitizer_build::kTwoPathsLandOneChunk;
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(2));
  StalledChunk c;
  std::vector<uint8_t> mem(StalledChunk::kSize + 100, 0);
  Region r = t.engine->reg(mem.data(), mem.size()).value();
  auto desc = t.engine->export_region(r, 50, StalledChunk::kSize).value();
  const std::string note = "written";
  wire::FrameHeader h = write_frame(9, desc);
  h.e = 1;
  h.aux_len = static_cast<uint16_t>(note.size());
  ASSERT_NO_FATAL_FAILURE(stall_on_stream_zero(t, h, note, c, mem.data() + 50));
  std::vector<uint8_t> whole(note.begin(), note.end());
  whole.insert(whole.end(), c.bytes.begin(), c.bytes.end());
  ASSERT_TRUE(t.peer.frame(h, whole.data(), whole.size(), /*stream=*/1));
  auto got = t.conn->wait_notification(after(5s));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got.value(), note);
  ASSERT_EQ(std::memcmp(mem.data() + 50, c.bytes.data(), c.bytes.size()), 0) << "the resent chunk did not land";
  stale_bytes_do_not_land(t, c, mem);
}

TEST(TcpPeerGarbage, AReadReplyChunkResentOnAnotherPathLandsOnceAndTheStalledPathIsShut) {
  if (sanitizer_build::kThread) GTEST_SKIP() << sanitizer_build::kTwoPathsLandOneChunk;
  StalledRead r;
  ASSERT_NO_FATAL_FAILURE(r.start(2));
  ASSERT_TRUE(r.t.peer.frame(r.h, r.c.bytes.data(), r.c.bytes.size(), /*stream=*/1));
  Status s = r.read.wait(after(5s));
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(r.mem, r.c.bytes) << "the resent chunk did not land";
  stale_bytes_do_not_land(r.t, r.c, r.mem);
}

// As above, but the read was aborted by its sender meanwhile. The first
// aborted frame names another chunk: the read waits for the chunk still being
// written. The chunk moved off the stalled path then comes back empty and
// marked aborted: the read fails at once, the stalled path is shut, and
// nothing of it lands after the read failed.
TEST(TcpPeerGarbage, AnAbortedReadWhoseChunkStalledFailsAndTheStalledPathIsShut) {
  StalledRead r;
  ASSERT_NO_FATAL_FAILURE(r.start(3));
  wire::FrameHeader another = aborted_frame(r.h, 64 * 1024);
  ASSERT_TRUE(r.t.peer.frame(another, nullptr, 0, /*stream=*/2));
  EXPECT_EQ(r.read.wait(after(300ms)).code(), Code::kDeadlineExceeded)
      << "the read ended while a chunk was still being written into it";
  wire::FrameHeader moved = aborted_frame(r.h, 0);  // the chunk the stalled path was bringing
  ASSERT_TRUE(r.t.peer.frame(moved, nullptr, 0, /*stream=*/1));
  Status s = r.read.wait(after(5s));
  EXPECT_NE(s.code(), Code::kDeadlineExceeded) << "the read waited for the stalled path";
  EXPECT_FALSE(s.ok());
  stale_bytes_do_not_land(r.t, r.c, r.mem);
}

// The same for a write into this side's export: the peer aborts it while
// one of its chunks stalls on a path, then moves that chunk off the path
// (empty, marked aborted). The path is shut and nothing of it lands in the
// export after the abort, where the peer may write again.
TEST(TcpPeerGarbage, AnAbortedWriteWhoseChunkStalledShutsTheStalledPath) {
  if (sanitizer_build::kThread) GTEST_SKIP() << sanitizer_build::kExportWrittenBySocketOrder;
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(3));
  StalledChunk c;
  std::vector<uint8_t> mem(StalledChunk::kSize, 0);
  Region r = t.engine->reg(mem.data(), mem.size()).value();
  auto desc = t.engine->export_region(r, 0, StalledChunk::kSize).value();
  wire::FrameHeader h = write_frame(11, desc);
  ASSERT_NO_FATAL_FAILURE(stall_on_stream_zero(t, h, "", c, mem.data()));
  wire::FrameHeader another = aborted_frame(h, 64 * 1024);
  ASSERT_TRUE(t.peer.frame(another, nullptr, 0, /*stream=*/2));
  wire::FrameHeader moved = aborted_frame(h, 0);  // the chunk the stalled path was bringing
  ASSERT_TRUE(t.peer.frame(moved, nullptr, 0, /*stream=*/1));
  EXPECT_TRUE(t.peer.data_stream_closed(0, after(3s))) << "the stalled path was left open";
  stale_bytes_do_not_land(t, c, mem);
}

// A copy that holds one staged chunk back (host memory standing in for
// device memory): the first copy into [lo, hi) waits until open() or 10 s.
struct HeldCopy {
  std::mutex mu;
  std::condition_variable cv;
  bool opened = false;
  std::atomic<int> entered{0};
  uintptr_t lo = 0, hi = 0;

  void see(const void* dst) {
    auto d = reinterpret_cast<uintptr_t>(dst);
    if (d < lo || d >= hi || entered.fetch_add(1) != 0) return;
    std::unique_lock lock(mu);
    cv.wait_for(lock, 10s, [&] { return opened; });
  }
  void open() {
    std::lock_guard lock(mu);
    opened = true;
    cv.notify_all();
  }
};

// A target whose staging copies (host memory standing in for device
// memory) hold back the first copy into `mem`, and a read into `mem` from
// the hand-made peer, posted and asked for.
struct HeldCopyRead {
  std::shared_ptr<HeldCopy> held = std::make_shared<HeldCopy>();
  StalledChunk c;
  std::vector<uint8_t> mem = std::vector<uint8_t>(StalledChunk::kSize, 0);  // outlives the engine
  Target t;
  Transfer read;
  wire::FrameHeader h;

  HeldCopyRead() {
    auto copies = held;
    tcp::set_staging_hooks_for_tests(tcp::StagingHooks{
        [copies] {
          return tcp::make_host_copier(0us, [copies](const void* d, const void*, size_t) { copies->see(d); });
        },
        /*stage_host=*/true});
    held->lo = reinterpret_cast<uintptr_t>(mem.data());
    held->hi = held->lo + mem.size();
  }
  ~HeldCopyRead() { tcp::set_staging_hooks_for_tests({}); }

  void start(int streams) {
    ASSERT_NO_FATAL_FAILURE(t.open(streams));
    ASSERT_NO_FATAL_FAILURE(start_read(t, mem, read, h));
  }
  // Sends `h` with the first `n` bytes of the chunk on stream 0 and returns
  // once their copy is being held.
  void send_held(size_t n) {
    ASSERT_TRUE(t.peer.frame(h, c.bytes.data(), n, /*stream=*/0));
    auto until = after(5s);
    while (held->entered.load() == 0 && Clock::now() < until) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(held->entered.load(), 1) << "the copy never started";
  }
};

// A read whose chunk is resent on a second path while the first copy of it
// is still being copied into the read's memory (a slow staging copy): the
// read completes only after that copy ended, never while it could still
// write into memory the application was told is its own.
TEST(TcpPeerGarbage, AReadCompletesOnlyWhenNoCopyOfItsChunksIsStillWriting) {
  if (sanitizer_build::kThread) GTEST_SKIP() << sanitizer_build::kTwoPathsLandOneChunk;
  HeldCopyRead r;
  ASSERT_NO_FATAL_FAILURE(r.start(2));
  ASSERT_NO_FATAL_FAILURE(r.send_held(r.c.bytes.size()));
  ASSERT_TRUE(r.t.peer.frame(r.h, r.c.bytes.data(), r.c.bytes.size(), /*stream=*/1));
  EXPECT_EQ(r.read.wait(after(500ms)).code(), Code::kDeadlineExceeded)
      << "the read completed while a copy into its memory was held back";
  r.held->open();
  Status s = r.read.wait(after(5s));
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(r.mem, r.c.bytes);
}

// The connection fails while a staging copy is still writing a read's chunk
// into its memory: the read ends only once that copy ended, so the memory
// is the application's again when it hears of the failure.
TEST(TcpPeerGarbage, AReadOnAFailedConnectionEndsOnlyWhenNoCopyIntoItIsRunning) {
  HeldCopyRead r;
  ASSERT_NO_FATAL_FAILURE(r.start(1));
  r.h.payload_len = static_cast<uint32_t>(StalledChunk::kFirst);  // one chunk of two
  ASSERT_NO_FATAL_FAILURE(r.send_held(StalledChunk::kFirst));
  r.t.peer.ctl.reset();  // the peer goes away
  r.t.peer.data.clear();
  auto until = after(5s);
  while (r.t.conn->health().ok() && Clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_FALSE(r.t.conn->health().ok());
  EXPECT_EQ(r.read.wait(after(300ms)).code(), Code::kDeadlineExceeded)
      << "the read ended while a copy into its memory was held back";
  r.held->open();
  Status s = r.read.wait(after(5s));
  EXPECT_NE(s.code(), Code::kDeadlineExceeded) << "the read never ended";
  EXPECT_FALSE(s.ok()) << "half of the read's bytes never came";
  EXPECT_EQ(std::memcmp(r.mem.data(), r.c.bytes.data(), StalledChunk::kFirst), 0) << "the held copy did not complete";
}


// The connection fails while a staging copy is still reading the first chunk
// of a write out of the application's memory: the write ends only once that
// copy ended (a path worker lets go of a chunk only after it), so the
// memory is the application's again when it hears of the failure.
TEST(TcpPeerGarbage, AWriteOnAFailedConnectionEndsOnlyWhenNoCopyFromItIsRunning) {
  auto held = std::make_shared<HeldCopy>();
  std::vector<uint8_t> mem = StalledChunk::random_bytes(StalledChunk::kSize, 13);  // outlives the engine
  held->lo = reinterpret_cast<uintptr_t>(mem.data());
  held->hi = held->lo + mem.size();
  tcp::set_staging_hooks_for_tests(tcp::StagingHooks{
      [held] { return tcp::make_host_copier(0us, [held](const void*, const void* src, size_t) { held->see(src); }); },
      /*stage_host=*/true});
  struct Unhook {
    ~Unhook() { tcp::set_staging_hooks_for_tests({}); }
  } unhook;
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(1));
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  RemoteDescriptor far = peer_export();
  Transfer write = t.conn->write_async(mem.data(), mem.size(), far, 0);
  auto until = after(5s);
  while (held->entered.load() == 0 && Clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(held->entered.load(), 1) << "the copy never started";
  t.peer.ctl.reset();  // the peer goes away
  t.peer.data.clear();
  until = after(5s);
  while (t.conn->health().ok() && Clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_FALSE(t.conn->health().ok());
  EXPECT_EQ(write.wait(after(300ms)).code(), Code::kDeadlineExceeded)
      << "the write ended while a copy from its memory was held back";
  held->open();
  Status s = write.wait(after(5s));
  EXPECT_NE(s.code(), Code::kDeadlineExceeded) << "the write never ended";
  EXPECT_FALSE(s.ok()) << "the peer went away before any byte was sent";
}

}  // namespace
}  // namespace ferry
