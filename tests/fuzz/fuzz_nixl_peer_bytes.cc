// Feeds the FERRY NIXL backend's decoders what a peer controls: a
// notification's bytes (the agent-name wrapper of plugins/nixl/agent_note.h)
// and a registration's public data (plugins/nixl/memory_data.h), plus the
// range check every descriptor passes. Whatever decodes must encode back to
// the same bytes (one form per value), and an offset that passes the check
// must lie inside the registration.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "agent_note.h"
#include "memory_data.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const uint8_t which = in.ConsumeIntegralInRange<uint8_t>(0, 2);
  if (which == 0) {
    const std::string bytes = in.ConsumeRemainingBytesAsString();
    auto note = ferry::nixl::decode_agent_note(bytes);
    if (note.ok()) {
      auto again = ferry::nixl::encode_agent_note(*note, bytes.size());
      require(again.ok() && *again == bytes);
    }
  } else if (which == 1) {
    const std::string bytes = in.ConsumeRemainingBytesAsString();
    auto parsed = ferry::nixl::parse_memory_data(bytes);
    if (parsed.ok()) require(ferry::nixl::encode_memory_data(*parsed) == bytes);
  } else {
    const uint64_t base = in.ConsumeIntegral<uint64_t>();
    const uint64_t length = in.ConsumeIntegral<uint64_t>();
    const uint64_t address = in.ConsumeIntegral<uint64_t>();
    const uint64_t n = in.ConsumeIntegral<uint64_t>();
    auto offset = ferry::nixl::offset_within(base, length, address, n, "fuzz");
    if (offset.ok()) {
      require(address >= base && *offset == address - base);
      require(*offset <= length && n <= length - *offset);
    }
  }
  return 0;
}
