// Reading and writing whole frames during a handshake, with a deadline, so a
// silent or slow peer cannot hold a handshake thread forever.
#pragma once

#include <string>

#include "ferry/status.h"
#include "ferry/transfer.h"
#include "wire/frame.h"
#include "wire/handshake.h"

namespace ferry::bootstrap {

struct RawFrame {
  wire::FrameHeader header;
  std::string aux;
};

// Reads one header and its aux bytes; a handshake frame never has a payload.
Result<RawFrame> read_handshake_frame(int fd, Deadline deadline);
Status write_handshake_frame(int fd, const wire::EncodedFrame& f, Deadline deadline);

}  // namespace ferry::bootstrap
