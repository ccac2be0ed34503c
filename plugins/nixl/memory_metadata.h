// The backend metadata NIXL keeps beside each descriptor: what this engine
// registered (LocalMemory) and what a peer said it exported (RemoteMemory).
// Between them travels the public data of memory_data.h. A peer's is
// hostile: parse_memory_data checks its form, and RemoteMemory::make checks
// it against the descriptor NIXL loaded it with. Whatever passes, the
// exporting engine checks every access against its exports again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <backend/backend_aux.h>

#include "ferry/memory.h"
#include "ferry/status.h"
#include "memory_data.h"

namespace ferry::nixl {

// A registration of this engine: the ferry region and its export.
class LocalMemory : public nixlBackendMD {
 public:
  LocalMemory(const Region& region, const RemoteDescriptor& exported)
      : nixlBackendMD(true), region(region), exported(exported) {}
  uintptr_t base() const { return reinterpret_cast<uintptr_t>(region.base); }

  const Region region;
  const RemoteDescriptor exported;
};

// A peer's registration as its metadata described it.
class RemoteMemory : public nixlBackendMD {
 public:
  // Checks `data` (the peer's public data) against the descriptor NIXL
  // loaded: the address must match, and the export must reach `length`
  // bytes. kInvalidArgument says what does not hold, for `agent`.
  static Result<std::unique_ptr<RemoteMemory>> make(const std::string& agent, uintptr_t address, size_t length,
                                    std::string_view data);

  const std::string agent;
  const uintptr_t base;
  const size_t length;
  const RemoteDescriptor exported;

 private:
  RemoteMemory(std::string agent, uintptr_t base, size_t length, const RemoteDescriptor& exported)
      : nixlBackendMD(false), agent(std::move(agent)), base(base), length(length), exported(exported) {}
};

// The public data of `memory`.
std::string memory_data(const LocalMemory& memory);

}  // namespace ferry::nixl
