// The engine metadata blob: what a peer needs to connect (engine id, host
// identity, the addresses it listens on). Pure codec, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"
#include "wire/frame.h"

namespace ferry::wire {

struct EngineMetadata {
  // The highest protocol version of the engine that wrote the blob.
  uint16_t protocol_version = kProtocolVersion;
  uint64_t engine_id = 0;
  std::string host_id;
  std::vector<std::string> addresses;  // "host:port", preferred first
};

std::string encode_metadata(const EngineMetadata& m);
// kInvalidArgument when `blob` is not a metadata blob or is malformed.
Result<EngineMetadata> decode_metadata(std::string_view blob);
// True if `s` starts like a metadata blob (as opposed to "host:port").
bool looks_like_metadata(std::string_view s);

}  // namespace ferry::wire
