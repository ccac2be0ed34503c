// Memory regions and the descriptors that let a peer reach them.
//
// Every byte ferry moves lives in a registered region. Registration tells the
// engine where memory is and what kind it is; export hands a peer a small
// descriptor with an unguessable key for one-sided access to a region or to a
// slice of it. A peer can touch only what was exported to it, only inside the
// exported bounds, and only until the region is deregistered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry {

enum class MemoryKind : uint8_t {
  kHost = 0,        // ordinary (pageable) host memory
  kHostPinned = 1,  // page-locked host memory (cudaHostAlloc / cudaHostRegister)
  kCuda = 2,        // device memory of GPU `device`
};

// "host", "host-pinned" or "cuda".
std::string_view memory_kind_name(MemoryKind kind);

// A registered region, as returned by Engine::reg. A plain value; the engine
// owns the registration until Engine::dereg.
struct Region {
  uint64_t id = 0;
  void* base = nullptr;
  size_t length = 0;
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // GPU ordinal for kCuda, -1 otherwise
};

// A CUDA stream an operation is ordered after, or that waits for one. The
// handles 0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD name a stream of a
// context, not one stream: with `device` set they are the default streams of
// that device's primary context (what torch.cuda.current_stream(device)
// returns for a tensor on it, whatever device the calling thread has
// current); with -1, of the calling thread's current context. Other handles
// name their own stream; `device` does not change them.
struct CudaStreamRef {
  void* stream = nullptr;
  int device = -1;
};

// What a peer needs for one-sided access to (part of) a region: which engine
// owns it, which export it is, the key, and its length. Offsets in write/read
// are relative to the start of the exported slice.
struct RemoteDescriptor {
  uint64_t engine_id = 0;  // the engine that exported it
  uint64_t export_id = 0;  // names the exported slice inside that engine
  uint64_t key = 0;        // unguessable; checked by the owner on every access
  uint64_t length = 0;     // bytes reachable from offset 0
  MemoryKind kind = MemoryKind::kHost;
  int32_t device = -1;

  // A fixed-size byte string, safe to send through any side channel.
  std::string serialize() const;

  // Parses serialize()'s output. kInvalidArgument says what is malformed.
  static Result<RemoteDescriptor> parse(std::string_view bytes);
};

// A (pointer, length) pair naming registered local memory.
struct ConstBuffer {
  const void* data = nullptr;
  size_t size = 0;
};
struct MutableBuffer {
  void* data = nullptr;
  size_t size = 0;
};

// One element of a vector write: local bytes to `remote` at `remote_offset`.
struct WriteItem {
  const void* local = nullptr;
  size_t size = 0;
  RemoteDescriptor remote;
  uint64_t remote_offset = 0;
};

// One element of a vector read: `size` bytes of `remote` at `remote_offset`
// into local memory.
struct ReadItem {
  void* local = nullptr;
  size_t size = 0;
  RemoteDescriptor remote;
  uint64_t remote_offset = 0;
};

// One block of a block write (Connection::write_blocks_async): `size` bytes
// at `local_offset` of local pool `local_pool` go to `remote_offset` of the
// peer's pool `remote_pool` (indices into the pools it was prepared with).
struct Block {
  uint32_t local_pool = 0;
  uint32_t remote_pool = 0;
  uint64_t local_offset = 0;
  uint64_t remote_offset = 0;
  uint64_t size = 0;
};

namespace transport {
class ConnectionCore;
struct PreparedPools;
}  // namespace transport

// Local regions and the peer's exports checked once, for block writes on one
// connection (a KV cache's pools; NIXL's prepared descriptor lists): each
// write then checks only its blocks' bounds. A plain value, cheap to copy.
// A region deregistered later fails the writes that use it (not_found).
class BlockPools {
 public:
  BlockPools() = default;
  size_t local_pools() const;
  size_t remote_pools() const;

 private:
  friend class transport::ConnectionCore;
  std::shared_ptr<const transport::PreparedPools> pools_;
};

}  // namespace ferry
