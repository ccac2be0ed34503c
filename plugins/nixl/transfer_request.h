// One prepared NIXL transfer request of the FERRY backend: the ferry
// operation it posts (a block write, or a vector read), the connection it
// goes on, and what is left to do after the data moved (a READ's
// notification, which ferry's read does not carry).
//
// Threading: NIXL calls postXfer, checkXfer and releaseReqH for one request
// from one thread at a time; nothing here is shared with other requests.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <backend/backend_aux.h>

#include "ferry/engine.h"
#include "platform/mutex.h"

namespace ferry::nixl {

// Set when a posted operation finishes (Transfer::on_finish), for a caller
// that polls in a tight loop to sleep on instead of spinning.
struct FinishSignal {
  platform::Mutex mu;
  std::condition_variable changed;
  std::atomic<bool> done{false};
};

class FerryRequest : public nixlBackendReqH {
 public:
  nixl_xfer_op_t operation = NIXL_WRITE;
  std::string remote_agent;
  std::shared_ptr<Connection> connection;
  uint64_t bytes = 0;

  // WRITE: blocks between pools checked once at prepare.
  BlockPools pools;
  std::vector<Block> blocks;
  // READ: one item per descriptor.
  std::vector<ReadItem> reads;

  // The posted operation; empty before the first post.
  Transfer data;
  // READ with a notification: the encoded note to send once the data is in
  // (or, marked failed, once it failed), and the notify once sent.
  std::optional<std::string> read_note;
  std::optional<std::string> read_note_failed;
  Transfer note;
  bool note_sent = false;
  Clock::time_point posted{};
  std::shared_ptr<FinishSignal> finished;
  // When checkXfer last answered "in progress".
  Clock::time_point last_in_progress{};
};

}  // namespace ferry::nixl
