// The frames of the local transport (peers on one host), typed: one struct
// per frame type, its encoder and its decoder (pure functions, no I/O), as
// messages.h does for TCP. LOCAL_SETUP and LOCAL_READY travel on the control
// stream at the handshake's end; the rest are the shared-memory channel's
// messages, each a header, its aux bytes and its payload. A field a type
// does not use is zero (protocol 7), and its decoder refuses, as kDataLoss
// naming the frame and the field, anything else; the span lists in the
// payloads are decoded by transport/local/shared_span.h. EAGER, ACK,
// HEARTBEAT and CLOSE are messages.h's.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "ferry/status.h"
#include "wire/frame.h"

namespace ferry::wire {

// LOCAL_NOTE's flag: the write carrying this number failed.
inline constexpr uint8_t kLocalNoteSkip = 1;
// What every sender keeps to.
inline constexpr size_t kMaxLocalReason = 4000;  // LOCAL_DONE's and LOCAL_EXPORT's message

// LOCAL_SETUP: the connector's rendezvous (`rendezvous`, the aux bytes), the
// ticket that opens it, and the channel's nonce.
struct LocalSetup {
  std::array<uint8_t, 16> ticket{};
  uint64_t nonce = 0;
  std::string_view rendezvous;
};

// LOCAL_READY: the acceptor attached the channel; its pid as it says it.
struct LocalReady {
  uint64_t pid = 0;
};

// LOCAL_RTS: a message of `size` bytes; the payload lists the sender's spans.
struct LocalRts {
  uint64_t op = 0;
  uint64_t size = 0;
  std::string_view spans;
};

// LOCAL_CTS: the receive matched send `op`; its end goes to `token`, and the
// payload lists the receiver's spans.
struct LocalCts {
  uint64_t op = 0;
  uint64_t token = 0;
  std::string_view spans;
};

// LOCAL_DONE: operation or token `id` (the receiving side's) ended with
// `code` (0: done) and, failed, a reason.
struct LocalDone {
  uint64_t id = 0;
  uint32_t code = 0;
  std::string_view reason;
};

// LOCAL_OPEN: request `request` to describe `length` bytes of export
// `export_id`, proven by `key`.
struct LocalOpen {
  uint64_t request = 0;
  uint64_t export_id = 0;
  uint64_t key = 0;
  uint64_t length = 0;
};

// LOCAL_EXPORT: the answer to `request`: the export's spans (the payload),
// or `code` and a reason.
struct LocalExport {
  uint64_t request = 0;
  uint32_t code = 0;
  uint64_t export_id = 0;
  uint64_t key = 0;
  uint64_t length = 0;
  std::string_view reason;
  std::string_view spans;
};

// LOCAL_PULL (a write: the target copies the initiator's bytes, the spans,
// into its export) and LOCAL_PUSH (a read: the target copies its export's
// bytes into the initiator's spans): `size` bytes at `offset` of export
// `export_id`, proven by `key`.
struct LocalCopy {
  uint64_t op = 0;
  uint64_t export_id = 0;
  uint64_t key = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string_view spans;
};
struct LocalPull : LocalCopy {};
struct LocalPush : LocalCopy {};

// LOCAL_NOTE: notification number `seq` (0: unnumbered), or its skip; `op`
// 0: no confirmation wanted.
struct LocalNote {
  uint64_t op = 0;
  uint64_t seq = 0;
  bool skip = false;
  std::string_view note;
};

// LOCAL_REVOKE: request `request`: the payload is `exports` export ids, then
// allocation bases, each a little-endian u64.
struct LocalRevoke {
  uint64_t request = 0;
  uint64_t exports = 0;
  std::string_view values;
};

// The header of each; aux_len and payload_len are set from the message.
FrameHeader encode(const LocalSetup& m);
FrameHeader encode(const LocalReady& m);
FrameHeader encode(const LocalRts& m);
FrameHeader encode(const LocalCts& m);
FrameHeader encode(const LocalDone& m);
FrameHeader encode(const LocalOpen& m);
FrameHeader encode(const LocalExport& m);
FrameHeader encode(const LocalPull& m);
FrameHeader encode(const LocalPush& m);
FrameHeader encode(const LocalNote& m);
FrameHeader encode(const LocalRevoke& m);

// Each decoder takes a header decode_header accepted, its aux and payload
// bytes, which the message's views point into.
Result<LocalSetup> decode_local_setup(const FrameHeader& h, std::string_view aux, std::string_view payload);
Result<LocalReady> decode_local_ready(const FrameHeader& h, std::string_view aux, std::string_view payload);
Result<LocalRts> decode_local_rts(const FrameHeader& h, std::string_view aux, std::string_view payload);
Result<LocalCts> decode_local_cts(const FrameHeader& h, std::string_view aux, std::string_view payload);
Result<LocalDone> decode_local_done(const FrameHeader& h, std::string_view aux, std::string_view payload);
Result<LocalOpen> decode_local_open(const FrameHeader& h, std::string_view aux, std::string_view payload);
Result<LocalExport> decode_local_export(const FrameHeader& h, std::string_view aux, std::string_view payload);
Result<LocalPull> decode_local_pull(const FrameHeader& h, std::string_view aux, std::string_view payload);
Result<LocalPush> decode_local_push(const FrameHeader& h, std::string_view aux, std::string_view payload);
Result<LocalNote> decode_local_note(const FrameHeader& h, std::string_view aux, std::string_view payload);
Result<LocalRevoke> decode_local_revoke(const FrameHeader& h, std::string_view aux, std::string_view payload);

}  // namespace ferry::wire
