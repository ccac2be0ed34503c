// PtxKernels: kernels shipped as PTX text, loaded into a device's primary
// context on first use there.
//
// Why: ferry builds without a CUDA toolchain, yet a few copies run best on
// the GPU's own cores (staging slots over TCP, batches of small blocks
// between local GPUs). The driver compiles the PTX once per device; a device
// where it does not load (an older driver, no such GPU) answers null, logged
// once, and the caller uses the copy engines.
//
// Thread-safe: after the first load on a device, looking a kernel up takes
// no lock.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "gpu/cuda_driver.h"
#include "platform/mutex.h"

namespace ferry::platform {

class PtxKernels {
 public:
  // `ptx` must outlive this object; `names` are its entry points, looked up
  // by index. `what` names the kernels in the log ("staging copy kernel").
  PtxKernels(const char* ptx, std::vector<std::string> names, std::string what);
  // Unloads every module loaded (each in its device's context).
  ~PtxKernels();
  PtxKernels(const PtxKernels&) = delete;
  PtxKernels& operator=(const PtxKernels&) = delete;

  // Entry point `index` on `device`, whose context the caller made current,
  // loading the module there on first use; null where it cannot load (or
  // `device` or `index` is out of range: at most kMaxFunctions names count).
  cu::Function function(int device, size_t index);
  // Loads the module now on every device whose primary context this process
  // has made active, each in that context. Why: loading waits for every
  // stream of the context, so it must not happen on a ferry thread while an
  // application stream waits on the GPU for ferry (Connection::stream_wait);
  // once loaded, launches wait for nothing (bench/gpu/blocked_stream_probe.cu).
  void load_where_used();

  static constexpr size_t kMaxFunctions = 5;

 private:
  struct Loaded {
    // Set (release) once the load was tried; `module` and `functions` are
    // written before and only read after, so lookups take no lock.
    std::atomic<bool> tried{false};
    cu::Module module = nullptr;
    std::array<cu::Function, kMaxFunctions> functions{};
  };
  const char* const ptx_;
  const std::vector<std::string> names_;
  const std::string what_;
  Mutex load_mu_;  // serialises loading
  std::array<Loaded, kMaxDevices> loaded_;
};

}  // namespace ferry::platform
