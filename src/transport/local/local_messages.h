// What both halves of LocalConnection (posting and the progress thread) say
// about messages: flag values and how a peer's status code is read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::local {

// LOCAL_NOTE flags: the write carrying this sequence number failed, so there
// is nothing to deliver, only a place in the order to skip.
inline constexpr uint8_t kNoteSkip = 1;

// A status code and message a peer sent back, as a Status naming the connection.
inline Status peer_status(uint32_t code, std::string_view message, const std::string& where) {
  if (code == 0) return Status();
  Code c = code <= static_cast<uint32_t>(Code::kInternal) ? static_cast<Code>(code) : Code::kInternal;
  return Status(c, "peer of " + where + " reports: " + std::string(message));
}

}  // namespace ferry::local
