// Codec of RemoteDescriptor: a fixed 48-byte string, magic "FRYD".
#include <cstring>

#include "ferry/memory.h"
#include "wire/frame.h"

namespace ferry {
namespace {
constexpr uint32_t kDescriptorMagic = 0x44595246;  // "FRYD"
constexpr size_t kDescriptorSize = 48;
}  // namespace

std::string_view memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kHostPinned:
      return "host-pinned";
    case MemoryKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

std::string RemoteDescriptor::serialize() const {
  std::string out(kDescriptorSize, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  wire::put_u32(p + 0, kDescriptorMagic);
  p[4] = static_cast<uint8_t>(kind);
  wire::put_u32(p + 8, static_cast<uint32_t>(device));
  wire::put_u64(p + 16, engine_id);
  wire::put_u64(p + 24, export_id);
  wire::put_u64(p + 32, key);
  wire::put_u64(p + 40, length);
  return out;
}

Result<RemoteDescriptor> RemoteDescriptor::parse(std::string_view bytes) {
  if (bytes.size() != kDescriptorSize) {
    return Status(Code::kInvalidArgument, "remote descriptor must be " + std::to_string(kDescriptorSize) +
                                              " bytes, got " + std::to_string(bytes.size()));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (wire::get_u32(p) != kDescriptorMagic) {
    return Status(Code::kInvalidArgument, "remote descriptor has a bad magic (not made by serialize())");
  }
  if (p[4] > static_cast<uint8_t>(MemoryKind::kCuda)) {
    return Status(Code::kInvalidArgument, "remote descriptor has unknown memory kind " + std::to_string(p[4]));
  }
  if (p[5] != 0 || p[6] != 0 || p[7] != 0 || wire::get_u32(p + 12) != 0) {
    // serialize() writes zeros there: one form per descriptor.
    return Status(Code::kInvalidArgument, "remote descriptor has non-zero reserved bytes (5-7, 12-15)");
  }
  RemoteDescriptor d;
  d.kind = static_cast<MemoryKind>(p[4]);
  d.device = static_cast<int32_t>(wire::get_u32(p + 8));
  d.engine_id = wire::get_u64(p + 16);
  d.export_id = wire::get_u64(p + 24);
  d.key = wire::get_u64(p + 32);
  d.length = wire::get_u64(p + 40);
  return d;
}

}  // namespace ferry
