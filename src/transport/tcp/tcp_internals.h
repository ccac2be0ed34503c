// What the files of TcpTransport share and nothing else needs: the frame
// flags of the steady state, what each thing held on the peer's behalf
// costs against the connection's budget, and small helpers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

#include "ferry/transfer.h"

namespace ferry::tcp::internal {

// How many finished writes a connection remembers to drop late resent chunks.
constexpr size_t kFinishedWritesKept = 4096;

// What the budget (connection_memory_bytes) counts for each thing held on
// the peer's behalf, on top of its bytes: the bookkeeping around it.
constexpr size_t kReplyBytes = 256;   // a reply waiting to go out (a queued frame, a read's reply op)
constexpr size_t kWriteBytes = 256;   // an incoming write
constexpr size_t kArrivalBytes = 64;  // one chunk of an incoming operation, landed or landing

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace ferry::tcp::internal
