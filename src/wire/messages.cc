// Codecs of the steady-state frames (messages.h).
#include "wire/messages.h"

#include <string>

#include "wire/field_checks.h"

namespace ferry::wire {

using namespace field_checks;

FrameHeader encode(const Heartbeat& m) {
  FrameHeader h = of(FrameType::kHeartbeat);
  if (m.wants_answer) h.flags = kHeartbeatWantsAnswer;
  return h;
}

FrameHeader encode(const Close&) { return of(FrameType::kClose); }

FrameHeader encode(const Eager& m) {
  FrameHeader h = of(FrameType::kEager);
  h.id = m.op;
  h.a = m.size;
  h.payload_len = m.size;
  return h;
}

FrameHeader encode(const Rts& m) {
  FrameHeader h = of(FrameType::kRts);
  h.id = m.op;
  h.a = m.size;
  return h;
}

FrameHeader encode(const Cts& m) {
  FrameHeader h = of(FrameType::kCts);
  h.id = m.op;
  h.a = m.token;
  return h;
}

FrameHeader encode(const Ack& m) {
  FrameHeader h = of(FrameType::kAck);
  h.id = m.op;
  h.code = m.code;
  h.aux_len = aux_len(m.reason);
  return h;
}

FrameHeader encode(const ReadReq& m) {
  FrameHeader h = of(FrameType::kReadReq);
  h.id = m.op;
  h.a = m.export_id;
  h.b = m.key;
  h.c = m.offset;
  h.d = m.size;
  return h;
}

FrameHeader encode(const Notify& m) {
  FrameHeader h = of(FrameType::kNotify);
  h.id = m.op;
  h.e = m.seq;
  if (m.skip) h.flags = kFlagNoteSkip;
  h.aux_len = aux_len(m.note);
  return h;
}

FrameHeader encode(const ChunkAck& m) {
  FrameHeader h = of(FrameType::kChunkAck);
  h.a = m.path;
  h.b = m.landed;
  return h;
}

FrameHeader encode(const DataChunk& m) {
  FrameHeader h = of(FrameType::kData);
  h.id = m.token;
  h.a = m.offset;
  h.payload_len = m.size;
  if (m.ack_request) h.flags |= kFlagAckRequest;
  if (m.aborted) h.flags |= kFlagAborted;
  h.code = m.code;
  h.aux_len = aux_len(m.reason);
  return h;
}

FrameHeader encode(const WriteChunk& m) {
  FrameHeader h = of(FrameType::kWrite);
  h.id = m.op;
  h.a = m.block_entries != 0 ? m.block_entries : m.export_id;
  h.b = m.key;
  h.c = m.offset;
  h.d = m.total;
  h.e = m.note_seq;
  h.payload_len = m.size;
  if (m.ack_request) h.flags |= kFlagAckRequest;
  if (m.aborted) h.flags |= kFlagAborted;
  if (m.block_entries != 0) h.flags |= kFlagBlocks;
  h.code = m.code;
  h.aux_len = aux_len(m.note);
  return h;
}

Result<Heartbeat> decode_heartbeat(const FrameHeader& h, std::string_view aux) {
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kHeartbeat, kHeartbeatWantsAnswer, 0, 0, false));
  return Heartbeat{(h.flags & kHeartbeatWantsAnswer) != 0};
}

Result<Close> decode_close(const FrameHeader& h, std::string_view aux) {
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kClose, 0, 0, 0, false));
  return Close{};
}

Result<Eager> decode_eager(const FrameHeader& h, std::string_view aux) {
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kEager, 0, kId | kA, 0, true));
  if (h.a != h.payload_len) {
    return refuse(h, "message size " + std::to_string(h.a) + " and payload of " + std::to_string(h.payload_len) +
                         " bytes disagree");
  }
  if (h.a > kMaxEagerBytes) {
    // No engine sends one this large: a header that would make the receiver
    // allocate up to the frame limit before a byte of payload arrived.
    return refuse(h, "a message of " + std::to_string(h.a) + " bytes, more than any engine sends inline (" +
                         std::to_string(kMaxEagerBytes) + ")");
  }
  return Eager{h.id, h.payload_len};
}

Result<Rts> decode_rts(const FrameHeader& h, std::string_view aux) {
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kRts, 0, kId | kA, 0, false));
  return Rts{h.id, h.a};
}

Result<Cts> decode_cts(const FrameHeader& h, std::string_view aux) {
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kCts, 0, kId | kA, 0, false));
  return Cts{h.id, h.a};
}

Result<Ack> decode_ack(const FrameHeader& h, std::string_view aux) {
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kAck, 0, kId | kCode, kMaxReason, false));
  if (h.code == 0 && !aux.empty()) return refuse(h, "a reason for an operation that succeeded");
  return Ack{h.id, h.code, aux};
}

Result<ReadReq> decode_read_req(const FrameHeader& h, std::string_view aux) {
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kReadReq, 0, kId | kA | kB | kC | kD, 0, false));
  return ReadReq{h.id, h.a, h.b, h.c, h.d};
}

Result<Notify> decode_notify(const FrameHeader& h, std::string_view aux) {
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kNotify, kFlagNoteSkip, kId | kE, kMaxNote, false));
  return Notify{h.id, h.e, (h.flags & kFlagNoteSkip) != 0, aux};
}

Result<ChunkAck> decode_chunk_ack(const FrameHeader& h, std::string_view aux) {
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kChunkAck, 0, kA | kB, 0, false));
  if (h.a > 63) return refuse(h, "data path " + std::to_string(h.a) + " (a connection has at most 64)");
  return ChunkAck{static_cast<uint32_t>(h.a), h.b};
}

Result<DataChunk> decode_data(const FrameHeader& h, std::string_view aux) {
  const bool aborted = (h.flags & kFlagAborted) != 0;
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kData, kFlagAckRequest | kFlagAborted,
                              kId | kA | (aborted ? kCode : 0u), aborted ? kMaxReason : 0, !aborted));
  if (h.a + h.payload_len < h.a) return refuse(h, "chunk at offset " + std::to_string(h.a) + " wraps around");
  return DataChunk{h.id, h.a, h.payload_len, (h.flags & kFlagAckRequest) != 0, aborted, h.code, aux};
}

Result<WriteChunk> decode_write(const FrameHeader& h, std::string_view aux) {
  const bool aborted = (h.flags & kFlagAborted) != 0;
  const bool blocks = (h.flags & kFlagBlocks) != 0;
  if (aborted && blocks) return refuse(h, "an aborted chunk with a block table");
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kWrite, kFlagAckRequest | kFlagAborted | kFlagBlocks,
                              kId | kA | (blocks ? 0u : kB) | kC | kD | kE | (aborted ? kCode : 0u), kMaxNote,
                              !aborted));
  if (h.c + h.payload_len < h.c) return refuse(h, "chunk at offset " + std::to_string(h.c) + " wraps around");
  WriteChunk m;
  m.op = h.id;
  m.offset = h.c;
  m.total = h.d;
  m.note_seq = h.e;
  m.size = h.payload_len;
  m.ack_request = (h.flags & kFlagAckRequest) != 0;
  m.aborted = aborted;
  m.code = h.code;
  m.note = aux;
  if (blocks) {
    if (h.a == 0 || h.a > kMaxBlockEntries || h.a * kBlockEntryBytes >= h.payload_len) {
      return refuse(h, "write " + std::to_string(h.id) + " names " + std::to_string(h.a) + " blocks in a payload of " +
                           std::to_string(h.payload_len) + " bytes (1.." + std::to_string(kMaxBlockEntries) +
                           " entries of " + std::to_string(kBlockEntryBytes) + " bytes, then at least one byte)");
    }
    m.block_entries = static_cast<uint32_t>(h.a);
  } else {
    m.export_id = h.a;
    m.key = h.b;
    if (!aborted && m.size == 0 && m.total != 0) {
      // Only an empty write travels as an empty chunk; empty ones at every
      // offset would each be remembered.
      return refuse(h, "empty chunk of write " + std::to_string(h.id) + " of " + std::to_string(h.d) + " bytes");
    }
  }
  return m;
}

}  // namespace ferry::wire
