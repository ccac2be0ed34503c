// The operation plan both ends of a soak lane follow.
//
// A lane is one connection. Both ends derive operation i from the lane's
// seed alone, so each knows what the other will post (who initiates, which
// operation, sizes, where every piece lies in each end's buffers, and the
// seed of the bytes), and FIFO matching of sends to receives stays in step
// without any extra messages. Every end owns three buffers of
// buffer_bytes(max): `local` (sources and destinations of its own
// operations), `inbox` (exported: the other end writes here) and `source`
// (exported, filled once from the end's read seed, never written: the other
// end reads here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ferry::soak {

enum class OpKind : uint8_t {
  kSend,         // send / recv, one buffer each
  kSendv,        // sendv / recvv, parts split differently on each end
  kExchange,     // both ends send and receive at once
  kWrite,        // write with a notification
  kWriteNotify,  // write without one, then a standalone notify
  kWritev,       // vector write with a notification
  kRead,         // read of the other end's source
  kReadv,        // vector read
  kSmallRecv,    // a receive smaller than the message: both ends must get buffer_too_small
};
inline constexpr int kOpKinds = 9;

std::string_view op_kind_name(OpKind k);

// One piece: `size` bytes at `offset` of some buffer, carrying bytes
// [stream_offset, stream_offset + size) of the piece's stream.
struct Piece {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t stream_offset = 0;
};

// One message or one group of one-sided items.
struct Movement {
  uint64_t seed = 0;        // stream seed (reads: unused, the target's read seed applies)
  uint64_t bytes = 0;       // message size or sum of the items
  std::vector<Piece> from;  // sends: the sender's local pieces; write/read: the initiator's local pieces
  std::vector<Piece> to;    // receives: the receiver's local pieces (may hold more than `bytes`);
                            // write: offsets in the target's inbox; read: offsets in the target's source
  uint64_t capacity = 0;    // receives: total size of `to`
};

struct OpPlan {
  uint64_t index = 0;
  OpKind kind = OpKind::kSend;
  bool survivor_initiates = true;  // exchange: the survivor's message is `main`, the peer's is `back`
  Movement main;
  Movement back;        // exchange only
  bool vector = false;  // use the vector form of the call even for one piece
};

// Extra room in every buffer beyond the largest operation, for odd offsets.
inline constexpr uint64_t kSlack = 64 * 1024;
inline uint64_t buffer_bytes(uint64_t max_op_bytes) { return max_op_bytes + kSlack; }

// Operation `index` of the lane with `lane_seed`, no movement larger than
// `max_op_bytes` (>= 16).
OpPlan make_plan(uint64_t lane_seed, uint64_t index, uint64_t max_op_bytes);

// A short description for messages: "op 17 writev survivor->peer 3 pieces 1234567 B".
std::string describe(const OpPlan& p);

}  // namespace ferry::soak
