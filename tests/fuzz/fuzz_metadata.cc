// Feeds arbitrary bytes to the engine metadata decoder: Engine::connect takes
// a metadata blob from whatever side channel the application uses (a file,
// a key-value store, another process's output), so its bytes are not the
// engine's own. A blob it accepts must re-encode to the very same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "wire/metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::wire;
  std::string_view blob(reinterpret_cast<const char*>(data), size);
  auto m = decode_metadata(blob);
  if (!m.ok()) return 0;
  if (!looks_like_metadata(blob) || m->addresses.empty()) std::abort();
  if (encode_metadata(*m) != blob) std::abort();
  return 0;
}
