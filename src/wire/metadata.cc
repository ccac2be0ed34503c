// Metadata blob codec: "FRYM", version u16, engine id u64, then
// length-prefixed (u16) strings: host id, address count (u16), addresses.
// The version is the highest protocol version of the engine that wrote the
// blob; the layout is the same from version 5 on, so a blob of a later
// version is read (the handshake then picks a version both engines speak)
// and only one older than this engine accepts is refused.
#include "wire/metadata.h"

#include <algorithm>

#include "wire/frame.h"

namespace ferry::wire {
namespace {
constexpr char kMagic[4] = {'F', 'R', 'Y', 'M'};

// Strings longer than a u16 length can say are cut, prefix and bytes alike.
void put_string(std::string& out, std::string_view s) {
  s = s.substr(0, 0xffff);
  uint8_t len[2];
  put_u16(len, static_cast<uint16_t>(s.size()));
  out.append(reinterpret_cast<const char*>(len), 2);
  out.append(s);
}

Status malformed(const char* what) {
  return Status(Code::kInvalidArgument, std::string("engine metadata blob is malformed: ") + what);
}
}  // namespace

bool looks_like_metadata(std::string_view s) { return s.size() >= 4 && s.substr(0, 4) == std::string_view(kMagic, 4); }

std::string encode_metadata(const EngineMetadata& m) {
  std::string out(kMagic, 4);
  uint8_t buf[8];
  put_u16(buf, m.protocol_version);
  out.append(reinterpret_cast<const char*>(buf), 2);
  put_u64(buf, m.engine_id);
  out.append(reinterpret_cast<const char*>(buf), 8);
  put_string(out, m.host_id);
  size_t count = std::min<size_t>(m.addresses.size(), 0xffff);
  put_u16(buf, static_cast<uint16_t>(count));
  out.append(reinterpret_cast<const char*>(buf), 2);
  for (size_t i = 0; i < count; ++i) put_string(out, m.addresses[i]);
  return out;
}

Result<EngineMetadata> decode_metadata(std::string_view blob) {
  if (!looks_like_metadata(blob)) return malformed("missing FRYM magic");
  const auto* p = reinterpret_cast<const uint8_t*>(blob.data());
  size_t n = blob.size(), off = 4;
  auto need = [&](size_t k) { return off + k <= n; };
  if (!need(10)) return malformed("truncated header");
  uint16_t version = get_u16(p + off);
  off += 2;
  if (version < kMinProtocolVersion) {
    return Status(Code::kUnimplemented, "engine metadata blob of protocol version " + std::to_string(version) +
                                            ": this engine accepts versions " + std::to_string(kMinProtocolVersion) +
                                            ".." + std::to_string(kProtocolVersion) +
                                            " (upgrade the engine that wrote it)");
  }
  EngineMetadata m;
  m.protocol_version = version;
  m.engine_id = get_u64(p + off);
  off += 8;
  auto get_string = [&](std::string& s) -> bool {
    if (!need(2)) return false;
    uint16_t len = get_u16(p + off);
    off += 2;
    if (!need(len)) return false;
    s.assign(blob.data() + off, len);
    off += len;
    return true;
  };
  if (!get_string(m.host_id)) return malformed("truncated host id");
  if (!need(2)) return malformed("truncated address count");
  uint16_t count = get_u16(p + off);
  off += 2;
  for (uint16_t i = 0; i < count; ++i) {
    std::string a;
    if (!get_string(a)) return malformed("truncated address");
    m.addresses.push_back(std::move(a));
  }
  if (off != n) return malformed("trailing bytes");
  if (m.addresses.empty()) return malformed("no addresses");
  return m;
}

}  // namespace ferry::wire
