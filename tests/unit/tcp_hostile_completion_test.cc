// Completion means the bytes are in place: a hostile peer's ACK cannot
// complete a read whose reply is still landing, and notifications past the
// documented limit are refused on both sides.
#include <cstring>

#include "core/notification_queue.h"
#include "hostile_peer.h"
#include "peek_landing.h"

namespace ferry::hostile {
namespace {

constexpr size_t kReadSize = 1 << 20;

// A read of kReadSize bytes from the hostile peer's (made-up) export, posted
// and asked for; `reply` is the header of its DATA.
struct PendingRead {
  Target t;
  std::vector<uint8_t> mem = std::vector<uint8_t>(kReadSize, 0);  // outlives the engine
  Transfer read;
  wire::FrameHeader reply;

  void start() {
    ASSERT_NO_FATAL_FAILURE(t.open());
    ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
    RemoteDescriptor far;
    far.engine_id = Peer::kEngineId;
    far.export_id = 5;
    far.key = 6;
    far.length = kReadSize;
    read = t.conn->read_async(mem.data(), mem.size(), far, 0);
    auto req = t.peer.next_control_frame(after(5s));
    ASSERT_TRUE(req.ok()) << req.status().to_string();
    ASSERT_EQ(req->type, wire::FrameType::kReadReq);
    reply.type = wire::FrameType::kData;
    reply.id = req->id;
  }

  void ack(Code code, const std::string& text = {}) {
    wire::FrameHeader h;
    h.type = wire::FrameType::kAck;
    h.id = reply.id;
    h.code = static_cast<uint32_t>(code);
    h.aux_len = static_cast<uint16_t>(text.size());
    ASSERT_TRUE(t.peer.frame(h, text.data(), text.size()));
  }
};

// The peer sends the first 1,000 bytes of its one chunk, then ACKs the read.
// The read must not complete while the rest of the chunk may still land: the
// ACK is a protocol error, and the read fails once its chunk stopped landing.
TEST(TcpHostileCompletion, AnAckForAReadWhoseChunkIsLandingDoesNotCompleteIt) {
  PendingRead r;
  ASSERT_NO_FATAL_FAILURE(r.start());
  wire::FrameHeader h = r.reply;
  h.payload_len = kReadSize;
  std::vector<uint8_t> first(1000, 0xab);
  ASSERT_TRUE(r.t.peer.frame(h, first.data(), first.size(), /*stream=*/0));
  ASSERT_TRUE(eventually([&] { return testing::peek_landing(&r.mem[999]) == 0xab; }, after(5s)))
      << "the first bytes never landed";
  ASSERT_NO_FATAL_FAILURE(r.ack(Code::kOk));
  Status s = r.read.wait(after(5s));
  EXPECT_FALSE(s.ok()) << "the read completed with " << (kReadSize - 1000) << " of its bytes still to come";
  EXPECT_NE(s.code(), Code::kDeadlineExceeded) << s.to_string();
  Status health = r.t.failure(after(5s));
  EXPECT_EQ(health.code(), Code::kDataLoss) << health.to_string();
}

// An ACK that completes a read successfully is never the answer to a read
// (its DATA is), even before any of it arrived.
TEST(TcpHostileCompletion, AnOkAckForAReadIsAProtocolError) {
  PendingRead r;
  ASSERT_NO_FATAL_FAILURE(r.start());
  ASSERT_NO_FATAL_FAILURE(r.ack(Code::kOk));
  Status s = r.read.wait(after(5s));
  EXPECT_FALSE(s.ok()) << "a read completed without a byte of it arriving";
  EXPECT_EQ(r.t.failure(after(5s)).code(), Code::kDataLoss) << r.t.conn->health().to_string();
}

// The peer's honest refusal (its export is gone) fails the read; DATA the
// peer sends for it afterwards is dropped, not landed.
TEST(TcpHostileCompletion, AnErrorAckBeforeAnyChunkFailsTheReadAndLaterChunksAreDropped) {
  PendingRead r;
  ASSERT_NO_FATAL_FAILURE(r.start());
  ASSERT_NO_FATAL_FAILURE(r.ack(Code::kNotFound, "no such export"));
  Status s = r.read.wait(after(5s));
  EXPECT_EQ(s.code(), Code::kNotFound) << s.to_string();
  wire::FrameHeader h = r.reply;
  std::vector<uint8_t> late(4096, 0xcd);
  h.payload_len = static_cast<uint32_t>(late.size());
  ASSERT_TRUE(r.t.peer.frame(h, late.data(), late.size(), /*stream=*/0));
  // A notification after the chunk shows it was read.
  wire::FrameHeader n;
  n.type = wire::FrameType::kNotify;
  n.e = 1;
  n.aux_len = 5;
  ASSERT_TRUE(r.t.peer.frame(n, "after", 5));
  auto note = r.t.conn->wait_notification(after(5s));
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(r.mem[0], 0) << "a chunk of a failed read landed";
  EXPECT_TRUE(r.t.conn->health().ok()) << r.t.conn->health().to_string();
}

// The peer acknowledges a bulk send right after clearing it, and a bulk write
// right after its first chunk, while most of their bytes were never sent:
// neither completes (the engine would still be reading memory the
// application believes free), the ACK is a protocol error.
constexpr size_t kBulk = 64u << 20;  // far more than a window of chunks and the socket buffers

void expect_early_ack_refused(Target& t, Transfer& op, uint64_t id) {
  wire::FrameHeader ack;
  ack.type = wire::FrameType::kAck;
  ack.id = id;
  ASSERT_TRUE(t.peer.frame(ack));
  Status s = op.wait(after(5s));
  EXPECT_FALSE(s.ok()) << "an operation completed with most of its bytes unsent";
  EXPECT_NE(s.code(), Code::kDeadlineExceeded) << s.to_string();
  EXPECT_EQ(t.failure(after(5s)).code(), Code::kDataLoss) << t.conn->health().to_string();
}

TEST(TcpHostileCompletion, AnAckForASendStillBeingSentDoesNotCompleteIt) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  std::vector<uint8_t> mem(kBulk, 1);
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  Transfer send = t.conn->send_async(mem.data(), mem.size());
  auto rts = t.peer.next_control_frame(after(5s));
  ASSERT_TRUE(rts.ok()) << rts.status().to_string();
  ASSERT_EQ(rts->type, wire::FrameType::kRts);
  wire::FrameHeader cts;
  cts.type = wire::FrameType::kCts;
  cts.id = rts->id;
  cts.a = 77;
  ASSERT_TRUE(t.peer.frame(cts));
  ASSERT_NO_FATAL_FAILURE(expect_early_ack_refused(t, send, rts->id));
}

TEST(TcpHostileCompletion, AnAckForAWriteStillBeingSentDoesNotCompleteIt) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  std::vector<uint8_t> mem(kBulk, 1);
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  RemoteDescriptor far;
  far.engine_id = Peer::kEngineId;
  far.export_id = 5;
  far.key = 6;
  far.length = kBulk;
  Transfer write = t.conn->write_async(mem.data(), mem.size(), far, 0);
  // The first chunk's header on the data stream names the op.
  wire::HeaderBytes hb;
  ASSERT_TRUE(platform::recv_exact(t.peer.data[0].fd(), hb.data(), hb.size()).ok());
  auto first = wire::decode_header(hb.data(), hb.size());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_EQ(first->type, wire::FrameType::kWrite);
  ASSERT_NO_FATAL_FAILURE(expect_early_ack_refused(t, write, first->id));
}

// The whole operation is one chunk, far larger than the socket buffers, and
// the peer reads none of it: every chunk was handed to a path, but the path
// is still writing that chunk from the application's memory when the peer
// acknowledges the operation on its first bytes. The operation must not
// complete while the path still reads that memory; it completes once the
// peer read the chunk and the path is done with it.
Options one_chunk() {
  Options o = Target::options();
  o.chunk_bytes = kBulk;
  return o;
}

void expect_ack_held_until_sent(Target& t, Transfer& op, uint64_t id, const wire::FrameHeader& first) {
  wire::FrameHeader ack;
  ack.type = wire::FrameType::kAck;
  ack.id = id;
  ASSERT_TRUE(t.peer.frame(ack));
  Status early = op.wait(after(300ms));
  EXPECT_EQ(early.code(), Code::kDeadlineExceeded)
      << "the operation completed while a path was still sending its memory: " << early.to_string();
  EXPECT_TRUE(t.conn->health().ok()) << t.conn->health().to_string();
  // The peer reads the chunk: the path finishes with the memory.
  std::vector<uint8_t> sink(1 << 20);
  size_t left = first.aux_len + first.payload_len;
  const Deadline deadline = after(10s);
  while (left > 0 && Clock::now() < deadline) {
    pollfd p{t.peer.data[0].fd(), POLLIN, 0};
    if (::poll(&p, 1, 10) <= 0) continue;
    ssize_t n = ::recv(p.fd, sink.data(), std::min(sink.size(), left), MSG_DONTWAIT);
    if (n > 0) left -= static_cast<size_t>(n);
    if (n == 0) break;
  }
  ASSERT_EQ(left, 0u) << "the chunk was not sent in full";
  Status s = op.wait(after(5s));
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(t.conn->health().ok()) << t.conn->health().to_string();
}

// The first chunk's header on data stream 0.
wire::FrameHeader first_chunk(Target& t) {
  wire::HeaderBytes hb;
  EXPECT_TRUE(platform::recv_exact(t.peer.data[0].fd(), hb.data(), hb.size()).ok());
  auto h = wire::decode_header(hb.data(), hb.size());
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  return h.ok() ? *h : wire::FrameHeader{};
}

TEST(TcpHostileCompletion, AnAckForASendWhoseLastChunkIsStillBeingSentWaitsForIt) {
  std::vector<uint8_t> mem(kBulk, 1);  // outlives the engine
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(one_chunk()));
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  Transfer send = t.conn->send_async(mem.data(), mem.size());
  auto rts = t.peer.next_control_frame(after(5s));
  ASSERT_TRUE(rts.ok()) << rts.status().to_string();
  ASSERT_EQ(rts->type, wire::FrameType::kRts);
  wire::FrameHeader cts;
  cts.type = wire::FrameType::kCts;
  cts.id = rts->id;
  cts.a = 77;
  ASSERT_TRUE(t.peer.frame(cts));
  wire::FrameHeader first = first_chunk(t);
  ASSERT_EQ(first.type, wire::FrameType::kData);
  ASSERT_EQ(first.payload_len, kBulk);
  ASSERT_NO_FATAL_FAILURE(expect_ack_held_until_sent(t, send, rts->id, first));
}

TEST(TcpHostileCompletion, AnAckForAWriteWhoseLastChunkIsStillBeingSentWaitsForIt) {
  std::vector<uint8_t> mem(kBulk, 1);  // outlives the engine
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(one_chunk()));
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  RemoteDescriptor far;
  far.engine_id = Peer::kEngineId;
  far.export_id = 5;
  far.key = 6;
  far.length = kBulk;
  Transfer write = t.conn->write_async(mem.data(), mem.size(), far, 0);
  wire::FrameHeader first = first_chunk(t);
  ASSERT_EQ(first.type, wire::FrameType::kWrite);
  ASSERT_EQ(first.payload_len, kBulk);
  ASSERT_NO_FATAL_FAILURE(expect_ack_held_until_sent(t, write, first.id, first));
}

// ---- notification size ----------------------------------------------------------

const std::string kTooLong(Connection::kMaxNotification + 1, 'x');

TEST(TcpHostileCompletion, ANotificationPastTheLimitFailsTheConnection) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  std::string text(wire::kMaxAux, 'n');
  wire::FrameHeader h;
  h.type = wire::FrameType::kNotify;
  h.e = 1;
  h.aux_len = static_cast<uint16_t>(text.size());
  ASSERT_TRUE(t.peer.frame(h, text.data(), text.size()));
  Status s = t.failure(after(5s));
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find(std::to_string(Connection::kMaxNotification)), std::string::npos) << s.to_string();
  EXPECT_FALSE(t.conn->poll_notification().has_value()) << "a notification past the limit was delivered";
}

TEST(TcpHostileCompletion, AWriteCarryingANotificationPastTheLimitFailsTheConnection) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  std::vector<uint8_t> mem(4096, 0);
  Region r = t.engine->reg(mem.data(), mem.size()).value();
  RemoteDescriptor d = t.engine->export_region(r, 0, mem.size()).value();
  std::string text(wire::kMaxAux, 'w');
  wire::FrameHeader h;
  h.type = wire::FrameType::kWrite;
  h.id = 3;
  h.a = d.export_id;
  h.b = d.key;
  h.d = 16;
  h.e = 1;
  h.payload_len = 16;
  h.aux_len = static_cast<uint16_t>(text.size());
  text += std::string(16, 'p');
  ASSERT_TRUE(t.peer.frame(h, text.data(), text.size()));
  Status s = t.failure(after(5s));
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.to_string();
  EXPECT_FALSE(t.conn->poll_notification().has_value()) << "a notification past the limit was delivered";
}

TEST(TcpHostileCompletion, SendingANotificationPastTheLimitIsRefused) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  std::vector<uint8_t> mem(64, 0);
  ASSERT_TRUE(t.engine->reg(mem.data(), mem.size()).ok());
  RemoteDescriptor far;
  far.engine_id = Peer::kEngineId;
  far.length = 64;
  EXPECT_EQ(t.conn->notify_async(kTooLong).wait(after(1s)).code(), Code::kInvalidArgument);
  EXPECT_EQ(t.conn->write_async(mem.data(), 8, far, 0, kTooLong).wait(after(1s)).code(), Code::kInvalidArgument);
  WriteItem items[2] = {{mem.data(), 8, far, 0}, {mem.data() + 8, 8, far, 8}};
  EXPECT_EQ(t.conn->writev_async(items, kTooLong).wait(after(1s)).code(), Code::kInvalidArgument);
  EXPECT_TRUE(t.conn->health().ok());
}

// The queue every transport delivers through refuses what no sender may send.
TEST(NotificationQueueLimit, ANotificationPastTheLimitIsRefused) {
  core::NotificationQueue q;
  EXPECT_EQ(q.push_numbered(1, false, kTooLong).code(), Code::kDataLoss);
  EXPECT_EQ(q.push_numbered(0, false, kTooLong).code(), Code::kDataLoss);
  EXPECT_FALSE(q.poll(true).has_value());
  EXPECT_TRUE(q.push_numbered(1, false, std::string(Connection::kMaxNotification, 'y')).ok());
  EXPECT_TRUE(q.poll(true).has_value());
}

}  // namespace
}  // namespace ferry::hostile
