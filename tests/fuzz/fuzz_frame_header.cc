// Feeds arbitrary bytes to the frame header decoder, the first thing every
// engine runs on every 64 bytes a peer sends on any stream. A header it
// accepts must encode back to the same bytes (no field is lost or invented)
// and name a frame type that has a name.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "wire/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::wire;
  auto h = decode_header(data, size);
  if (!h.ok()) return 0;
  if (size < kHeaderSize || frame_type_name(h->type) == "unknown" || h->payload_len > kMaxPayload) std::abort();
  HeaderBytes again;
  encode_header(*h, again);
  if (std::memcmp(again.data(), data, kHeaderSize) != 0) std::abort();
  return 0;
}
