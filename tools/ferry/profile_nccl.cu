// The nccl backend of `ferry profile`: ncclSend/ncclRecv between processes,
// one per GPU, NCCL loaded at run time (profile/nccl_library.h). Rank r drives
// gpus[r]; the parent hands every rank the same unique id.
#include <nvtx3/nvToolsExt.h>

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
    return buffers_.allocate(gpu(), sizes, args_.seed, stream_);
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
    FERRY_ASSIGN_OR_RETURN(std::optional<PeerRole> role, peer_role(c, args_.gpus, gpu()));
    if (!role) return t;
    const bool sending = role->sending, receiving = !sending;
    const int peer = role->peer;
    nvtxRangePushA(label.c_str());
    // Posted in turn, not held: ncclSend/ncclRecv do not return while the
    // stream is held (they hung on the two-H200 host), so the device time
    // includes posting.
    Status s = timer_->begin(stream_);
    if (s.ok()) {
      int r = sending ? nccl_->send(buffers_.send(c.size), c.size, NcclLibrary::kInt8, peer, comm_, stream_)
                      : nccl_->recv(buffers_.recv(c.size), c.size, NcclLibrary::kInt8, peer, comm_, stream_);
      if (r != 0) s = nccl_error(sending ? "ncclSend" : "ncclRecv", r);
    }
    if (s.ok()) s = timer_->end(stream_);
    nvtxRangePop();
    if (!s.ok()) return s;
    if (receiving) buffers_.received(c.size, c.src);
    return profile_cuda::op_timing(*timer_, gpu(), sending ? "send" : "recv");
  }

  Result<uint64_t> verify() override { return buffers_.verify(args_.seed, stream_); }

  std::vector<std::pair<std::string, std::string>> versions() const override {
    return {{"nccl", nccl_->version()}, {"nccl_library", nccl_->path()}};
  }

 private:
  Status nccl_error(const char* what, int r) const {
    return Status(Code::kInternal, std::string(what) + " on GPU " + std::to_string(gpu()) + ": " + nccl_->error(r));
  }

  BackendArgs args_;
  std::vector<int> local_;
  std::unique_ptr<NcclLibrary> nccl_;
  NcclLibrary::Comm comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int* sync_ = nullptr;
  std::unique_ptr<profile_cuda::OpTimer> timer_;
  profile_cuda::RankBuffers buffers_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_nccl_backend(const BackendArgs& args) {
  FERRY_RETURN_IF_ERROR(check_rank(args, "nccl"));
  auto b = std::make_unique<NcclBackend>(args);
  FERRY_RETURN_IF_ERROR(b->setup());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace ferry::cli::profile
