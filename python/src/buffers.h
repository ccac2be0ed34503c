// Turning Python arguments into (pointer, length) spans of memory, without
// copying, and keeping their owners alive while ferry uses them.
//
// Accepted, in this order:
//   int                       a raw address; the caller must pass a size
//   (int, int) tuple          (address, size)
//   buffer protocol           bytes, bytearray, memoryview, array.array, NumPy arrays, ...
//   tensor-like               torch.Tensor on CPU or CUDA (data_ptr/numel/element_size)
//   __cuda_array_interface__  CuPy, Numba, ... device arrays
//   __dlpack__                any DLPack producer
// Memory must be one contiguous block (C or Fortran order); anything else is
// a ValueError naming the argument. Destinations (recv, read) must be
// writable where the object can say so; a read-only source is marked as such
// (BufferArg::read_only), so that the engine can refuse to export it or let
// anything land in it later. All functions need the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ferry/memory.h"

namespace ferry::py {

namespace pyb = pybind11;

enum class Access { kRead, kWrite };

// Which CUDA stream a call orders its transfer after: its `stream=`
// argument. "auto" (the default): the stream the buffer's producer named
// (a torch CUDA tensor: torch.cuda.current_stream(its device); an object's
// __cuda_array_interface__ "stream"; a CUDA DLPack producer is asked to
// order its work before the legacy default stream, which ferry then
// follows); None: no ordering (the caller synchronised); an int (a
// cudaStream_t) or a stream object (torch.cuda.Stream: .cuda_stream; CuPy:
// .ptr): that stream, for every buffer of the call.
// A given default-stream handle (0, 1, 2) names the stream of the device the
// stream object says (torch: .device, CuPy: .device_id), else of the
// buffer's device: see CudaStreamRef.
struct StreamChoice {
  enum class Kind { kAuto, kNone, kGiven };
  Kind kind = Kind::kAuto;
  uintptr_t stream = 0;
  int device = -1;  // the stream object's device, when it says
};

// Parses a call's `stream=` argument; TypeError for anything else.
StreamChoice stream_choice(pyb::handle stream);

struct BufferArg {
  void* data = nullptr;
  size_t size = 0;
  pyb::object keep;  // keeps the memory alive (and exported); None for raw addresses
  // The type of a read-only object ("bytes", "memoryview", "ndarray", ...),
  // as its buffer or __cuda_array_interface__ says; "" when it is writable or
  // cannot say (raw addresses, tensors, DLPack).
  std::string read_only;
  // The CUDA stream whose queued work the transfer follows (none: unordered).
  std::optional<uintptr_t> stream;
  // The GPU the buffer is on, where the object says (-1: host, or unknown);
  // a default-stream handle is that device's (CudaStreamRef).
  int device = -1;
};

// Resolves `obj`, named `what` in messages (e.g. "data", "parts[2]").
// `size`: bytes to use from the start of the object; defaults to all of it and
// may not exceed it. Raises TypeError for an unsupported object, ValueError
// for a non-contiguous or read-only one or a bad size.
BufferArg resolve_buffer(pyb::handle obj, std::optional<uint64_t> size, Access access, const std::string& what,
                         const StreamChoice& order = {});

// Resolves each element of a sequence of buffers (or (address, size) tuples).
std::vector<BufferArg> resolve_buffers(pyb::handle seq, Access access, const char* what,
                                       const StreamChoice& order = {});

// The distinct streams of `bufs` with their devices, in first-seen order.
std::vector<CudaStreamRef> streams_of(const std::vector<BufferArg>& bufs);

}  // namespace ferry::py
