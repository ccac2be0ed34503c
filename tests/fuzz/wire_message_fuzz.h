// What every harness of a typed frame's decoder (wire/messages.h,
// wire/local_messages.h) does: the input is a header and what follows it, with the magic and the frame type
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

#include "wire/local_messages.h"
#include "wire/messages.h"

namespace ferry::wire::fuzz {

// `decode(header, aux, payload)`. With `payload`, the bytes after the header
// are its aux bytes (as many as the header says, at most what there is) and
// then its payload; without, they are all aux.
template <typename Decode>
int decode_one(const uint8_t* data, size_t size, FrameType type, bool payload, Decode decode) {
  if (size < kHeaderSize) return 0;
  HeaderBytes bytes;
  std::memcpy(bytes.data(), data, kHeaderSize);
  put_u32(bytes.data(), kFrameMagic);
  bytes[4] = static_cast<uint8_t>(type);
  const char* rest = reinterpret_cast<const char*>(data) + kHeaderSize;
  const size_t left = size - kHeaderSize;
  size_t aux_bytes = left < kMaxAux ? left : kMaxAux;
  if (payload && get_u16(bytes.data() + 6) < aux_bytes) aux_bytes = get_u16(bytes.data() + 6);
  const size_t payload_bytes = payload ? left - aux_bytes : 0;
  put_u16(bytes.data() + 6, static_cast<uint16_t>(aux_bytes));
  put_u32(bytes.data() + 8, static_cast<uint32_t>(payload_bytes));
  auto h = decode_header(bytes.data(), bytes.size());
  if (!h.ok()) return 0;
  const std::string_view aux(rest, aux_bytes), body(rest + aux_bytes, payload_bytes);
  auto m = decode(*h, aux, body);
  if (!m.ok()) {
    if (m.status().code() != Code::kDataLoss) std::abort();
    return 0;
  }
  HeaderBytes again;
  encode_header(encode(*m), again);
  if (std::memcmp(again.data(), bytes.data(), kHeaderSize) != 0) std::abort();
  auto twice = decode(encode(*m), aux, body);
  if (!twice.ok()) std::abort();
  HeaderBytes third;
  encode_header(encode(*twice), third);
  if (std::memcmp(third.data(), bytes.data(), kHeaderSize) != 0) std::abort();
  return 0;
}

}  // namespace ferry::wire::fuzz

// One harness: `decoder` on TCP frames of `type` (header and aux bytes).
#define FERRY_FUZZ_WIRE_MESSAGE(type, decoder)                                                           \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {                              \
    return ferry::wire::fuzz::decode_one(data, size, ferry::wire::FrameType::type, false,                \
                                         [](const ferry::wire::FrameHeader& h, std::string_view aux,     \
                                            std::string_view) { return ferry::wire::decoder(h, aux); }); \
  }

// One harness: `decoder` on local frames of `type` (header, aux and payload).
#define FERRY_FUZZ_WIRE_LOCAL_MESSAGE(type, decoder)                                            \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {                     \
    return ferry::wire::fuzz::decode_one(                                                       \
        data, size, ferry::wire::FrameType::type, true,                                         \
        [](const ferry::wire::FrameHeader& h, std::string_view aux, std::string_view payload) { \
          return ferry::wire::decoder(h, aux, payload);                                         \
        });                                                                                     \
  }
