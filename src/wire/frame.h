// The frame header every ferry stream carries, and its codec.
//
// Pure functions, no I/O: a frame is a fixed 64-byte little-endian header,
// then `aux_len` bytes of small variable data (handshake fields, a
// notification, an error message), then `payload_len` bytes of bulk data.
// docs/protocol.md describes each frame type and the meaning of its fields.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::wire {

inline constexpr uint32_t kFrameMagic = 0x31595246;  // "FRY1" little-endian
// 2: NOTIFY carries a sequence number and may be a skip (flags bit 2).
// 3: LOCAL_SETUP names a Unix rendezvous and a ticket instead of a pid and a
//    descriptor number (the kernel, not the peer, says who the peer is).
// 5: HELLO and WELCOME carry an identity key, AUTH and ACCEPTED a signature:
//    engine ids are proven (platform/identity.h). HELLO offers a range of
//    versions (handshake.h), and the acceptor picks the highest in both.
// 6: a TCP connection with nothing in flight is quiet: neither side sends
//    heartbeats nor counts silence; a side waiting on its peer sends
//    HEARTBEAT with kHeartbeatWantsAnswer and the peer answers it.
// 7: the steady state's frames are typed (messages.h): a field a frame type
//    does not use is zero, and a frame that sets one is refused.
// kProtocolVersion is the highest version this build speaks, and
// kMinProtocolVersion the lowest it accepts: an engine before 7 may set
// fields that 7 refuses, so none older is accepted (its HELLO is answered
// with a REJECTED naming both ranges).
inline constexpr uint16_t kProtocolVersion = 7;
inline constexpr uint16_t kMinProtocolVersion = 7;
// HEARTBEAT's flags: the sender waits on its peer and wants a heartbeat back.
inline constexpr uint8_t kHeartbeatWantsAnswer = 1;
inline constexpr size_t kHeaderSize = 64;
inline constexpr size_t kMaxAux = 64 * 1024 - 1;
// No single frame carries more than this; chunks are far smaller.
inline constexpr uint32_t kMaxPayload = 1u << 30;

enum class FrameType : uint8_t {
  // Handshake (see handshake.h).
  kHello = 1,     // connector -> acceptor: first frame of every stream
  kWelcome = 2,   // acceptor -> connector: server nonce, auth required?
  kAuth = 3,      // connector -> acceptor: proof of the secret (or none)
  kAccepted = 4,  // acceptor -> connector: server proof, cookie for data streams
  kRejected = 5,  // acceptor -> connector: why, then close
  kReady = 6,     // acceptor -> connector: every data stream attached
  // Steady state, control stream.
  kHeartbeat = 10,
  kClose = 11,     // orderly goodbye
  kEager = 12,     // id=op, a=message size; payload = the whole message
  kRts = 13,       // id=op, a=message size: request to send
  kCts = 14,       // id=op (sender's), a=token at the receiver: clear to send
  kAck = 15,       // id=op, code=status code, aux=message: op finished at the peer
  kReadReq = 16,   // id=op=token, a=export id, b=key, c=offset, d=size
  kNotify = 17,    // id=op, aux=notification
  kChunkAck = 18,  // a=path index, b=chunks landed on that path so far
  // Bulk, on any stream.
  kData = 20,   // id=token, a=offset in the message; payload
  kWrite = 21,  // id=op, a=export id, b=key, c=offset in export, d=op total, aux=notification
  // Local transport (same host; shared-memory channel, see docs/protocol.md).
  kLocalSetup = 30,   // connector -> acceptor on the control stream: a,b=ticket, c=nonce, aux=rendezvous name
  kLocalReady = 31,   // acceptor -> connector: a=pid
  kLocalRts = 32,     // id=op, a=size; payload = the sender's spans
  kLocalCts = 33,     // id=op (sender's), a=token at the receiver; payload = the receiver's spans
  kLocalDone = 34,    // id=op or token of the side receiving it, code=status, aux=message
  kLocalOpen = 35,    // id=request, a=export id, b=key: describe an export
  kLocalExport = 36,  // id=request, code=status, a=export id, b=key, c=length; payload = spans; aux=message
  kLocalPull = 37,    // id=op, a=export id, b=key, c=offset, d=size; payload = source spans: the target
                      // copies the initiator's bytes into its export. No notification: a write's
                      // follows as its own kLocalNote once every item has ended
  kLocalPush = 38,    // id=op, a=export id, b=key, c=offset, d=size; payload = destination spans:
                      // the target copies its export's bytes into the initiator's memory
  kLocalNote = 39,    // id=op (0: no ack wanted), a=note seq, flags=1 skip; aux = notification
  kLocalRevoke = 40,  // payload = u64 export ids then u64 allocation bases; a = number of export ids
};

std::string_view frame_type_name(FrameType t);

struct FrameHeader {
  FrameType type = FrameType::kHeartbeat;
  uint8_t flags = 0;
  uint16_t aux_len = 0;
  uint32_t payload_len = 0;
  uint32_t code = 0;
  uint64_t id = 0;
  uint64_t a = 0, b = 0, c = 0, d = 0, e = 0;
};

using HeaderBytes = std::array<uint8_t, kHeaderSize>;

void encode_header(const FrameHeader& h, HeaderBytes& out);

// Checks the magic and the frame type and bounds aux/payload lengths.
// kDataLoss names the offending field.
Result<FrameHeader> decode_header(const uint8_t* bytes, size_t len);

// Little-endian helpers shared by the other codecs.
void put_u16(uint8_t* p, uint16_t v);
void put_u32(uint8_t* p, uint32_t v);
void put_u64(uint8_t* p, uint64_t v);
uint16_t get_u16(const uint8_t* p);
uint32_t get_u32(const uint8_t* p);
uint64_t get_u64(const uint8_t* p);

}  // namespace ferry::wire
