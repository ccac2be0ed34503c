// profile_gpu.h for builds without CUDA: every GPU question is answered
// "not in this build", so `ferry profile --dry-run` works and GPU runs fail
// with a clear message.
#include "ferry/profile_gpu.h"

#ifndef FERRY_PROFILE_CUDA

namespace ferry::cli::profile_gpu {
namespace {

Status no_cuda() {
  return Status(Code::kUnimplemented,
                "this ferry was built without CUDA (no nvcc at configure time); rebuild where the CUDA toolkit is "
                "installed to run GPU profiles");
}

}  // namespace

bool built_with_cuda() { return false; }
Result<int> device_count() { return no_cuda(); }
Result<DeviceInfo> device_info(int) { return no_cuda(); }
Result<bool> can_access_peer(int, int) { return no_cuda(); }
Result<std::vector<ferry::profile::ClockFit>> measure_clocks(const std::vector<int>&, double) { return no_cuda(); }
Result<double> thermal_warmup(const std::vector<int>&, int, double, const std::function<int(int)>&) {
  return no_cuda();
}
Result<std::vector<ferry::profile::ReferenceRow>> reference_loop(int, int, uint64_t, int, int) { return no_cuda(); }

}  // namespace ferry::cli::profile_gpu

#endif  // FERRY_PROFILE_CUDA
