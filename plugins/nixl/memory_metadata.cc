// Public data of registrations, and the checks on a peer's (memory_metadata.h).
#include "memory_metadata.h"

#include <cstring>

namespace ferry::nixl {
namespace {

constexpr size_t kBaseBytes = 8;

}  // namespace

std::string memory_data(const LocalMemory& memory) {
  std::string out(1 + kBaseBytes, '\0');
  out[0] = static_cast<char>(kMemoryDataVersion);
  const uint64_t base = memory.base();
  for (size_t i = 0; i < kBaseBytes; ++i) out[1 + i] = static_cast<char>((base >> (8 * i)) & 0xff);
  out += memory.exported.serialize();
  return out;
}

Result<MemoryData> parse_memory_data(std::string_view data) {
  if (data.size() < 1 + kBaseBytes) {
    return Status(Code::kDataLoss, "ferry memory metadata of " + std::to_string(data.size()) +
                                       " bytes is shorter than its 9-byte header");
  }
  if (static_cast<uint8_t>(data[0]) != kMemoryDataVersion) {
    return Status(Code::kDataLoss, "ferry memory metadata of version " + std::to_string(static_cast<uint8_t>(data[0])) +
                                       "; this build reads " + std::to_string(kMemoryDataVersion));
  }
  MemoryData out;
  uint64_t base = 0;
  for (size_t i = 0; i < kBaseBytes; ++i) base |= uint64_t{static_cast<uint8_t>(data[1 + i])} << (8 * i);
  out.base = static_cast<uintptr_t>(base);
  auto exported = RemoteDescriptor::parse(data.substr(1 + kBaseBytes));
  if (!exported.ok()) return Status(Code::kDataLoss, "ferry memory metadata: " + exported.status().message());
  out.exported = *exported;
  return out;
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

Result<uint64_t> offset_within(uintptr_t base, size_t length, uintptr_t address, size_t size, std::string_view what) {
  if (address < base || address - base > length || size > length - (address - base)) {
    return Status(Code::kOutOfRange, std::string(what) + " [" + std::to_string(address) + ", +" +
                                         std::to_string(size) + ") leaves its registration [" + std::to_string(base) +
                                         ", +" + std::to_string(length) + ")");
  }
  return static_cast<uint64_t>(address - base);
}

}  // namespace ferry::nixl
