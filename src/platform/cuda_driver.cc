// Loading the CUDA driver's entry points by name.
#include "platform/cuda_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

namespace ferry::platform {
namespace {

template <typename Fn>
bool load(void* lib, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(::dlsym(lib, name));
  return out != nullptr;
}

CudaDriver load_driver() {
  CudaDriver d;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return d;
  decltype(d.init) init = nullptr;
  bool ok = load(lib, "cuInit", init) && load(lib, "cuGetErrorName", d.get_error_name) &&
            load(lib, "cuGetErrorString", d.get_error_string) && load(lib, "cuDeviceGet", d.device_get) &&
            load(lib, "cuDeviceGetCount", d.device_get_count) &&
            load(lib, "cuDeviceGetPCIBusId", d.device_get_pci_bus_id) &&
            load(lib, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain) &&
            load(lib, "cuDevicePrimaryCtxRelease_v2", d.primary_ctx_release) &&
            load(lib, "cuCtxSetCurrent", d.ctx_set_current) && load(lib, "cuCtxGetCurrent", d.ctx_get_current) &&
            load(lib, "cuPointerGetAttribute", d.pointer_get_attribute) &&
            load(lib, "cuMemGetAddressRange_v2", d.mem_get_address_range) &&
            load(lib, "cuIpcGetMemHandle", d.ipc_get_mem_handle) &&
            load(lib, "cuIpcOpenMemHandle_v2", d.ipc_open_mem_handle) &&
            load(lib, "cuIpcCloseMemHandle", d.ipc_close_mem_handle) &&
            load(lib, "cuMemRetainAllocationHandle", d.mem_retain_allocation_handle) &&
            load(lib, "cuMemRelease", d.mem_release) &&
            load(lib, "cuMemExportToShareableHandle", d.mem_export_to_shareable_handle) &&
            load(lib, "cuMemImportFromShareableHandle", d.mem_import_from_shareable_handle) &&
            load(lib, "cuMemGetAllocationPropertiesFromHandle", d.mem_get_allocation_properties) &&
            load(lib, "cuMemAddressReserve", d.mem_address_reserve) &&
            load(lib, "cuMemAddressFree", d.mem_address_free) && load(lib, "cuMemMap", d.mem_map) &&
            load(lib, "cuMemUnmap", d.mem_unmap) && load(lib, "cuMemSetAccess", d.mem_set_access) &&
            load(lib, "cuMemCreate", d.mem_create) &&
            load(lib, "cuMemGetAllocationGranularity", d.mem_get_allocation_granularity) &&
            load(lib, "cuStreamCreate", d.stream_create) && load(lib, "cuStreamDestroy_v2", d.stream_destroy) &&
            load(lib, "cuStreamSynchronize", d.stream_synchronize) &&
            load(lib, "cuStreamQuery", d.stream_query) && load(lib, "cuEventCreate", d.event_create) &&
            load(lib, "cuEventDestroy_v2", d.event_destroy) && load(lib, "cuEventRecord", d.event_record) &&
            load(lib, "cuEventQuery", d.event_query) && load(lib, "cuEventSynchronize", d.event_synchronize) &&
            load(lib, "cuMemcpyAsync", d.memcpy_async) &&
            load(lib, "cuMemcpyDtoDAsync_v2", d.memcpy_dtod_async) &&
            load(lib, "cuMemcpyHtoDAsync_v2", d.memcpy_htod_async) &&
            load(lib, "cuMemcpyDtoHAsync_v2", d.memcpy_dtoh_async) && load(lib, "cuMemcpy", d.memcpy) &&
            load(lib, "cuMemAlloc_v2", d.mem_alloc) && load(lib, "cuMemFree_v2", d.mem_free) &&
            load(lib, "cuMemHostAlloc", d.mem_host_alloc) && load(lib, "cuMemFreeHost", d.mem_free_host) &&
            load(lib, "cuMemGetInfo_v2", d.mem_get_info) && load(lib, "cuCtxSynchronize", d.ctx_synchronize) &&
            load(lib, "cuDevicePrimaryCtxGetState", d.primary_ctx_get_state) &&
            load(lib, "cuModuleLoadData", d.module_load_data) && load(lib, "cuModuleUnload", d.module_unload) &&
            load(lib, "cuModuleGetFunction", d.module_get_function) &&
            load(lib, "cuLaunchKernel", d.launch_kernel);
  // A driver without a device (or too old for one entry point) counts as none.
  if (!ok || init(0) != cu::kSuccess) return CudaDriver{};
  d.init = init;
  return d;
}

}  // namespace

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

DeviceScope::DeviceScope(int ordinal) {
  auto ctx = device_context(ordinal);
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
