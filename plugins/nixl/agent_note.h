// How NIXL notifications ride ferry's: each carries the sending agent's name,
// because NIXL hands the receiver (agent name, message) pairs and ferry's
// notifications name only a connection. A READ's notification, which the
// initiator sends itself after the data arrived, also says whether the read
// failed; a WRITE's failure is told by ferry (Note::delivered).
//
//   byte 0      kAgentNoteVersion
//   byte 1      flags: bit 0 set = the transfer this note closes failed
//   bytes 2..3  agent name length N, little endian (1..kMaxAgentName)
//   N bytes     agent name
//   rest        the application's message
//
// Everything here is a pure function; the bytes come from peers and are
// checked before use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::nixl {

inline constexpr uint8_t kAgentNoteVersion = 1;
inline constexpr size_t kAgentNoteHeader = 4;
inline constexpr size_t kMaxAgentName = 1024;

struct AgentNote {
  std::string agent;
  std::string message;
  bool failed = false;
};

// The wire form of `note`. kInvalidArgument for an empty name or one over
// kMaxAgentName bytes, or when the whole would pass `max_bytes` (ferry's
// notification limit): the message says which and by how much.
Result<std::string> encode_agent_note(const AgentNote& note, size_t max_bytes);

// Parses a peer's note. kDataLoss says what is malformed (short, unknown
// version or flags, a name length past the end or zero).
Result<AgentNote> decode_agent_note(std::string_view bytes);

}  // namespace ferry::nixl
