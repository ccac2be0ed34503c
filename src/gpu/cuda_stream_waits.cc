// The CUDA driver's StreamWaits.
#include <cstdio>
#include <string>

#include "gpu/cuda_driver.h"
#include "gpu/stream_context.h"
#include "gpu/stream_waits.h"

namespace ferry::platform {
namespace {

std::string stream_name(void* stream) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", stream);
  return std::string("CUDA stream ") + buf;
}

// Runs on the driver's callback thread once the stream reaches it.
void run_reached(void* fn) {
  auto* reached = static_cast<std::function<void()>*>(fn);
  (*reached)();
  delete reached;
}

class CudaStreamWaits final : public StreamWaits {
 public:
  Result<bool> idle(const CudaStreamRef& ref) override {
    const CudaDriver& cu = cuda();
    if (!cu.available()) return Status(Code::kUnimplemented, "ordering after a CUDA stream needs the CUDA driver");
    StreamContext context(ref);
    FERRY_RETURN_IF_ERROR(context.status());
    void* stream = ref.stream;
    cu::Result r = cu.stream_query(static_cast<cu::Stream>(stream));
    if (r == cu::kSuccess) return true;
    if (r == cu::kNotReady) return false;
    return cu.check(r, "cuStreamQuery", Code::kInvalidArgument).with_context(stream_name(stream));
  }

  Status when_reached(const CudaStreamRef& ref, std::function<void()> reached) override {
    const CudaDriver& cu = cuda();
    if (!cu.available()) return Status(Code::kUnimplemented, "ordering after a CUDA stream needs the CUDA driver");
    StreamContext context(ref);
    FERRY_RETURN_IF_ERROR(context.status());
    void* stream = ref.stream;
    auto s = static_cast<cu::Stream>(stream);
    int capture = cu::kStreamCaptureStatusNone;
    FERRY_RETURN_IF_ERROR(cu.check(cu.stream_is_capturing(s, &capture), "cuStreamIsCapturing", Code::kInvalidArgument)
                              .with_context(stream_name(stream)));
    if (capture != cu::kStreamCaptureStatusNone) {
      return Status(Code::kInvalidArgument, stream_name(stream) +
                                                " is being captured into a CUDA graph: a transfer cannot be ordered "
                                                "after it (pass stream=None, or post the transfer outside the capture)");
    }
    auto* fn = new std::function<void()>(std::move(reached));
    cu::Result r = cu.launch_host_func(s, &run_reached, fn);
    if (r != cu::kSuccess) {
      delete fn;
      return cu.check(r, "cuLaunchHostFunc", Code::kInvalidArgument).with_context(stream_name(stream));
    }
    return Status();
  }
};

}  // namespace

std::unique_ptr<StreamWaits> cuda_stream_waits() { return std::make_unique<CudaStreamWaits>(); }

}  // namespace ferry::platform
