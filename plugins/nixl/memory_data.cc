// The public-data codec and the range check (memory_data.h).
#include "memory_data.h"

namespace ferry::nixl {
namespace {

constexpr size_t kBaseBytes = 8;

}  // namespace

std::string encode_memory_data(const MemoryData& data) {
  std::string out(1 + kBaseBytes, '\0');
  out[0] = static_cast<char>(kMemoryDataVersion);
  const uint64_t base = data.base;
  for (size_t i = 0; i < kBaseBytes; ++i) out[1 + i] = static_cast<char>((base >> (8 * i)) & 0xff);
  out += data.exported.serialize();
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

Result<uint64_t> offset_within(uintptr_t base, size_t length, uintptr_t address, size_t size, std::string_view what) {
  if (address < base || address - base > length || size > length - (address - base)) {
    return Status(Code::kOutOfRange, std::string(what) + " [" + std::to_string(address) + ", +" +
                                         std::to_string(size) + ") leaves its registration [" + std::to_string(base) +
                                         ", +" + std::to_string(length) + ")");
  }
  return static_cast<uint64_t>(address - base);
}

}  // namespace ferry::nixl
