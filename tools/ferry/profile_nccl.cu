// The nccl backend of `ferry profile`: ncclSend/ncclRecv between processes,
// one per GPU, NCCL loaded at run time (profile/nccl_library.h). Rank r drives
// gpus[r]; the parent hands every rank the same unique id.
#include <nvtx3/nvToolsExt.h>

#include <map>
#include <memory>

#include "ferry/profile_backend.h"
#include "profile/nccl_library.h"
#include "profile_cuda.cuh"

namespace ferry::cli::profile {
namespace {

using ferry::profile::NcclLibrary;
using profile_cuda::cuda_status;

class NcclBackend final : public Backend {
 public:
  explicit NcclBackend(BackendArgs args) : args_(std::move(args)), local_{args_.gpus.at(args_.rank)} {}

  ~NcclBackend() override {
    cudaSetDevice(gpu());
    if (comm_ != nullptr) nccl_->comm_destroy(comm_);
    for (auto& [size, p] : send_) cudaFree(p);
    for (auto& [size, p] : recv_) cudaFree(p);
    if (sync_) cudaFree(sync_);
    timer_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  int gpu() const { return local_[0]; }
  const std::vector<int>& local_gpus() const override { return local_; }

  Status setup() {
    FERRY_ASSIGN_OR_RETURN(nccl_, NcclLibrary::load());
    FERRY_ASSIGN_OR_RETURN(ferry::profile::NcclUniqueId id, ferry::profile::nccl_id_from_hex(args_.nccl_id_hex));
    FERRY_CUDA(cudaSetDevice(gpu()), gpu());
    FERRY_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), gpu());
    FERRY_CUDA(cudaMalloc(&sync_, sizeof(int)), gpu());
    timer_ = std::make_unique<profile_cuda::OpTimer>();
    FERRY_RETURN_IF_ERROR(timer_->init(gpu()));
    if (int r = nccl_->comm_init_rank(&comm_, args_.world, id, args_.rank); r != 0) {
      comm_ = nullptr;
      return nccl_error("ncclCommInitRank", r);
    }
    return Status();
  }

  Status prepare(const std::vector<uint64_t>& sizes) override {
    FERRY_CUDA(cudaSetDevice(gpu()), gpu());
    for (uint64_t size : sizes) {
      void* s = nullptr;
      void* r = nullptr;
      FERRY_CUDA(cudaMalloc(&s, size), gpu());
      send_[size] = s;
      FERRY_CUDA(cudaMalloc(&r, size), gpu());
      recv_[size] = r;
      FERRY_RETURN_IF_ERROR(profile_cuda::fill_pattern(s, size, gpu(), args_.seed, gpu(), stream_));
      FERRY_CUDA(cudaMemsetAsync(r, 0, size, stream_), gpu());
    }
    FERRY_CUDA(cudaStreamSynchronize(stream_), gpu());
    return Status();
  }

  // A one-element all-reduce, waited for: every rank leaves within a few
  // microseconds of the others, so the next operation starts together.
  Status barrier() override {
    if (int r = nccl_->all_reduce(sync_, sync_, 1, NcclLibrary::kInt32, NcclLibrary::kSum, comm_, stream_); r != 0) {
      return nccl_error("ncclAllReduce (barrier)", r);
    }
    FERRY_CUDA(cudaStreamSynchronize(stream_), gpu());
    return Status();
  }

  Result<OpTiming> run_once(const ferry::profile::Config& c, const std::string& label) override {
    OpTiming t;
    const bool sending = c.src == gpu();
    const bool receiving = c.dst == gpu();
    if (!sending && !receiving) return t;
    const int peer = rank_of(sending ? c.dst : c.src);
    if (peer < 0) return Status(Code::kInvalidArgument, "GPU of configuration " + std::to_string(c.id) + " has no rank");
    nvtxRangePushA(label.c_str());
    Status s = timer_->begin(stream_);
    if (s.ok()) {
      int r = sending ? nccl_->send(send_.at(c.size), c.size, NcclLibrary::kInt8, peer, comm_, stream_)
                      : nccl_->recv(recv_.at(c.size), c.size, NcclLibrary::kInt8, peer, comm_, stream_);
      if (r != 0) s = nccl_error(sending ? "ncclSend" : "ncclRecv", r);
    }
    if (s.ok()) s = timer_->end(stream_);
    nvtxRangePop();
    if (!s.ok()) return s;
    if (receiving) last_src_[c.size] = c.src;
    t.took_part = true;
    t.host_start_ns = timer_->host_start_ns;
    t.host_end_ns = timer_->host_end_ns;
    t.device_ns = timer_->device_ns;
    t.gpu_start_ns = timer_->gpu_start_ns;
    t.gpu = gpu();
    t.role = sending ? "send" : "recv";
    return t;
  }

  Result<uint64_t> verify() override {
    uint64_t bad = 0;
    FERRY_CUDA(cudaSetDevice(gpu()), gpu());
    for (const auto& [size, src] : last_src_) {
      FERRY_ASSIGN_OR_RETURN(uint64_t b,
                             profile_cuda::count_mismatches(recv_.at(size), size, src, args_.seed, gpu(), stream_));
      bad += b;
    }
    if (last_src_.empty()) return Status(Code::kInternal, "rank received nothing, so nothing could be verified");
    return bad;
  }

  std::vector<std::pair<std::string, std::string>> versions() const override {
    return {{"nccl", nccl_->version()}, {"nccl_library", nccl_->path()}};
  }

 private:
  Status nccl_error(const char* what, int r) const {
    return Status(Code::kInternal, std::string(what) + " on GPU " + std::to_string(gpu()) + ": " + nccl_->error(r));
  }
  int rank_of(int g) const {
    for (size_t i = 0; i < args_.gpus.size(); ++i) {
      if (args_.gpus[i] == g) return static_cast<int>(i);
    }
    return -1;
  }

  BackendArgs args_;
  std::vector<int> local_;
  std::unique_ptr<NcclLibrary> nccl_;
  NcclLibrary::Comm comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int* sync_ = nullptr;
  std::unique_ptr<profile_cuda::OpTimer> timer_;
  std::map<uint64_t, void*> send_;
  std::map<uint64_t, void*> recv_;
  std::map<uint64_t, int> last_src_;  // size -> the GPU that sent it last
};

}  // namespace

Result<std::unique_ptr<Backend>> make_nccl_backend(const BackendArgs& args) {
  if (args.rank < 0 || args.rank >= static_cast<int>(args.gpus.size()) || args.world != static_cast<int>(args.gpus.size())) {
    return Status(Code::kInvalidArgument, "nccl backend: rank " + std::to_string(args.rank) + " of " +
                                              std::to_string(args.world) + " does not match the GPU list");
  }
  auto b = std::make_unique<NcclBackend>(args);
  FERRY_RETURN_IF_ERROR(b->setup());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace ferry::cli::profile
