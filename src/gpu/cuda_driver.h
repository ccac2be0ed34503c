// CudaDriver: the CUDA driver API entry points ferry uses, loaded with dlopen
// on first use so that ferry builds without CUDA headers and runs on hosts
// without a GPU (available() is then false and nothing else may be called).
//
// Only the driver API is used: it needs no runtime library, works in any
// context the application made current, and covers IPC and the virtual
// memory API. Types are declared here by hand with the driver's ABI.
//
// Thread-safe: the table is filled once and only read afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ferry/status.h"

namespace ferry::platform {

namespace cu {
using Result = int;  // CUresult; 0 is success
using Device = int;
using Context = struct CUctx_st*;
using Stream = struct CUstream_st*;
using Event = struct CUevent_st*;
using Module = struct CUmod_st*;
using Function = struct CUfunc_st*;
using DevicePtr = uint64_t;            // CUdeviceptr (unsigned long long on 64-bit Linux, same size)
using MemHandle = unsigned long long;  // CUmemGenericAllocationHandle
struct IpcMemHandle {
  char reserved[64];
};
struct MemLocation {
  int type;
  int id;
};
struct MemAllocationProp {
  int type;
  int requested_handle_types;
  MemLocation location;
  void* win32_meta;
  unsigned char compression_type;
  unsigned char gpu_direct_rdma_capable;
  unsigned short usage;
  unsigned char reserved[4];
};
struct MemAccessDesc {
  MemLocation location;
  int flags;
};
// CUmemcpyAttributes (cuMemcpyBatchAsync, CUDA 12.8 on).
struct MemcpyAttributes {
  int src_access_order;
  MemLocation src_loc_hint;
  MemLocation dst_loc_hint;
  unsigned flags;
};
inline constexpr int kMemcpySrcAccessOrderStream = 1;

inline constexpr Result kSuccess = 0;
inline constexpr Result kNotReady = 600;
inline constexpr int kPointerMemoryType = 2;
inline constexpr int kPointerDeviceOrdinal = 9;
inline constexpr int kPointerLegacyIpcCapable = 10;
inline constexpr int kPointerRangeStart = 11;
inline constexpr int kPointerRangeSize = 12;
inline constexpr unsigned kMemoryTypeHost = 1;
inline constexpr unsigned kMemoryTypeDevice = 2;
inline constexpr unsigned kIpcLazyPeerAccess = 1;
inline constexpr Result kPeerAccessAlreadyEnabled = 704;
inline constexpr int kHandleTypePosixFd = 1;
inline constexpr int kLocationDevice = 1;
inline constexpr int kAllocationPinned = 1;
inline constexpr int kAccessReadWrite = 3;
inline constexpr unsigned kStreamNonBlocking = 1;
inline constexpr unsigned kEventDisableTiming = 2;
inline constexpr unsigned kHostAllocPortable = 1;
inline constexpr unsigned kHostRegisterPortable = 1;
inline constexpr unsigned kHostRegisterDeviceMap = 2;
inline constexpr unsigned kHostAllocDeviceMap = 2;
inline constexpr unsigned kStreamWaitValueGeq = 0;  // (int32_t)(*addr - value) >= 0
inline constexpr int kStreamCaptureStatusNone = 0;
inline constexpr int kLimitStackSize = 0;
inline constexpr int kLimitPrintfFifoSize = 1;
inline constexpr int kLimitMallocHeapSize = 2;
using HostFn = void (*)(void*);
}  // namespace cu

struct CudaDriver {
  cu::Result (*init)(unsigned) = nullptr;
  cu::Result (*get_error_name)(cu::Result, const char**) = nullptr;
  cu::Result (*get_error_string)(cu::Result, const char**) = nullptr;
  cu::Result (*device_get)(cu::Device*, int) = nullptr;
  cu::Result (*device_get_count)(int*) = nullptr;
  cu::Result (*device_get_pci_bus_id)(char*, int, cu::Device) = nullptr;
  cu::Result (*primary_ctx_retain)(cu::Context*, cu::Device) = nullptr;
  cu::Result (*primary_ctx_release)(cu::Device) = nullptr;
  cu::Result (*ctx_set_current)(cu::Context) = nullptr;
  cu::Result (*ctx_get_current)(cu::Context*) = nullptr;
  cu::Result (*ctx_pop_current)(cu::Context*) = nullptr;
  cu::Result (*ctx_enable_peer_access)(cu::Context, unsigned) = nullptr;
  // A new context (cuCtxCreate): the CUDA 12.5+ entry point with its
  // parameters (null: none), else the older one. Either may be null.
  cu::Result (*ctx_create_v4)(cu::Context*, void*, unsigned, cu::Device) = nullptr;
  cu::Result (*ctx_create_v2)(cu::Context*, unsigned, cu::Device) = nullptr;
  // Optional (cuCtxSetLimit): ferry's own context runs no kernel, so its
  // per-thread stack reserve is shrunk.
  cu::Result (*ctx_set_limit)(int, size_t) = nullptr;
  cu::Result (*ctx_get_limit)(size_t*, int) = nullptr;
  cu::Result (*pointer_get_attribute)(void*, int, cu::DevicePtr) = nullptr;
  cu::Result (*mem_get_address_range)(cu::DevicePtr*, size_t*, cu::DevicePtr) = nullptr;
  cu::Result (*ipc_get_mem_handle)(cu::IpcMemHandle*, cu::DevicePtr) = nullptr;
  cu::Result (*ipc_open_mem_handle)(cu::DevicePtr*, cu::IpcMemHandle, unsigned) = nullptr;
  cu::Result (*ipc_close_mem_handle)(cu::DevicePtr) = nullptr;
  cu::Result (*mem_retain_allocation_handle)(cu::MemHandle*, void*) = nullptr;
  cu::Result (*mem_release)(cu::MemHandle) = nullptr;
  cu::Result (*mem_export_to_shareable_handle)(void*, cu::MemHandle, int, unsigned long long) = nullptr;
  cu::Result (*mem_import_from_shareable_handle)(cu::MemHandle*, void*, int) = nullptr;
  cu::Result (*mem_get_allocation_properties)(cu::MemAllocationProp*, cu::MemHandle) = nullptr;
  cu::Result (*mem_address_reserve)(cu::DevicePtr*, size_t, size_t, cu::DevicePtr, unsigned long long) = nullptr;
  cu::Result (*mem_address_free)(cu::DevicePtr, size_t) = nullptr;
  cu::Result (*mem_map)(cu::DevicePtr, size_t, size_t, cu::MemHandle, unsigned long long) = nullptr;
  cu::Result (*mem_unmap)(cu::DevicePtr, size_t) = nullptr;
  cu::Result (*mem_set_access)(cu::DevicePtr, size_t, const cu::MemAccessDesc*, size_t) = nullptr;
  cu::Result (*mem_create)(cu::MemHandle*, size_t, const cu::MemAllocationProp*, unsigned long long) = nullptr;
  cu::Result (*mem_get_allocation_granularity)(size_t*, const cu::MemAllocationProp*, int) = nullptr;
  cu::Result (*stream_create)(cu::Stream*, unsigned) = nullptr;
  cu::Result (*stream_create_with_priority)(cu::Stream*, unsigned, int) = nullptr;
  cu::Result (*ctx_get_stream_priority_range)(int*, int*) = nullptr;
  cu::Result (*stream_destroy)(cu::Stream) = nullptr;
  cu::Result (*stream_synchronize)(cu::Stream) = nullptr;
  cu::Result (*stream_query)(cu::Stream) = nullptr;
  cu::Result (*event_create)(cu::Event*, unsigned) = nullptr;
  cu::Result (*event_destroy)(cu::Event) = nullptr;
  cu::Result (*event_record)(cu::Event, cu::Stream) = nullptr;
  cu::Result (*event_query)(cu::Event) = nullptr;
  cu::Result (*event_synchronize)(cu::Event) = nullptr;
  cu::Result (*memcpy_async)(cu::DevicePtr, cu::DevicePtr, size_t, cu::Stream) = nullptr;
  // Typed copies: no lookup of what the pointers are (cheaper for small copies).
  cu::Result (*memcpy_dtod_async)(cu::DevicePtr, cu::DevicePtr, size_t, cu::Stream) = nullptr;
  cu::Result (*memcpy_htod_async)(cu::DevicePtr, const void*, size_t, cu::Stream) = nullptr;
  cu::Result (*memcpy_dtoh_async)(void*, cu::DevicePtr, size_t, cu::Stream) = nullptr;
  cu::Result (*memcpy)(cu::DevicePtr, cu::DevicePtr, size_t) = nullptr;
  cu::Result (*mem_alloc)(cu::DevicePtr*, size_t) = nullptr;
  cu::Result (*mem_free)(cu::DevicePtr) = nullptr;
  cu::Result (*mem_host_alloc)(void**, size_t, unsigned) = nullptr;
  cu::Result (*mem_free_host)(void*) = nullptr;
  cu::Result (*mem_host_register)(void*, size_t, unsigned) = nullptr;
  cu::Result (*mem_host_unregister)(void*) = nullptr;
  cu::Result (*mem_get_info)(size_t*, size_t*) = nullptr;
  cu::Result (*mem_host_get_device_pointer)(cu::DevicePtr*, void*, unsigned) = nullptr;
  cu::Result (*launch_host_func)(cu::Stream, cu::HostFn, void*) = nullptr;
  cu::Result (*stream_is_capturing)(cu::Stream, int*) = nullptr;
  // Optional: a stream waits on the GPU for a 32-bit word (stream memory
  // operations). Null where the driver lacks it.
  cu::Result (*stream_wait_value32)(cu::Stream, cu::DevicePtr, uint32_t, unsigned) = nullptr;
  cu::Result (*ctx_synchronize)() = nullptr;
  cu::Result (*primary_ctx_get_state)(cu::Device, unsigned*, int*) = nullptr;
  cu::Result (*module_load_data)(cu::Module*, const void*) = nullptr;
  cu::Result (*module_unload)(cu::Module) = nullptr;
  cu::Result (*module_get_function)(cu::Function*, cu::Module, const char*) = nullptr;
  cu::Result (*launch_kernel)(cu::Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              cu::Stream, void**, void**) = nullptr;
  // Optional: many copies in one call (drivers of CUDA 12.8 on; the CUDA 13
  // entry point drops the failure index). Null where the driver lacks both.
  cu::Result (*memcpy_batch_async_v2)(cu::DevicePtr*, cu::DevicePtr*, size_t*, size_t, cu::MemcpyAttributes*, size_t*,
                                      size_t, cu::Stream) = nullptr;
  cu::Result (*memcpy_batch_async_v1)(cu::DevicePtr*, cu::DevicePtr*, size_t*, size_t, cu::MemcpyAttributes*, size_t*,
                                      size_t, size_t*, cu::Stream) = nullptr;
  bool has_memcpy_batch() const { return memcpy_batch_async_v2 != nullptr || memcpy_batch_async_v1 != nullptr; }
  // `count` device-to-device copies queued on `stream` in one call, each
  // ordered on the stream. REQUIRES: has_memcpy_batch().
  cu::Result memcpy_batch(cu::DevicePtr* dsts, cu::DevicePtr* srcs, size_t* sizes, size_t count,
                          cu::Stream stream) const;

  // A stream for ferry's own GPU work, in the current context: non-blocking
  // (it never waits for, nor holds up, the legacy default stream) and of the
  // context's greatest priority. The priority keeps ferry's copies out of
  // the hardware queues a stream waiting on a transfer (stream_wait) holds:
  // streams share CUDA_DEVICE_MAX_CONNECTIONS queues (8 by default), and a
  // copy queued on a stream sharing the waiting one's queue waits behind a
  // wait that waits for it. On an H200, a copy on every 8th default-priority
  // stream made after the waiter was held, none on the greatest priority's
  // (bench/gpu/aliased_stream_probe.cu). With CUDA_DEVICE_MAX_CONNECTIONS=1
  // every stream shares the one queue (see ConnectionCore::stream_wait).
  cu::Result create_own_stream(cu::Stream* s) const;

  // True when libcuda loaded, every entry point resolved and cuInit succeeded.
  bool available() const { return init != nullptr; }

  // OK for kSuccess; otherwise a Status with `code` whose message names the
  // call and the driver's error ("cuIpcOpenMemHandle: CUDA_ERROR_...: ...").
  Status check(cu::Result r, const char* call, Code code = Code::kInternal) const;
};

// Device ordinals from this one on are refused (no host has this many GPUs).
inline constexpr int kMaxDevices = 64;

// The process's driver table (loaded on first call).
const CudaDriver& cuda();

// Which context of a device ferry works in. kApplication: the device's
// primary context, which the application (torch, CuPy, ...) uses too.
// kFerry: a context ferry makes for itself on the device, used only while a
// stream of the application waits on the GPU for a transfer
// (Connection::stream_wait): streams of one context share its hardware
// queues, and a copy queued where the waiting stream sits would run only
// after the wait, which waits for the copy. Work of another context never
// queues there (bench/gpu/aliased_stream_probe.cu), so the copies that end a
// waited transfer are queued in ferry's context (docs/architecture.md,
// "CUDA stream order").
enum class GpuContext : uint8_t { kApplication, kFerry };

// Makes the primary context of device `ordinal` current on the calling
// thread, retaining it once per process (never released: the application
// shares it). kUnimplemented without a driver.
Status use_device(int ordinal);

// The primary context of device `ordinal` (retained once, as use_device
// does), without making it current. kUnimplemented without a driver.
Result<cu::Context> device_context(int ordinal);

// Ferry's own context on device `ordinal` (GpuContext::kFerry), made on
// first call and kept for the process, like the primary context. It costs
// device memory (about 260 MiB on an H200), so it is asked for only once a
// stream may wait: a stream wait's kit makes it (GpuKit::fill) on every
// device the process has a context on, before the wait is queued; a copier
// asks for it only while a wait is armed, and then finds it made, unless
// the process took up a new device since. kUnimplemented without a driver
// or where the driver cannot make a context.
Result<cu::Context> ferry_context(int ordinal);

// Makes the primary context of `ordinal` (or ferry's own, `which`) current
// for its lifetime and then restores the context the thread had, so that
// ferry's copies on an application thread leave the application's current
// context alone. ok() is false when the context could not be made current
// (status() says why).
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal, GpuContext which = GpuContext::kApplication);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

 private:
  cu::Context previous_ = nullptr;
  bool switched_ = false;
  Status status_;
};

}  // namespace ferry::platform
