// Feeds arbitrary bytes to RemoteDescriptor::parse: a descriptor reaches an
// application from its peer through any side channel and is handed to
// write/read unchecked by anyone else. One it accepts must serialize back to
// the same 48 bytes (but for the padding after the kind and after the
// device, which it ignores),
// and one with a kind outside the enum must be refused.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ferry/memory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto d = ferry::RemoteDescriptor::parse(bytes);
  if (!d.ok()) return 0;
  if (ferry::memory_kind_name(d->kind) == "unknown") std::abort();
  std::string again = d->serialize();
  for (size_t i = 0; i < bytes.size(); ++i) {
    bool padding = (i >= 5 && i < 8) || (i >= 12 && i < 16);
    if (!padding && again[i] != bytes[i]) std::abort();
  }
  return 0;
}
