// The ce backend of `ferry profile`: cudaMemcpyPeerAsync on the source GPU's
// stream, one process for all GPUs, peer access enabled between every pair.
// The copy engines' own speed: the reference the other backends are held to.
#include <nvtx3/nvToolsExt.h>

#include <map>
#include <memory>

#include "ferry/profile_backend.h"
#include "profile_cuda.cuh"

namespace ferry::cli::profile {
namespace {

using profile_cuda::cuda_status;

class CeBackend final : public Backend {
 public:
  explicit CeBackend(BackendArgs args) : args_(std::move(args)) {}

  ~CeBackend() override {
    for (auto& [gpu, d] : devices_) {
      cudaSetDevice(gpu);
      for (auto& [size, p] : d.send) cudaFree(p);
      for (auto& [size, p] : d.recv) cudaFree(p);
      d.timer.reset();
      if (d.stream) cudaStreamDestroy(d.stream);
    }
  }

  const std::vector<int>& local_gpus() const override { return args_.gpus; }

  Status setup() {
    for (int g : args_.gpus) {
      FERRY_CUDA(cudaSetDevice(g), g);
      Device& d = devices_[g];
      FERRY_CUDA(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), g);
      d.timer = std::make_unique<profile_cuda::OpTimer>();
      FERRY_RETURN_IF_ERROR(d.timer->init(g));
      for (int peer : args_.gpus) {
        if (peer == g) continue;
        int can = 0;
        FERRY_CUDA(cudaDeviceCanAccessPeer(&can, g, peer), g);
        if (!can) continue;  // copies then go through the host: recorded in the topology
        cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) FERRY_CUDA(e, g);
        cudaGetLastError();
      }
    }
    return Status();
  }

  Status prepare(const std::vector<uint64_t>& sizes) override {
    for (int g : args_.gpus) {
      FERRY_CUDA(cudaSetDevice(g), g);
      Device& d = devices_[g];
      for (uint64_t size : sizes) {
        void* s = nullptr;
        void* r = nullptr;
        FERRY_CUDA(cudaMalloc(&s, size), g);
        d.send[size] = s;
        FERRY_CUDA(cudaMalloc(&r, size), g);
        d.recv[size] = r;
        FERRY_RETURN_IF_ERROR(profile_cuda::fill_pattern(s, size, g, args_.seed, g, d.stream));
        FERRY_CUDA(cudaMemsetAsync(r, 0, size, d.stream), g);
      }
      FERRY_CUDA(cudaStreamSynchronize(d.stream), g);
    }
    return Status();
  }

  Status barrier() override { return Status(); }

  Result<OpTiming> run_once(const ferry::profile::Config& c, const std::string& label) override {
    Device& from = devices_.at(c.src);
    Device& to = devices_.at(c.dst);
    void* src_buf = from.send.at(c.size);
    void* dst_buf = to.recv.at(c.size);
    FERRY_CUDA(cudaSetDevice(c.src), c.src);
    nvtxRangePushA(label.c_str());
    Status s = from.timer->begin_held(from.stream);
    if (s.ok()) {
      s = cuda_status(cudaMemcpyPeerAsync(dst_buf, c.dst, src_buf, c.src, c.size, from.stream),
                      "cudaMemcpyPeerAsync", c.src);
    }
    if (s.ok()) s = from.timer->end(from.stream);
    from.timer->release();
    nvtxRangePop();
    if (!s.ok()) return s;
    last_src_[{c.dst, c.size}] = c.src;
    return profile_cuda::op_timing(*from.timer, c.src, "copy");
  }

  std::string device_timing() const override {
    for (const auto& [gpu, d] : devices_) {
      if (!d.timer->held()) return "posted in turn (this driver has no stream memory operations)";
    }
    return "held";
  }

  Result<uint64_t> verify() override {
    uint64_t bad = 0;
    for (const auto& [key, src] : last_src_) {
      const auto& [dst, size] = key;
      FERRY_CUDA(cudaSetDevice(dst), dst);
      FERRY_ASSIGN_OR_RETURN(uint64_t b, profile_cuda::count_mismatches(devices_.at(dst).recv.at(size), size, src,
                                                                        args_.seed, dst, devices_.at(dst).stream));
      bad += b;
    }
    if (last_src_.empty()) return Status(Code::kInternal, "nothing was received, so nothing could be verified");
    return bad;
  }

 private:
  struct Device {
    cudaStream_t stream = nullptr;
    std::unique_ptr<profile_cuda::OpTimer> timer;
    std::map<uint64_t, void*> send;
    std::map<uint64_t, void*> recv;
  };
  BackendArgs args_;
  std::map<int, Device> devices_;
  std::map<std::pair<int, uint64_t>, int> last_src_;  // (dst, size) -> the GPU that wrote it last
};

}  // namespace

Result<std::unique_ptr<Backend>> make_ce_backend(const BackendArgs& args) {
  auto b = std::make_unique<CeBackend>(args);
  FERRY_RETURN_IF_ERROR(b->setup());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace ferry::cli::profile
