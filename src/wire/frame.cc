// Frame header codec.
#include "wire/frame.h"

#include <cstdio>
#include <cstring>

namespace ferry::wire {

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = v & 0xff;
  p[1] = v >> 8;
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (v >> (8 * i)) & 0xff;
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (v >> (8 * i)) & 0xff;
}
uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string_view frame_type_name(FrameType t) {
  switch (t) {
    case FrameType::kHello:
      return "hello";
    case FrameType::kWelcome:
      return "welcome";
    case FrameType::kAuth:
      return "auth";
    case FrameType::kAccepted:
      return "accepted";
    case FrameType::kRejected:
      return "rejected";
    case FrameType::kReady:
      return "ready";
    case FrameType::kHeartbeat:
      return "heartbeat";
    case FrameType::kClose:
      return "close";
    case FrameType::kEager:
      return "eager";
    case FrameType::kRts:
      return "rts";
    case FrameType::kCts:
      return "cts";
    case FrameType::kAck:
      return "ack";
    case FrameType::kReadReq:
      return "read_req";
    case FrameType::kNotify:
      return "notify";
    case FrameType::kChunkAck:
      return "chunk_ack";
    case FrameType::kData:
      return "data";
    case FrameType::kWrite:
      return "write";
    case FrameType::kLocalSetup:
      return "local_setup";
    case FrameType::kLocalReady:
      return "local_ready";
    case FrameType::kLocalRts:
      return "local_rts";
    case FrameType::kLocalCts:
      return "local_cts";
    case FrameType::kLocalDone:
      return "local_done";
    case FrameType::kLocalOpen:
      return "local_open";
    case FrameType::kLocalExport:
      return "local_export";
    case FrameType::kLocalPull:
      return "local_pull";
    case FrameType::kLocalPush:
      return "local_push";
    case FrameType::kLocalNote:
      return "local_note";
    case FrameType::kLocalRevoke:
      return "local_revoke";
  }
  return "unknown";
}

namespace {
bool known_type(uint8_t t) {
  switch (static_cast<FrameType>(t)) {
    case FrameType::kHello:
    case FrameType::kWelcome:
    case FrameType::kAuth:
    case FrameType::kAccepted:
    case FrameType::kRejected:
    case FrameType::kReady:
    case FrameType::kHeartbeat:
    case FrameType::kClose:
    case FrameType::kEager:
    case FrameType::kRts:
    case FrameType::kCts:
    case FrameType::kAck:
    case FrameType::kReadReq:
    case FrameType::kNotify:
    case FrameType::kChunkAck:
    case FrameType::kData:
    case FrameType::kWrite:
    case FrameType::kLocalSetup:
    case FrameType::kLocalReady:
    case FrameType::kLocalRts:
    case FrameType::kLocalCts:
    case FrameType::kLocalDone:
    case FrameType::kLocalOpen:
    case FrameType::kLocalExport:
    case FrameType::kLocalPull:
    case FrameType::kLocalPush:
    case FrameType::kLocalNote:
    case FrameType::kLocalRevoke:
      return true;
  }
  return false;
}
}  // namespace

void encode_header(const FrameHeader& h, HeaderBytes& out) {
  uint8_t* p = out.data();
  put_u32(p + 0, kFrameMagic);
  p[4] = static_cast<uint8_t>(h.type);
  p[5] = h.flags;
  put_u16(p + 6, h.aux_len);
  put_u32(p + 8, h.payload_len);
  put_u32(p + 12, h.code);
  put_u64(p + 16, h.id);
  put_u64(p + 24, h.a);
  put_u64(p + 32, h.b);
  put_u64(p + 40, h.c);
  put_u64(p + 48, h.d);
  put_u64(p + 56, h.e);
}

Result<FrameHeader> decode_header(const uint8_t* p, size_t len) {
  if (len < kHeaderSize) {
    return Status(Code::kDataLoss,
                  "frame header truncated: " + std::to_string(len) + " of " + std::to_string(kHeaderSize) + " bytes");
  }
  uint32_t magic = get_u32(p);
  if (magic != kFrameMagic) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "bad frame magic 0x%08x (expected 0x%08x)", magic, kFrameMagic);
    return Status(Code::kDataLoss, buf);
  }
  if (!known_type(p[4])) {
    return Status(Code::kDataLoss, "unknown frame type " + std::to_string(p[4]));
  }
  FrameHeader h;
  h.type = static_cast<FrameType>(p[4]);
  h.flags = p[5];
  h.aux_len = get_u16(p + 6);
  h.payload_len = get_u32(p + 8);
  h.code = get_u32(p + 12);
  h.id = get_u64(p + 16);
  h.a = get_u64(p + 24);
  h.b = get_u64(p + 32);
  h.c = get_u64(p + 40);
  h.d = get_u64(p + 48);
  h.e = get_u64(p + 56);
  if (h.payload_len > kMaxPayload) {
    return Status(Code::kDataLoss, "frame " + std::string(frame_type_name(h.type)) + " payload of " +
                                       std::to_string(h.payload_len) + " bytes exceeds the limit");
  }
  return h;
}

}  // namespace ferry::wire
