// What every harness of a steady-state frame decoder (wire/messages.h) does:
// the input is a header and its aux bytes, with the magic and the frame type
// set so that every input reaches the decoder. A decoder either refuses as
// data loss, or accepts a message that encodes back to the very header it
// was decoded from (no field lost, none invented) and decodes again to the
// same message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "wire/messages.h"

namespace ferry::wire::fuzz {

template <typename Decode>
int decode_one(const uint8_t* data, size_t size, FrameType type, Decode decode) {
  if (size < kHeaderSize) return 0;
  HeaderBytes bytes;
  std::memcpy(bytes.data(), data, kHeaderSize);
  put_u32(bytes.data(), kFrameMagic);
  bytes[4] = static_cast<uint8_t>(type);
  const size_t rest = size - kHeaderSize < kMaxAux ? size - kHeaderSize : kMaxAux;
  put_u16(bytes.data() + 6, static_cast<uint16_t>(rest));  // the aux bytes are the rest of the input
  auto h = decode_header(bytes.data(), bytes.size());
  if (!h.ok()) return 0;
  const std::string_view aux(reinterpret_cast<const char*>(data) + kHeaderSize, rest);
  auto m = decode(*h, aux);
  if (!m.ok()) {
    if (m.status().code() != Code::kDataLoss) std::abort();
    return 0;
  }
  HeaderBytes again;
  encode_header(encode(*m), again);
  if (std::memcmp(again.data(), bytes.data(), kHeaderSize) != 0) std::abort();
  auto twice = decode(encode(*m), aux);
  if (!twice.ok()) std::abort();
  HeaderBytes third;
  encode_header(encode(*twice), third);
  if (std::memcmp(third.data(), bytes.data(), kHeaderSize) != 0) std::abort();
  return 0;
}

}  // namespace ferry::wire::fuzz

// One harness: `decoder` on frames of `type`.
#define FERRY_FUZZ_WIRE_MESSAGE(type, decoder)                                                                 \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {                                    \
    return ferry::wire::fuzz::decode_one(                                                                      \
        data, size, ferry::wire::FrameType::type,                                                              \
        [](const ferry::wire::FrameHeader& h, std::string_view aux) { return ferry::wire::decoder(h, aux); }); \
  }
