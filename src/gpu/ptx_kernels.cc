// PtxKernels: loading a PTX module per device and unloading it.
#include "gpu/ptx_kernels.h"

#include <utility>

#include "platform/log.h"

namespace ferry::platform {

PtxKernels::PtxKernels(const char* ptx, std::vector<std::string> names, std::string what)
    : ptx_(ptx), names_(std::move(names)), what_(std::move(what)) {}

PtxKernels::~PtxKernels() {
  const CudaDriver& d = cuda();
  for (size_t dev = 0; dev < loaded_.size(); ++dev) {
    if (loaded_[dev].module == nullptr) continue;
    DeviceScope scope(static_cast<int>(dev));
    d.module_unload(loaded_[dev].module);
  }
}

cu::Function PtxKernels::function(int device, size_t index) {
  if (device < 0 || device >= kMaxDevices || index >= names_.size() || index >= kMaxFunctions) return nullptr;
  Loaded& l = loaded_[static_cast<size_t>(device)];
  if (l.tried.load(std::memory_order_acquire)) return l.functions[index];
  MutexLock lock(load_mu_);
  if (l.tried.load(std::memory_order_relaxed)) return l.functions[index];
  const CudaDriver& d = cuda();
  Status s = d.available() ? Status() : Status(Code::kUnimplemented, "no CUDA driver");
  if (s.ok()) s = d.check(d.module_load_data(&l.module, ptx_), "cuModuleLoadData");
  for (size_t i = 0; s.ok() && i < names_.size() && i < kMaxFunctions; ++i) {
    s = d.check(d.module_get_function(&l.functions[i], l.module, names_[i].c_str()), "cuModuleGetFunction");
  }
  if (!s.ok()) {
    FERRY_LOG(kWarn, "cuda", "GPU %d uses the copy engines: the %s did not load: %s", device, what_.c_str(),
              s.message().c_str());
    l.functions.fill(nullptr);
  }
  l.tried.store(true, std::memory_order_release);
  return l.functions[index];
}

void PtxKernels::load_where_used() {
  const CudaDriver& d = cuda();
  int count = 0;
  if (!d.available() || d.device_get_count(&count) != cu::kSuccess) return;
  for (int device = 0; device < count && device < kMaxDevices; ++device) {
    unsigned flags = 0;
    int active = 0;
    if (d.primary_ctx_get_state(device, &flags, &active) != cu::kSuccess || !active) continue;
    if (loaded_[static_cast<size_t>(device)].tried.load(std::memory_order_acquire)) continue;
    DeviceScope scope(device);
    if (scope.ok()) (void)function(device, 0);
  }
}

}  // namespace ferry::platform
