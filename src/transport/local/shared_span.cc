// SharedSpan codec: little-endian fixed fields, 136 bytes per span.
#include "transport/local/shared_span.h"

#include <cstdint>
#include <cstring>

#include "wire/frame.h"

namespace ferry::local {

void encode_spans(const std::vector<SharedSpan>& spans, std::string& out) {
  for (const SharedSpan& s : spans) {
    uint8_t b[kSharedSpanBytes] = {};
    b[0] = static_cast<uint8_t>(s.kind);
    b[1] = static_cast<uint8_t>(s.handle_type);
    wire::put_u32(b + 4, static_cast<uint32_t>(s.device));
    wire::put_u64(b + 8, s.address);
    wire::put_u64(b + 16, s.length);
    wire::put_u64(b + 24, s.alloc_base);
    wire::put_u64(b + 32, s.alloc_size);
    wire::put_u32(b + 40, static_cast<uint32_t>(s.fd));
    wire::put_u64(b + 44, s.alloc_id);
    std::memcpy(b + 56, s.pci.data(), s.pci.size());
    std::memcpy(b + 72, s.ipc.data(), s.ipc.size());
    out.append(reinterpret_cast<const char*>(b), sizeof(b));
  }
}

Result<std::vector<SharedSpan>> decode_spans(std::string_view bytes) {
  if (bytes.size() % kSharedSpanBytes != 0) {
    return Status(Code::kDataLoss, "local: span list of " + std::to_string(bytes.size()) +
                                       " bytes is not a multiple of " + std::to_string(kSharedSpanBytes));
  }
  std::vector<SharedSpan> out;
  for (size_t off = 0; off < bytes.size(); off += kSharedSpanBytes) {
    const auto* b = reinterpret_cast<const uint8_t*>(bytes.data() + off);
    SharedSpan s;
    if (b[0] > static_cast<uint8_t>(MemoryKind::kCuda) || b[1] > static_cast<uint8_t>(HandleType::kPosixFd)) {
      return Status(Code::kDataLoss, "local: span " + std::to_string(off / kSharedSpanBytes) + " has unknown kind");
    }
    s.kind = static_cast<MemoryKind>(b[0]);
    s.handle_type = static_cast<HandleType>(b[1]);
    s.device = static_cast<int32_t>(wire::get_u32(b + 4));
    s.address = wire::get_u64(b + 8);
    s.length = wire::get_u64(b + 16);
    s.alloc_base = wire::get_u64(b + 24);
    s.alloc_size = wire::get_u64(b + 32);
    s.fd = static_cast<int32_t>(wire::get_u32(b + 40));
    s.alloc_id = wire::get_u64(b + 44);
    std::memcpy(s.pci.data(), b + 56, s.pci.size());
    std::memcpy(s.ipc.data(), b + 72, s.ipc.size());
    // Written without sums that could wrap: a peer's numbers are not trusted.
    bool wraps = s.length > UINT64_MAX - s.address;
    bool outside = s.gpu() && (s.address < s.alloc_base || s.length > s.alloc_size ||
                               s.address - s.alloc_base > s.alloc_size - s.length);
    if (s.gpu() != (s.handle_type != HandleType::kNone) || wraps || outside) {
      return Status(Code::kDataLoss,
                    "local: span " + std::to_string(off / kSharedSpanBytes) + " lies outside the allocation it names");
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace ferry::local
