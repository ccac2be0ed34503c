// Feeds arbitrary bytes to the local transport's span decoder: the payload of
// LOCAL_RTS, LOCAL_CTS, LOCAL_EXPORT, LOCAL_PULL and LOCAL_PUSH, where a
// same-host peer says which of its memory the engine should copy to or from.
// Every span it accepts must lie inside the allocation it names (GPU) and not
// wrap the address space, carry a handle exactly when it is GPU memory, and
// encode back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "transport/local/shared_span.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::local;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto spans = decode_spans(bytes);
  if (!spans.ok()) return 0;
  for (const SharedSpan& s : *spans) {
    if (s.address + s.length < s.address) std::abort();
    if (s.gpu() != (s.handle_type != HandleType::kNone)) std::abort();
    if (s.gpu() && (s.address < s.alloc_base || s.address - s.alloc_base > s.alloc_size ||
                    s.length > s.alloc_size - (s.address - s.alloc_base))) {
      std::abort();
    }
  }
  std::string again;
  encode_spans(*spans, again);
  if (again.size() != bytes.size()) std::abort();
  // Bytes 2-3 and 52-55 of each span are padding the encoder writes as zeros.
  for (size_t off = 0; off < bytes.size(); off += kSharedSpanBytes) {
    for (size_t i = 0; i < kSharedSpanBytes; ++i) {
      if (i == 2 || i == 3 || (i >= 52 && i < 56)) continue;
      if (again[off + i] != bytes[off + i]) std::abort();
    }
  }
  return 0;
}
