// What every typed frame's codec (messages.h, local_messages.h) checks of a
// header: its type, the flags and the fields the type uses (the rest must be
// zero), and where it may carry aux or payload bytes. Internal to wire/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"
#include "wire/frame.h"

namespace ferry::wire::field_checks {

// The header's fields besides type, flags and lengths, as a set.
enum Field : unsigned {
  kId = 1,
  kA = 2,
  kB = 4,
  kC = 8,
  kD = 16,
  kE = 32,
  kCode = 64,
};

// kDataLoss: "<type> frame: <what>".
Status refuse(const FrameHeader& h, const std::string& what);

// Refuses a frame with flags outside `flags`, a field outside `fields` that
// is not zero, more than `aux_max` aux bytes, or a payload where `payload`
// is false. A header of another type than `type`, or `aux` bytes that are
// not the header's, are this side's mistake (kInternal).
Status check(const FrameHeader& h, std::string_view aux, FrameType type, uint8_t flags, unsigned fields, size_t aux_max,
             bool payload);

// The payload bytes handed over are the header's (kInternal otherwise).
Status payload_agrees(const FrameHeader& h, std::string_view payload);

// A header of `type`, every field zero.
FrameHeader of(FrameType type);

inline uint16_t aux_len(std::string_view aux) { return static_cast<uint16_t>(aux.size()); }

}  // namespace ferry::wire::field_checks
