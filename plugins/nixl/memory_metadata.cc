// Public data of registrations, and the checks on a peer's (memory_metadata.h).
#include "memory_metadata.h"

namespace ferry::nixl {

std::string memory_data(const LocalMemory& memory) {
  return encode_memory_data(MemoryData{memory.base(), memory.exported});
}

Result<std::unique_ptr<RemoteMemory>> RemoteMemory::make(const std::string& agent, uintptr_t address, size_t length,
                                         std::string_view data) {
  auto parsed = parse_memory_data(data);
  if (!parsed.ok()) {
    return Status(Code::kInvalidArgument, "agent '" + agent + "': " + parsed.status().message());
  }
  if (parsed->base != address) {
    return Status(Code::kInvalidArgument, "agent '" + agent + "' describes memory at " + std::to_string(address) +
                                              " with ferry metadata for " + std::to_string(parsed->base));
  }
  if (length == 0 || parsed->exported.length < length) {
    return Status(Code::kInvalidArgument, "agent '" + agent + "' describes " + std::to_string(length) +
                                              " bytes at " + std::to_string(address) + " but exported " +
                                              std::to_string(parsed->exported.length));
  }
  return std::unique_ptr<RemoteMemory>(new RemoteMemory(agent, address, length, parsed->exported));
}

}  // namespace ferry::nixl
