// The frames of a connection's steady state over TCP, typed: one struct per
// frame type, its encoder and its decoder (pure functions, no I/O).
//
// FrameHeader (frame.h) is only the 64-byte layout. What each of its fields
// means for each frame type is written here once, and every check a frame's
// own bytes allow (its flags, sizes that must agree, limits every sender
// keeps) is made by its decoder, which answers kDataLoss naming the frame and
// the field. Since protocol 7 a field a frame type does not use is zero, and
// a frame that sets one is refused: a peer cannot hide meaning in it.
// Checks against the connection's state (an unknown operation, a chunk
// outside its message) stay with the transport that holds that state.
#pragma once

#include <cstdint>
#include <string_view>

#include "ferry/engine.h"
#include "ferry/options.h"
#include "ferry/status.h"
#include "wire/frame.h"

namespace ferry::wire {

// Flags of DATA and WRITE chunks.
inline constexpr uint8_t kFlagAckRequest = 1;  // confirm its landing with CHUNK_ACK
inline constexpr uint8_t kFlagAborted = 2;     // this operation's bytes will not come
inline constexpr uint8_t kFlagBlocks = 8;      // WRITE: the payload opens with a block table
// NOTIFY's flag: the write carrying this sequence number failed.
inline constexpr uint8_t kFlagNoteSkip = 4;

// What every sender keeps to (the decoders refuse more).
inline constexpr uint32_t kMaxEagerBytes = Options::kMaxInline;
inline constexpr size_t kMaxReason = 1024;  // an ACK's or an aborted chunk's message
inline constexpr size_t kMaxNote = Connection::kMaxNotification;
// A WRITE chunk's block table: entries of kBlockEntryBytes, at most
// kMaxBlockEntries a chunk (transport/tcp/block_table.h encodes them).
inline constexpr uint32_t kMaxBlockEntries = 4096;
inline constexpr uint32_t kBlockEntryBytes = 32;

// HEARTBEAT: nothing but whether the sender waits for one back.
struct Heartbeat {
  bool wants_answer = false;
};

// CLOSE: an orderly goodbye.
struct Close {};

// EAGER: a whole message of `size` bytes, which follow as the payload.
struct Eager {
  uint64_t op = 0;
  uint32_t size = 0;
};

// RTS: a message of `size` bytes waits for the receiver's CTS.
struct Rts {
  uint64_t op = 0;
  uint64_t size = 0;
};

// CTS: the receiver took send `op` (the sender's id); its DATA goes to `token`.
struct Cts {
  uint64_t op = 0;
  uint64_t token = 0;
};

// ACK: operation `op` ended at the peer with `code` (0: done) and, when it
// failed, a message (the aux bytes) saying why.
struct Ack {
  uint64_t op = 0;
  uint32_t code = 0;
  std::string_view reason;
};

// READ_REQ: send `size` bytes of export `export_id` (proven by `key`) from
// `offset`, as DATA to token `op`.
struct ReadReq {
  uint64_t op = 0;
  uint64_t export_id = 0;
  uint64_t key = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// NOTIFY: notification number `seq` (the aux bytes), or its skip (the write
// that carried it failed); `seq` 0: unnumbered, told as it comes. `op` 0: no
// confirmation wanted.
struct Notify {
  uint64_t op = 0;
  uint64_t seq = 0;
  bool skip = false;
  std::string_view note;
};

// CHUNK_ACK: `landed` chunks of data path `path` landed so far.
struct ChunkAck {
  uint32_t path = 0;
  uint64_t landed = 0;
};

// DATA: `size` payload bytes at `offset` of the message that token `token`
// names. An aborted chunk carries no bytes, the abort's code and, perhaps,
// the reason.
struct DataChunk {
  uint64_t token = 0;
  uint64_t offset = 0;
  uint32_t size = 0;
  bool ack_request = false;
  bool aborted = false;
  uint32_t code = 0;
  std::string_view reason;
};

// WRITE: a chunk of write `op` of `total` bytes: `size` payload bytes for
// export `export_id` (proven by `key`) at `offset`, or, with
// `block_entries`, a block table of that many entries then the bytes it
// places (`offset` is then the chunk's place in the batch). `note_seq`
// (0: none) numbers the write's notification, which a chunk may carry. An
// aborted chunk carries no bytes, the abort's code and perhaps the note.
struct WriteChunk {
  uint64_t op = 0;
  uint64_t export_id = 0;
  uint64_t key = 0;
  uint64_t offset = 0;
  uint64_t total = 0;
  uint64_t note_seq = 0;
  uint32_t size = 0;
  uint32_t block_entries = 0;
  bool ack_request = false;
  bool aborted = false;
  uint32_t code = 0;
  std::string_view note;
};

// The header of each; aux_len and payload_len are set from the message.
FrameHeader encode(const Heartbeat& m);
FrameHeader encode(const Close& m);
FrameHeader encode(const Eager& m);
FrameHeader encode(const Rts& m);
FrameHeader encode(const Cts& m);
FrameHeader encode(const Ack& m);
FrameHeader encode(const ReadReq& m);
FrameHeader encode(const Notify& m);
FrameHeader encode(const ChunkAck& m);
FrameHeader encode(const DataChunk& m);
FrameHeader encode(const WriteChunk& m);

// Each decoder takes a header decode_header accepted and the frame's aux
// bytes, which the message's views point into.
Result<Heartbeat> decode_heartbeat(const FrameHeader& h, std::string_view aux);
Result<Close> decode_close(const FrameHeader& h, std::string_view aux);
Result<Eager> decode_eager(const FrameHeader& h, std::string_view aux);
Result<Rts> decode_rts(const FrameHeader& h, std::string_view aux);
Result<Cts> decode_cts(const FrameHeader& h, std::string_view aux);
Result<Ack> decode_ack(const FrameHeader& h, std::string_view aux);
Result<ReadReq> decode_read_req(const FrameHeader& h, std::string_view aux);
Result<Notify> decode_notify(const FrameHeader& h, std::string_view aux);
Result<ChunkAck> decode_chunk_ack(const FrameHeader& h, std::string_view aux);
Result<DataChunk> decode_data(const FrameHeader& h, std::string_view aux);
Result<WriteChunk> decode_write(const FrameHeader& h, std::string_view aux);

}  // namespace ferry::wire
