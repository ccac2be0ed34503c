// Header checks shared by the typed frame codecs (field_checks.h).
#include "wire/field_checks.h"

#include <cstdio>

namespace ferry::wire::field_checks {

Status refuse(const FrameHeader& h, const std::string& what) {
  return Status(Code::kDataLoss, std::string(frame_type_name(h.type)) + " frame: " + what);
}

Status check(const FrameHeader& h, std::string_view aux, FrameType type, uint8_t flags, unsigned fields, size_t aux_max,
             bool payload) {
  if (aux.size() != h.aux_len) {
    return Status(Code::kInternal, std::string(frame_type_name(h.type)) + " frame: " + std::to_string(aux.size()) +
                                       " aux bytes given for a header that says " + std::to_string(h.aux_len));
  }
  if (h.type != type) {
    return Status(Code::kInternal, "decoding a " + std::string(frame_type_name(h.type)) + " frame as " +
                                       std::string(frame_type_name(type)));
  }
  if ((h.flags & ~flags) != 0) {
    char unknown[8];
    std::snprintf(unknown, sizeof unknown, "0x%02x", static_cast<unsigned>(h.flags & ~flags));
    return refuse(h, std::string("unknown flags ") + unknown);
  }
  const struct {
    Field field;
    uint64_t value;
    const char* name;
  } all[] = {{kId, h.id, "id"}, {kA, h.a, "a"}, {kB, h.b, "b"},         {kC, h.c, "c"},
             {kD, h.d, "d"},    {kE, h.e, "e"}, {kCode, h.code, "code"}};
  for (const auto& f : all) {
    if ((fields & f.field) == 0 && f.value != 0) {
      return refuse(h,
                    "field " + std::string(f.name) + " is " + std::to_string(f.value) + "; this frame does not use it");
    }
  }
  if (h.aux_len > aux_max) {
    return refuse(h,
                  std::to_string(h.aux_len) + " aux bytes, more than the " + std::to_string(aux_max) + " it may carry");
  }
  if (!payload && h.payload_len != 0) return refuse(h, "a payload of " + std::to_string(h.payload_len) + " bytes");
  return Status();
}

Status payload_agrees(const FrameHeader& h, std::string_view payload) {
  if (payload.size() != h.payload_len) {
    return Status(Code::kInternal, std::string(frame_type_name(h.type)) + " frame: " + std::to_string(payload.size()) +
                                       " payload bytes given for a header that says " + std::to_string(h.payload_len));
  }
  return Status();
}

FrameHeader of(FrameType type) {
  FrameHeader h;
  h.type = type;
  return h;
}

}  // namespace ferry::wire::field_checks
