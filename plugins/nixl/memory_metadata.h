// The backend metadata NIXL keeps beside each descriptor: what this engine
// registered (LocalMemory) and what a peer said it exported (RemoteMemory),
// and the public-data string that travels between them in NIXL's agent
// metadata.
//
// Public data: byte 0 kMemoryDataVersion, bytes 1..8 the region's address in
// the exporting process (little endian), then RemoteDescriptor::serialize().
// A peer's string is hostile: parse_memory_data checks its form, and
// RemoteMemory::make checks it against the descriptor NIXL loaded it with.
// Whatever passes, the exporting engine checks every access against its
// exports again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <backend/backend_aux.h>

#include "ferry/memory.h"
#include "ferry/status.h"

namespace ferry::nixl {

inline constexpr uint8_t kMemoryDataVersion = 1;

// A registration of this engine: the ferry region and its export.
class LocalMemory : public nixlBackendMD {
 public:
  LocalMemory(const Region& region, const RemoteDescriptor& exported)
      : nixlBackendMD(true), region(region), exported(exported) {}
  uintptr_t base() const { return reinterpret_cast<uintptr_t>(region.base); }

  const Region region;
  const RemoteDescriptor exported;
};

// A peer's registration as its metadata described it.
class RemoteMemory : public nixlBackendMD {
 public:
  // Checks `data` (the peer's public data) against the descriptor NIXL
  // loaded: the address must match, and the export must reach `length`
  // bytes. kInvalidArgument says what does not hold, for `agent`.
  static Result<std::unique_ptr<RemoteMemory>> make(const std::string& agent, uintptr_t address, size_t length,
                                    std::string_view data);

  const std::string agent;
  const uintptr_t base;
  const size_t length;
  const RemoteDescriptor exported;

 private:
  RemoteMemory(std::string agent, uintptr_t base, size_t length, const RemoteDescriptor& exported)
      : nixlBackendMD(false), agent(std::move(agent)), base(base), length(length), exported(exported) {}
};

// The public data of `memory`.
std::string memory_data(const LocalMemory& memory);

struct MemoryData {
  uintptr_t base = 0;
  RemoteDescriptor exported;
};
// Parses public data; kDataLoss names what is malformed.
Result<MemoryData> parse_memory_data(std::string_view data);

// Where [address, address + size) lies in a registration of `length` bytes
// at `base`: its offset, or kOutOfRange when any byte falls outside
// (overflow-safe). `what` names the side in the message.
Result<uint64_t> offset_within(uintptr_t base, size_t length, uintptr_t address, size_t size, std::string_view what);

}  // namespace ferry::nixl
