// Loading the CUDA driver's entry points by name.
#include "gpu/cuda_driver.h"

#include <atomic>
#include <mutex>

#include "platform/dynamic_library.h"

namespace ferry::platform {
namespace {

CudaDriver load_driver() {
  CudaDriver d;
  auto lib = DynamicLibrary::open({"libcuda.so.1"});
  if (!lib.ok()) return d;
  // Never unloaded: the table below is the process's for good, and a driver
  // that cuInit touched is not to be unloaded under its own threads.
  lib->keep_loaded();
  Status missing;
  auto need = [&](const char* name, auto& fn) {
    if (missing.ok()) missing = lib->lookup(name, fn);
  };
  decltype(d.init) init = nullptr;
  need("cuInit", init);
  need("cuGetErrorName", d.get_error_name);
  need("cuGetErrorString", d.get_error_string);
  need("cuDeviceGet", d.device_get);
  need("cuDeviceGetCount", d.device_get_count);
  need("cuDeviceGetPCIBusId", d.device_get_pci_bus_id);
  need("cuDevicePrimaryCtxRetain", d.primary_ctx_retain);
  need("cuDevicePrimaryCtxRelease_v2", d.primary_ctx_release);
  need("cuCtxSetCurrent", d.ctx_set_current);
  need("cuCtxGetCurrent", d.ctx_get_current);
  need("cuCtxPopCurrent_v2", d.ctx_pop_current);
  need("cuCtxEnablePeerAccess", d.ctx_enable_peer_access);
  need("cuPointerGetAttribute", d.pointer_get_attribute);
  need("cuMemGetAddressRange_v2", d.mem_get_address_range);
  need("cuIpcGetMemHandle", d.ipc_get_mem_handle);
  need("cuIpcOpenMemHandle_v2", d.ipc_open_mem_handle);
  need("cuIpcCloseMemHandle", d.ipc_close_mem_handle);
  need("cuMemRetainAllocationHandle", d.mem_retain_allocation_handle);
  need("cuMemRelease", d.mem_release);
  need("cuMemExportToShareableHandle", d.mem_export_to_shareable_handle);
  need("cuMemImportFromShareableHandle", d.mem_import_from_shareable_handle);
  need("cuMemGetAllocationPropertiesFromHandle", d.mem_get_allocation_properties);
  need("cuMemAddressReserve", d.mem_address_reserve);
  need("cuMemAddressFree", d.mem_address_free);
  need("cuMemMap", d.mem_map);
  need("cuMemUnmap", d.mem_unmap);
  need("cuMemSetAccess", d.mem_set_access);
  need("cuMemCreate", d.mem_create);
  need("cuMemGetAllocationGranularity", d.mem_get_allocation_granularity);
  need("cuStreamCreate", d.stream_create);
  need("cuStreamCreateWithPriority", d.stream_create_with_priority);
  need("cuCtxGetStreamPriorityRange", d.ctx_get_stream_priority_range);
  need("cuStreamDestroy_v2", d.stream_destroy);
  need("cuStreamSynchronize", d.stream_synchronize);
  need("cuStreamQuery", d.stream_query);
  need("cuEventCreate", d.event_create);
  need("cuEventDestroy_v2", d.event_destroy);
  need("cuEventRecord", d.event_record);
  need("cuEventQuery", d.event_query);
  need("cuEventSynchronize", d.event_synchronize);
  need("cuMemcpyAsync", d.memcpy_async);
  need("cuMemcpyDtoDAsync_v2", d.memcpy_dtod_async);
  need("cuMemcpyHtoDAsync_v2", d.memcpy_htod_async);
  need("cuMemcpyDtoHAsync_v2", d.memcpy_dtoh_async);
  need("cuMemcpy", d.memcpy);
  need("cuMemAlloc_v2", d.mem_alloc);
  need("cuMemFree_v2", d.mem_free);
  need("cuMemHostAlloc", d.mem_host_alloc);
  need("cuMemFreeHost", d.mem_free_host);
  need("cuMemHostRegister_v2", d.mem_host_register);
  need("cuMemHostUnregister", d.mem_host_unregister);
  need("cuMemGetInfo_v2", d.mem_get_info);
  need("cuMemHostGetDevicePointer_v2", d.mem_host_get_device_pointer);
  need("cuLaunchHostFunc", d.launch_host_func);
  need("cuStreamIsCapturing", d.stream_is_capturing);
  need("cuCtxSynchronize", d.ctx_synchronize);
  need("cuDevicePrimaryCtxGetState", d.primary_ctx_get_state);
  need("cuModuleLoadData", d.module_load_data);
  need("cuModuleUnload", d.module_unload);
  need("cuModuleGetFunction", d.module_get_function);
  need("cuLaunchKernel", d.launch_kernel);
  // The _v2 entry point works on every device of CUDA 12 on; the first
  // needed a kernel module option.
  if (missing.ok() && !lib->lookup_optional("cuStreamWaitValue32_v2", d.stream_wait_value32)) {
    (void)lib->lookup_optional("cuStreamWaitValue32", d.stream_wait_value32);
  }
  if (missing.ok() && !lib->lookup_optional("cuCtxCreate_v4", d.ctx_create_v4)) {
    (void)lib->lookup_optional("cuCtxCreate_v2", d.ctx_create_v2);
  }
  if (missing.ok()) {
    (void)lib->lookup_optional("cuCtxSetLimit", d.ctx_set_limit);
    (void)lib->lookup_optional("cuCtxGetLimit", d.ctx_get_limit);
  }
  if (missing.ok() && !lib->lookup_optional("cuMemcpyBatchAsync_v2", d.memcpy_batch_async_v2)) {
    (void)lib->lookup_optional("cuMemcpyBatchAsync", d.memcpy_batch_async_v1);
  }
  // A driver without a device (or too old for one entry point) counts as none.
  if (!missing.ok() || init(0) != cu::kSuccess) return CudaDriver{};
  d.init = init;
  return d;
}

}  // namespace

cu::Result CudaDriver::create_own_stream(cu::Stream* s) const {
  int least = 0;
  int greatest = 0;
  if (cu::Result r = ctx_get_stream_priority_range(&least, &greatest); r != cu::kSuccess) return r;
  return stream_create_with_priority(s, cu::kStreamNonBlocking, greatest);
}

cu::Result CudaDriver::memcpy_batch(cu::DevicePtr* dsts, cu::DevicePtr* srcs, size_t* sizes, size_t count,
                                    cu::Stream stream) const {
  cu::MemcpyAttributes attrs{};
  attrs.src_access_order = cu::kMemcpySrcAccessOrderStream;
  size_t first = 0;  // every copy takes attrs
  if (memcpy_batch_async_v2 != nullptr) {
    return memcpy_batch_async_v2(dsts, srcs, sizes, count, &attrs, &first, 1, stream);
  }
  size_t failed_at = 0;
  return memcpy_batch_async_v1(dsts, srcs, sizes, count, &attrs, &first, 1, &failed_at, stream);
}

Status CudaDriver::check(cu::Result r, const char* call, Code code) const {
  if (r == cu::kSuccess) return Status();
  const char* name = "CUDA_ERROR_UNKNOWN";
  const char* text = "";
  if (get_error_name != nullptr) get_error_name(r, &name);
  if (get_error_string != nullptr) get_error_string(r, &text);
  return Status(code, std::string(call) + ": " + name + " (" + std::to_string(r) + "): " + text);
}

const CudaDriver& cuda() {
  static const CudaDriver d = load_driver();
  return d;
}

Result<cu::Context> device_context(int ordinal) {
  const CudaDriver& d = cuda();
  if (!d.available()) return Status(Code::kUnimplemented, "no CUDA driver on this host");
  if (ordinal < 0 || ordinal >= kMaxDevices) {
    return Status(Code::kInvalidArgument, "CUDA device ordinal " + std::to_string(ordinal));
  }
  // Read on every staging copy by every path worker: a lock here made
  // workers wait on one another, so a context is read without one once it
  // was retained.
  static std::atomic<cu::Context> contexts[kMaxDevices];  // by ordinal; retained once, kept for the process
  cu::Context c = contexts[ordinal].load(std::memory_order_acquire);
  if (c != nullptr) return c;
  static std::mutex mu;
  std::lock_guard lock(mu);
  c = contexts[ordinal].load(std::memory_order_acquire);
  if (c != nullptr) return c;
  cu::Device dev = 0;
  FERRY_RETURN_IF_ERROR(d.check(d.device_get(&dev, ordinal), "cuDeviceGet", Code::kInvalidArgument));
  FERRY_RETURN_IF_ERROR(d.check(d.primary_ctx_retain(&c, dev), "cuDevicePrimaryCtxRetain"));
  contexts[ordinal].store(c, std::memory_order_release);
  return c;
}

Status use_device(int ordinal) {
  auto ctx = device_context(ordinal);
  if (!ctx.ok()) return ctx.status();
  const CudaDriver& d = cuda();
  return d.check(d.ctx_set_current(ctx.value()), "cuCtxSetCurrent");
}

Result<cu::Context> ferry_context(int ordinal) {
  const CudaDriver& d = cuda();
  if (!d.available()) return Status(Code::kUnimplemented, "no CUDA driver on this host");
  if (ordinal < 0 || ordinal >= kMaxDevices) {
    return Status(Code::kInvalidArgument, "CUDA device ordinal " + std::to_string(ordinal));
  }
  // Read on every copy made while a stream waits: no lock once made.
  static std::atomic<cu::Context> contexts[kMaxDevices];  // by ordinal; made once, kept for the process
  cu::Context c = contexts[ordinal].load(std::memory_order_acquire);
  if (c != nullptr) return c;
  static std::mutex mu;
  std::lock_guard lock(mu);
  c = contexts[ordinal].load(std::memory_order_acquire);
  if (c != nullptr) return c;
  if (d.ctx_create_v4 == nullptr && d.ctx_create_v2 == nullptr) {
    return Status(Code::kUnimplemented, "this CUDA driver cannot make a context (no cuCtxCreate)");
  }
  cu::Device dev = 0;
  FERRY_RETURN_IF_ERROR(d.check(d.device_get(&dev, ordinal), "cuDeviceGet", Code::kInvalidArgument));
  // cuCtxCreate pushes the new context on the thread's stack: popped after.
  cu::Result r = d.ctx_create_v4 != nullptr ? d.ctx_create_v4(&c, nullptr, 0, dev) : d.ctx_create_v2(&c, 0, dev);
  FERRY_RETURN_IF_ERROR(d.check(r, "cuCtxCreate (ferry's own context)", Code::kResourceExhausted));
  // Only copies run there: the device memory a context keeps for its
  // kernels' stacks, printf and malloc is given back where the driver lets
  // it (each limit as small as it takes; a refusal keeps the default).
  if (d.ctx_set_limit != nullptr) {
    for (int limit : {cu::kLimitStackSize, cu::kLimitPrintfFifoSize, cu::kLimitMallocHeapSize}) {
      if (d.ctx_set_limit(limit, 0) != cu::kSuccess) (void)d.ctx_set_limit(limit, 1024);
    }
  }
  cu::Context popped = nullptr;
  d.ctx_pop_current(&popped);
  contexts[ordinal].store(c, std::memory_order_release);
  return c;
}

DeviceScope::DeviceScope(int ordinal, GpuContext which) {
  auto ctx = which == GpuContext::kFerry ? ferry_context(ordinal) : device_context(ordinal);
  if (!ctx.ok()) {
    status_ = ctx.status();
    return;
  }
  const CudaDriver& d = cuda();
  if (d.ctx_get_current(&previous_) != cu::kSuccess) previous_ = nullptr;
  if (previous_ == ctx.value()) return;
  status_ = d.check(d.ctx_set_current(ctx.value()), "cuCtxSetCurrent");
  switched_ = status_.ok();
}

DeviceScope::~DeviceScope() {
  if (switched_) cuda().ctx_set_current(previous_);
}

}  // namespace ferry::platform
