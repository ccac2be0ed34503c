// The typed frames (wire/messages.h, wire/local_messages.h): each one encodes and
// decodes back to itself through the 64 header bytes, and each decoder
// refuses, as data loss naming the frame and what is wrong, a field its type
// does not use, an unknown flag, and what no sender writes. An engine meeting
// such a frame fails the connection, naming it.
#include <gtest/gtest.h>

#include <string>

#include "hostile_peer.h"
#include "raw_local_peer.h"
#include "wire/local_messages.h"
#include "wire/messages.h"

namespace ferry::wire {
namespace {

using namespace std::chrono_literals;

// Through the bytes a peer reads: encoded, then decoded as a peer would.
FrameHeader through_bytes(const FrameHeader& h) {
  HeaderBytes b;
  encode_header(h, b);
  auto back = decode_header(b.data(), b.size());
  EXPECT_TRUE(back.ok()) << back.status().to_string();
  return back.ok() ? *back : FrameHeader{};
}

void expect_refused(const Status& s, const std::string& words) {
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find(words), std::string::npos) << "\"" << words << "\" not in: " << s.message();
}

TEST(WireMessages, EveryMessageComesBackAsItWasSent) {
  auto cts = decode_cts(through_bytes(encode(Cts{0x1122334455667788, 42})), {});
  ASSERT_TRUE(cts.ok()) << cts.status().to_string();
  EXPECT_EQ(cts->op, 0x1122334455667788u);
  EXPECT_EQ(cts->token, 42u);

  auto eager = decode_eager(through_bytes(encode(Eager{7, 4099})), {});
  ASSERT_TRUE(eager.ok()) << eager.status().to_string();
  EXPECT_EQ(eager->size, 4099u);

  const std::string why = "export 3 was deregistered";
  auto ack = decode_ack(through_bytes(encode(Ack{9, static_cast<uint32_t>(Code::kNotFound), why})), why);
  ASSERT_TRUE(ack.ok()) << ack.status().to_string();
  EXPECT_EQ(ack->code, static_cast<uint32_t>(Code::kNotFound));
  EXPECT_EQ(ack->reason, why);

  auto read = decode_read_req(through_bytes(encode(ReadReq{3, 4, 5, 6, 7})), {});
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_EQ(read->export_id, 4u);
  EXPECT_EQ(read->key, 5u);
  EXPECT_EQ(read->offset, 6u);
  EXPECT_EQ(read->size, 7u);

  auto note = decode_notify(through_bytes(encode(Notify{0, 12, true, "tag"})), "tag");
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(note->seq, 12u);
  EXPECT_TRUE(note->skip);
  EXPECT_EQ(note->note, "tag");

  auto landed = decode_chunk_ack(through_bytes(encode(ChunkAck{63, 1000})), {});
  ASSERT_TRUE(landed.ok()) << landed.status().to_string();
  EXPECT_EQ(landed->path, 63u);
  EXPECT_EQ(landed->landed, 1000u);

  DataChunk d{.token = 5, .offset = 1u << 20, .size = 65537, .ack_request = true};
  auto data = decode_data(through_bytes(encode(d)), {});
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  EXPECT_EQ(data->offset, 1u << 20);
  EXPECT_EQ(data->size, 65537u);
  EXPECT_TRUE(data->ack_request);
  EXPECT_FALSE(data->aborted);

  WriteChunk w{.op = 8, .export_id = 2, .key = 0xfeed, .offset = 12345, .total = 99999, .note_seq = 4, .size = 777};
  w.note = "done";
  auto write = decode_write(through_bytes(encode(w)), "done");
  ASSERT_TRUE(write.ok()) << write.status().to_string();
  EXPECT_EQ(write->export_id, 2u);
  EXPECT_EQ(write->key, 0xfeedu);
  EXPECT_EQ(write->offset, 12345u);
  EXPECT_EQ(write->total, 99999u);
  EXPECT_EQ(write->note_seq, 4u);
  EXPECT_EQ(write->size, 777u);
  EXPECT_EQ(write->block_entries, 0u);

  WriteChunk batch{.op = 8, .offset = 4096, .total = 1 << 20, .size = 3 * kBlockEntryBytes + 5, .block_entries = 3};
  auto blocks = decode_write(through_bytes(encode(batch)), {});
  ASSERT_TRUE(blocks.ok()) << blocks.status().to_string();
  EXPECT_EQ(blocks->block_entries, 3u);
  EXPECT_EQ(blocks->export_id, 0u);

  auto hb = decode_heartbeat(through_bytes(encode(Heartbeat{true})), {});
  ASSERT_TRUE(hb.ok());
  EXPECT_TRUE(hb->wants_answer);
  EXPECT_TRUE(decode_close(through_bytes(encode(Close{})), {}).ok());
}

TEST(WireMessages, AFieldTheTypeDoesNotUseIsRefusedByName) {
  FrameHeader cts = encode(Cts{1, 2});
  cts.b = 9;
  expect_refused(decode_cts(cts, {}).status(), "field b is 9");
  FrameHeader hb = encode(Heartbeat{});
  hb.id = 1;
  expect_refused(decode_heartbeat(hb, {}).status(), "field id");
  FrameHeader data = encode(DataChunk{.token = 1, .size = 4});
  data.code = 5;  // only an aborted chunk says why
  expect_refused(decode_data(data, {}).status(), "field code");
  FrameHeader batch = encode(WriteChunk{.op = 1, .total = 64, .size = kBlockEntryBytes + 1, .block_entries = 1});
  batch.b = 3;  // a block table names its keys
  expect_refused(decode_write(batch, {}).status(), "field b");
  FrameHeader chunk_ack = encode(ChunkAck{1, 1});
  chunk_ack.e = 1;
  expect_refused(decode_chunk_ack(chunk_ack, {}).status(), "field e");
}

TEST(WireMessages, UnknownFlagsAndBytesNoTypeCarriesAreRefused) {
  FrameHeader rts = encode(Rts{1, 1 << 30});
  rts.flags = 0x80;
  expect_refused(decode_rts(rts, {}).status(), "unknown flags");
  FrameHeader cts = encode(Cts{1, 2});
  cts.aux_len = 3;
  expect_refused(decode_cts(cts, "abc").status(), "aux bytes");
  FrameHeader read = encode(ReadReq{1, 2, 3, 4, 5});
  read.payload_len = 10;
  expect_refused(decode_read_req(read, {}).status(), "a payload of 10 bytes");
  FrameHeader aborted = encode(DataChunk{.token = 1, .aborted = true});
  aborted.payload_len = 4;  // an aborted chunk's bytes never come
  expect_refused(decode_data(aborted, {}).status(), "a payload of 4 bytes");
}

TEST(WireMessages, WhatNoSenderWritesIsRefused) {
  FrameHeader eager = encode(Eager{1, 100});
  eager.payload_len = 99;
  expect_refused(decode_eager(eager, {}).status(), "disagree");
  FrameHeader huge = encode(Eager{1, kMaxEagerBytes + 1});
  expect_refused(decode_eager(huge, {}).status(), "more than any engine sends inline");
  const std::string reason = "but it worked";
  expect_refused(decode_ack(encode(Ack{1, 0, reason}), reason).status(), "reason for an operation that succeeded");
  const std::string long_reason(kMaxReason + 1, 'x');
  expect_refused(decode_ack(encode(Ack{1, 3, long_reason}), long_reason).status(), "more than the 1024");
  expect_refused(decode_chunk_ack(encode(ChunkAck{64, 1}), {}).status(), "data path 64");
  FrameHeader wraps = encode(DataChunk{.token = 1, .offset = ~uint64_t{0} - 1, .size = 4});
  expect_refused(decode_data(wraps, {}).status(), "wraps around");
  // A write's chunk: empty, block tables out of bounds.
  expect_refused(decode_write(encode(WriteChunk{.op = 1, .total = 10}), {}).status(), "empty chunk of write 1");
  for (uint32_t entries : {kMaxBlockEntries + 1, 4u}) {
    WriteChunk b{.op = 2, .total = 1 << 20, .size = 4 * kBlockEntryBytes, .block_entries = entries};
    expect_refused(decode_write(encode(b), {}).status(), "blocks in a payload of");
  }
  FrameHeader both = encode(WriteChunk{.op = 3, .total = 8, .aborted = true});
  both.flags |= kFlagBlocks;
  expect_refused(decode_write(both, {}).status(), "aborted chunk with a block table");
  // Aborted, with the note and the abort's code: what senders write.
  WriteChunk gone{.op = 4, .total = 8, .note_seq = 2, .aborted = true, .code = 1};
  gone.note = "tag";
  EXPECT_TRUE(decode_write(encode(gone), "tag").ok());
}

// An engine meeting a frame that sets a field its type does not use fails
// the connection as data loss, naming the field, and serves other peers.
TEST(WireMessages, AnEngineFailsAConnectionWhosePeerSetsAnUnusedField) {
  hostile::Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  FrameHeader rts = encode(Rts{77, 4096});
  rts.d = 0xdead;
  ASSERT_TRUE(t.peer.frame(rts));
  Status s = t.failure(after(5s));
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find("rts frame: field d is 57005"), std::string::npos) << s.to_string();
  ASSERT_NO_FATAL_FAILURE(hostile::still_serves_others(*t.engine));
}

TEST(WireMessages, EveryLocalMessageComesBackAsItWasSent) {
  const std::string spans(48, 's');
  auto rts = decode_local_rts(through_bytes(encode(LocalRts{5, 1 << 20, spans})), {}, spans);
  ASSERT_TRUE(rts.ok()) << rts.status().to_string();
  EXPECT_EQ(rts->size, 1u << 20);
  EXPECT_EQ(rts->spans, spans);
  auto cts = decode_local_cts(through_bytes(encode(LocalCts{5, 9, spans})), {}, spans);
  ASSERT_TRUE(cts.ok()) << cts.status().to_string();
  EXPECT_EQ(cts->token, 9u);
  const std::string why = "export 4 was revoked";
  auto done = decode_local_done(through_bytes(encode(LocalDone{9, 5, why})), why, {});
  ASSERT_TRUE(done.ok()) << done.status().to_string();
  EXPECT_EQ(done->reason, why);
  auto open = decode_local_open(through_bytes(encode(LocalOpen{1, 2, 3, 4})), {}, {});
  ASSERT_TRUE(open.ok()) << open.status().to_string();
  EXPECT_EQ(open->length, 4u);
  LocalExport e{.request = 1, .export_id = 2, .key = 3, .length = 4096, .spans = spans};
  auto exported = decode_local_export(through_bytes(encode(e)), {}, spans);
  ASSERT_TRUE(exported.ok()) << exported.status().to_string();
  EXPECT_EQ(exported->spans, spans);
  auto pull = decode_local_pull(through_bytes(encode(LocalPull{{7, 2, 3, 100, 200, spans}})), {}, spans);
  ASSERT_TRUE(pull.ok()) << pull.status().to_string();
  EXPECT_EQ(pull->offset, 100u);
  EXPECT_EQ(pull->size, 200u);
  auto push = decode_local_push(through_bytes(encode(LocalPush{{7, 2, 3, 100, 200, spans}})), {}, spans);
  ASSERT_TRUE(push.ok()) << push.status().to_string();
  auto note = decode_local_note(through_bytes(encode(LocalNote{3, 4, true, "n"})), "n", {});
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_TRUE(note->skip);
  const std::string values(24, '\0');
  auto revoke = decode_local_revoke(through_bytes(encode(LocalRevoke{6, 2, values})), {}, values);
  ASSERT_TRUE(revoke.ok()) << revoke.status().to_string();
  EXPECT_EQ(revoke->exports, 2u);
  LocalSetup setup{.nonce = 0xabcdef, .rendezvous = "ferry-rv"};
  for (size_t i = 0; i < setup.ticket.size(); ++i) setup.ticket[i] = static_cast<uint8_t>(i * 7 + 1);
  auto back = decode_local_setup(through_bytes(encode(setup)), "ferry-rv", {});
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->ticket, setup.ticket);
  EXPECT_EQ(back->nonce, 0xabcdefu);
  EXPECT_EQ(decode_local_ready(through_bytes(encode(LocalReady{1234})), {}, {}).value().pid, 1234u);
}

TEST(WireMessages, WhatNoLocalSenderWritesIsRefused) {
  FrameHeader open = encode(LocalOpen{1, 2, 3, 4});
  open.d = 1;
  expect_refused(decode_local_open(open, {}, {}).status(), "field d is 1");
  expect_refused(decode_local_done(encode(LocalDone{1, 0, "fine"}), "fine", {}).status(),
                 "reason for an operation that succeeded");
  const std::string spans(48, 's');
  LocalExport failed{.request = 1, .code = 5, .spans = spans};  // a refusal carries no spans
  expect_refused(decode_local_export(encode(failed), {}, spans).status(), "a payload of 48 bytes");
  expect_refused(decode_local_revoke(encode(LocalRevoke{1, 4, std::string(24, '\0')}), {}, std::string(24, '\0'))
                     .status(),
                 "4 export ids in a payload of 24 bytes");
  expect_refused(decode_local_revoke(encode(LocalRevoke{1, 0, "odd"}), {}, "odd").status(), "payload of 3 bytes");
  expect_refused(decode_local_pull(encode(LocalPull{{1, 2, 3, ~uint64_t{0}, 2, {}}}), {}, {}).status(), "wraps around");
  expect_refused(decode_local_setup(encode(LocalSetup{}), {}, {}).status(), "no rendezvous name");
  FrameHeader note = encode(LocalNote{1, 2, false, {}});
  note.flags = 2;
  expect_refused(decode_local_note(note, {}, {}).status(), "unknown flags 0x02");
}

// An engine's local channel meeting a message that sets a field its type
// does not use fails the connection as data loss, naming the field.
TEST(WireMessages, ALocalConnectionWhosePeerSetsAnUnusedFieldFails) {
  Options o;
  o.transport = TransportChoice::kLocal;
  auto target = Engine::create(o).value();
  local::RawLocalPeer peer;
  ASSERT_TRUE(peer.dial(target->address(), after(5s)).ok());
  auto c = target->accept(after(5s)).value();
  FrameHeader open = encode(LocalOpen{1, 2, 3, 4});
  open.e = 77;
  ASSERT_TRUE(peer.post(open));
  ASSERT_TRUE(local::eventually([&] { return !c->health().ok(); }, after(5s)));
  EXPECT_EQ(c->health().code(), Code::kDataLoss) << c->health().to_string();
  EXPECT_NE(c->health().message().find("local_open frame: field e is 77"), std::string::npos)
      << c->health().to_string();
}

}  // namespace
}  // namespace ferry::wire
