// The public data of a FERRY registration, as NIXL carries it between
// agents: byte 0 kMemoryDataVersion, bytes 1..8 the region's address in the
// exporting process (little endian), then RemoteDescriptor::serialize().
// Pure functions over bytes a peer controls; the checks against NIXL's
// descriptor are RemoteMemory's (memory_metadata.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/memory.h"
#include "ferry/status.h"

namespace ferry::nixl {

inline constexpr uint8_t kMemoryDataVersion = 1;

struct MemoryData {
  uintptr_t base = 0;
  RemoteDescriptor exported;
};

std::string encode_memory_data(const MemoryData& data);

// Parses public data; kDataLoss names what is malformed.
Result<MemoryData> parse_memory_data(std::string_view data);

// Where [address, address + size) lies in a registration of `length` bytes
// at `base`: its offset, or kOutOfRange when any byte falls outside
// (overflow-safe). `what` names the side in the message.
Result<uint64_t> offset_within(uintptr_t base, size_t length, uintptr_t address, size_t size, std::string_view what);

}  // namespace ferry::nixl
