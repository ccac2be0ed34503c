// Aborted writes from a hostile peer: each one's notification is told to the
// application once, as not delivered, counts toward the connection's
// budget like any notification, and nothing of the write lands after it.
#include "hostile_peer.h"
#include "own_network_namespace.h"
#include "wire/messages.h"

namespace ferry::hostile {
namespace {

// A WRITE chunk of op `op` (a write of `total` bytes into `d`) at `offset`:
// `payload` bytes, or none and aborted; `note` as its aux.
std::string write_chunk(const RemoteDescriptor& d, uint64_t op, uint64_t total, uint64_t offset, uint64_t seq,
                        const std::string& note, const std::string& payload, bool aborted) {
  wire::FrameHeader h;
  h.type = wire::FrameType::kWrite;
  h.id = op;
  h.a = d.export_id;
  h.b = d.key;
  h.c = offset;
  h.d = total;
  h.e = seq;
  h.flags = aborted ? wire::kFlagAborted : 0;
  h.aux_len = static_cast<uint16_t>(note.size());
  h.payload_len = static_cast<uint32_t>(payload.size());
  return encoded(h, note + payload);
}

TEST(TcpHostileAbort, AnAbortedWriteIsToldOnceAndNothingOfItLandsAfter) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  std::vector<uint8_t> mem(8192, 0);
  Region r = t.engine->reg(mem.data(), mem.size()).value();
  RemoteDescriptor d = t.engine->export_region(r, 0, mem.size()).value();
  const std::string first(4096, 'a');
  const std::string late(4096, 'b');

  ASSERT_TRUE(t.peer.send_unless_stalled(write_chunk(d, 5, 8192, 0, 1, "tag", first, false)));
  ASSERT_TRUE(t.peer.send_unless_stalled(write_chunk(d, 5, 8192, 4096, 1, "tag", {}, true)));
  // The abort is answered once nothing of the write lands any more.
  std::string why;
  auto ack = t.peer.next_control_frame(after(5s), &why);
  ASSERT_TRUE(ack.ok()) << ack.status().to_string();
  EXPECT_EQ(ack->type, wire::FrameType::kAck);
  EXPECT_EQ(ack->id, 5u);
  EXPECT_EQ(ack->code, static_cast<uint32_t>(Code::kCancelled)) << why;

  // Its chunks again, aborted and not: dropped, and not told a second time.
  ASSERT_TRUE(t.peer.send_unless_stalled(write_chunk(d, 5, 8192, 4096, 1, "tag again", {}, true)));
  ASSERT_TRUE(t.peer.send_unless_stalled(write_chunk(d, 5, 8192, 4096, 1, "tag", late, false)));
  wire::FrameHeader fence;
  fence.type = wire::FrameType::kNotify;
  fence.e = 2;
  fence.aux_len = 5;
  ASSERT_TRUE(t.peer.send_unless_stalled(encoded(fence, "fence")));

  auto told = t.conn->wait_note(after(5s));
  ASSERT_TRUE(told.ok()) << told.status().to_string();
  EXPECT_EQ(told->message, "tag");
  EXPECT_FALSE(told->delivered);
  auto next = t.conn->wait_note(after(5s));
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_EQ(next->message, "fence");
  EXPECT_TRUE(next->delivered);
  EXPECT_FALSE(t.conn->poll_note().has_value());
  EXPECT_EQ(std::string(mem.begin(), mem.begin() + 4096), first);
  EXPECT_EQ(std::string(mem.begin() + 4096, mem.end()), std::string(4096, '\0')) << "a chunk landed after the abort";
  EXPECT_TRUE(t.conn->health().ok()) << t.conn->health().to_string();
}

// Aborted writes of ops the engine never saw, each with a notification the
// application never takes: past the budget the connection fails, and the
// application never held more than the budget.
TEST(TcpHostileAbort, AbortedWritesNobodyPollsPastTheBudgetFailTheConnection) {
  constexpr size_t kBudget = 1 << 20;
  Options o = Target::options();
  o.connection_memory_bytes = kBudget;
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open(o));
  std::vector<uint8_t> mem(4096, 0);
  Region r = t.engine->reg(mem.data(), mem.size()).value();
  RemoteDescriptor d = t.engine->export_region(r, 0, mem.size()).value();
  const std::string note(Connection::kMaxNotification, 'n');
  uint64_t op = 1;
  for (int batches = 0; batches < 64 && t.conn->health().ok(); ++batches) {
    std::string batch;
    // Numbered from 1 and unnumbered in turn: both are queued for the application.
    while (batch.size() < (256u << 10)) {
      batch += write_chunk(d, op, mem.size(), 0, op % 2 == 1 ? (op + 1) / 2 : 0, note, {}, true);
      ++op;
    }
    if (!t.peer.send_unless_stalled(batch)) break;
  }
  Status s = t.failure(after(5s));
  EXPECT_EQ(s.code(), Code::kResourceExhausted) << s.to_string();
  EXPECT_NE(s.message().find("connection_memory_bytes"), std::string::npos) << s.to_string();
  size_t held = 0;
  size_t count = 0;
  while (auto n = t.conn->poll_note()) {
    EXPECT_FALSE(n->delivered);
    EXPECT_EQ(n->message, note);
    held += n->message.size();
    ++count;
  }
  EXPECT_GT(count, 0u) << "no aborted write's notification was told";
  EXPECT_LE(held, kBudget);
  EXPECT_EQ(mem, std::vector<uint8_t>(4096, 0));
  still_serves_others(*t.engine);
}

// A connection that failed takes nothing more from its peer. Here the peer
// never reads its replies and sends, on each of two data streams, a long run
// of aborted writes (each answered) and behind it a notification and a write
// into the export. Both readers pause once the replies pass their cap, with
// the rest of their runs unread; the first to wait out peer_timeout fails the
// connection. The other, woken by that failure, must not go on to what it
// had not read. In a network namespace whose TCP send buffers cannot grow
// past 16 KiB, so that the replies back up after a known number of answers
// (autotuned, the kernel would take up to 4 MiB of them first).
TEST(TcpHostileAbort, WhatAReaderHadNotReadIsNotTakenOnceTheConnectionFailed) {
  std::string why = netns::in_own_network_namespace({{"ipv4/tcp_wmem", "4096 16384 16384"}}, [] {
    Options o = Target::options();
    o.connection_memory_bytes = 1 << 20;  // the replies pause the readers past 256 KiB
    o.peer_timeout = 2s;                  // how long they stay paused before the connection fails
    o.socket_buffer_bytes = 256 << 10;    // room on the data streams for what is not read
    Target t;
    t.peer.control_receive_buffer = 4096;  // the engine's replies back up at once
    ASSERT_NO_FATAL_FAILURE(t.open(o, /*streams=*/2));
    std::vector<uint8_t> mem(4096, 0);
    Region r = t.engine->reg(mem.data(), mem.size()).value();
    RemoteDescriptor d = t.engine->export_region(r, 0, mem.size()).value();

    // About 800 answers of ~360 bytes pause the readers: 2 x 2,000 are five times that.
    constexpr int kRun = 2000;
    uint64_t op = 1;
    uint64_t seq = 1;
    for (int stream = 0; stream < 2; ++stream) {
      std::string frames;
      for (int i = 0; i < kRun; ++i) frames += write_chunk(d, op++, mem.size(), 0, 0, {}, {}, true);
      frames += write_chunk(d, op++, mem.size(), 0, seq++, "after", {}, true);
      frames += write_chunk(d, op++, mem.size(), 0, seq++, "after", std::string(mem.size(), 'Z'), false);
      ASSERT_TRUE(t.peer.send_unless_stalled(frames, 5s, stream)) << "stream " << stream;
    }

    Status s = t.failure(after(10s));
    EXPECT_EQ(s.code(), Code::kResourceExhausted) << s.to_string();
    std::this_thread::sleep_for(500ms);  // time for a reader that went on to land what it read
    while (auto n = t.conn->poll_note()) ADD_FAILURE() << "a notification was taken: " << n->message;
    EXPECT_EQ(mem, std::vector<uint8_t>(4096, 0)) << "a write landed after the connection failed";
    still_serves_others(*t.engine);
  });
  if (!why.empty()) GTEST_SKIP() << why;
}

}  // namespace
}  // namespace ferry::hostile
