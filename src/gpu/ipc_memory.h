// GPU allocations shared between processes of one host, as the driver
// does it: a legacy IPC handle (cudaMalloc memory) or a POSIX file
// descriptor (memory of the virtual-memory API, cuMemCreate with fd handles
// allowed). The local transport decides who may open what and keeps the
// mappings (transport/local/gpu_sharing.h); every driver call is here.
#pragma once

#include <array>
#include <cstdint>

#include "ferry/status.h"

namespace ferry::platform {

enum class GpuHandleType : uint8_t {
  kNone = 0,     // host memory
  kLegacy = 1,   // cuIpcGetMemHandle of the containing cudaMalloc allocation
  kPosixFd = 2,  // cuMemExportToShareableHandle; the fd is the owner's descriptor
};

// The allocation that contains an address, and a handle for another process.
struct ExportedAllocation {
  uint64_t base = 0;
  uint64_t size = 0;
  GpuHandleType type = GpuHandleType::kNone;
  int fd = -1;                 // kPosixFd: the caller owns it
  std::array<char, 64> ipc{};  // kLegacy: the handle's bytes
};

// Exports the allocation of device `device` containing `address`.
// kUnimplemented for memory the driver cannot share (a virtual-memory
// allocation made without POSIX fd handles).
Result<ExportedAllocation> export_gpu_allocation(uint64_t address, int device);

// A peer's allocation as mapped here (or this process's own, used where it is).
struct MappedAllocation {
  uint64_t local = 0;  // where it starts in this process
  uint64_t size = 0;   // what was mapped: never more than the allocation
};

// Opens a legacy IPC handle in the current context (the device that will
// drive the copies), with lazy peer access. `claimed` is the size the owner
// said; the mapping's size is the smaller of it and the real one.
Result<MappedAllocation> open_ipc_allocation(const std::array<char, 64>& handle, uint64_t claimed);
// Maps `size` bytes of the allocation behind `fd` (an owner's exported
// descriptor, fetched into this process), read-write from `device`. The
// caller still closes `fd`.
Result<MappedAllocation> map_fd_allocation(int fd, uint64_t size, int device);
// This process's own allocation starting at `base`, checked to be one, used
// from `device` (peer access enabled from it when another GPU owns it).
// kDataLoss when `base` is not the start of an allocation of this process.
Result<MappedAllocation> own_allocation(uint64_t base, uint64_t claimed, int device);
// Undoes open_ipc_allocation / map_fd_allocation on `device`.
void close_gpu_mapping(const MappedAllocation& m, GpuHandleType type, int device);

// The PCI address of GPU `ordinal` as a fixed-size field ("0000:04:00.0"),
// and the local ordinal of the GPU with that address, or -1.
std::array<char, 16> gpu_pci_field(int ordinal);
int gpu_ordinal_of(const std::array<char, 16>& pci);

}  // namespace ferry::platform
