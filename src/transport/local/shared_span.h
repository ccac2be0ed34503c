// SharedSpan: how a local connection describes a stretch of its own memory
// to the peer on the same host so that the peer can copy into or out of it:
// host memory by address (cross-memory attach), GPU memory by the handle of
// the allocation that contains it (a CUDA IPC handle, or a POSIX file
// descriptor for memory from CUDA's virtual memory API) plus an offset.
//
// Pure data and codec; no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/ipc_memory.h"
#include "ferry/memory.h"
#include "ferry/status.h"

namespace ferry::local {

// How a GPU span's allocation is shared (gpu/ipc_memory.h); kNone for host memory.
using HandleType = platform::GpuHandleType;

struct SharedSpan {
  MemoryKind kind = MemoryKind::kHost;
  HandleType handle_type = HandleType::kNone;
  int32_t device = -1;   // the owner's ordinal (for messages)
  uint64_t address = 0;  // the owner's address of the first byte
  uint64_t length = 0;
  uint64_t alloc_base = 0;  // GPU: the owner's address of the containing allocation
  uint64_t alloc_size = 0;
  int32_t fd = -1;             // kPosixFd: descriptor number in the owner process
  uint64_t alloc_id = 0;       // GPU: names this export of the allocation (unique in the owner's engine):
                               // memory freed and allocated again at the same base gets another
  std::array<char, 16> pci{};  // GPU: "0000:xx:yy.z" of the device, NUL-padded
  std::array<char, 64> ipc{};  // kLegacy: the IPC handle

  bool gpu() const { return kind == MemoryKind::kCuda; }
};

inline constexpr size_t kSharedSpanBytes = 136;

// Appends the spans' fixed-size encoding to `out`.
void encode_spans(const std::vector<SharedSpan>& spans, std::string& out);
// kDataLoss if `bytes` is not a whole number of well-formed spans.
Result<std::vector<SharedSpan>> decode_spans(std::string_view bytes);

}  // namespace ferry::local
