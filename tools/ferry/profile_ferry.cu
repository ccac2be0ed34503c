// The ferry backend of `ferry profile`: this engine's local transport between
// processes, one per GPU. Rank r drives gpus[r]; its engine holds a
// connection to every other rank (profile_ferry_ranks.h, which also has the
// barrier). An operation is one send from the source rank's buffer and one
// receive into the destination rank's buffer, both registered with the
// engine as GPU memory; the local transport moves the bytes in one copy
// through CUDA IPC (over NVLink where the GPUs have it).
//
// Timing: the engine's copies run on its own streams, where this process
// cannot record events. So the CUDA events go on an idle stream of this
// rank's GPU, one just before the operation is posted and one just after its
// completion is seen: device_ns covers the host's post and completion path as
// well as the copy (each event is stamped when the GPU reaches it, a few
// microseconds after the host records it). host_start_ns and host_end_ns are
// read inside that interval, around post and completion only.
#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <memory>

#include "ferry/engine.h"
#include "ferry/profile_backend.h"
#include "ferry/profile_ferry_ranks.h"
#include "profile_cuda.cuh"

#ifndef FERRY_VERSION
#define FERRY_VERSION "unknown"
#endif

namespace ferry::cli::profile {
namespace {

using profile_cuda::host_now_ns;

// Every rank must have its engine up and connected to the others by then.
// The ranks start together; this covers CUDA's start-up on a busy host many
// times over, and a rank that failed to start is reported after it, not
// after --timeout.
constexpr std::chrono::seconds kRendezvousTimeout{120};

class FerryBackend final : public Backend {
 public:
  explicit FerryBackend(BackendArgs args)
      : args_(std::move(args)),
        local_{args_.gpus.at(args_.rank)},
        wait_limit_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(args_.wait_limit_s))) {}

  ~FerryBackend() override {
    // Connections and registrations end before the memory they name is freed.
    ranks_.reset();
    cudaSetDevice(gpu());
    timer_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  int gpu() const { return local_[0]; }
  const std::vector<int>& local_gpus() const override { return local_; }

  Status setup() {
    FERRY_CUDA(cudaSetDevice(gpu()), gpu());
    FERRY_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), gpu());
    timer_ = std::make_unique<profile_cuda::OpTimer>();
    FERRY_RETURN_IF_ERROR(timer_->init(gpu()));
    Options options;
    options.listen = "127.0.0.1:0";  // a free port; the rendezvous directory tells the others
    // Only the local transport is timed here: a peer it cannot reach is an
    // error, not a silent fall-back to TCP.
    options.transport = TransportChoice::kLocal;
    // Failures reach run_once and barrier as Status values naming the rank;
    // the engine's warnings would repeat them, and at the end of a run each
    // rank's close reaches peers that are closing too and would be reported
    // as lost. FERRY_LOG still overrides this.
    options.log_level = LogLevel::kError;
    FERRY_ASSIGN_OR_RETURN(ranks_, RankConnections::create(args_.rendezvous_dir, args_.rank, args_.world,
                                                           std::move(options), after(kRendezvousTimeout)));
    for (int q = 0; q < args_.world; ++q) {
      if (q == args_.rank) continue;
      std::string_view transport = ranks_->to(q).transport_name();
      if (transport != "local") {
        return Status(Code::kUnimplemented, "the connection to rank " + std::to_string(q) + " uses the " +
                                                std::string(transport) +
                                                " transport, not local (is FERRY_TRANSPORT set?)");
      }
    }
    return Status();
  }

  Status prepare(const std::vector<uint64_t>& sizes) override {
    FERRY_CUDA(cudaSetDevice(gpu()), gpu());
    FERRY_RETURN_IF_ERROR(buffers_.allocate(gpu(), sizes, args_.seed, stream_));
    for (uint64_t size : sizes) {
      FERRY_RETURN_IF_ERROR(register_gpu_buffer(buffers_.send(size), size));
      FERRY_RETURN_IF_ERROR(register_gpu_buffer(buffers_.recv(size), size));
    }
    return Status();
  }

  Status barrier() override { return ranks_->barrier(after(wait_limit_)); }

  Result<OpTiming> run_once(const ferry::profile::Config& c, const std::string& label) override {
    OpTiming t;
    FERRY_ASSIGN_OR_RETURN(std::optional<PeerRole> role, peer_role(c, args_.gpus, gpu()));
    if (!role) return t;
    const bool sending = role->sending, receiving = !sending;
    const int peer = role->peer;
    Connection& conn = ranks_->to(peer);
    int64_t host_start = 0;
    int64_t host_end = 0;
    nvtxRangePushA(label.c_str());
    Status s = timer_->begin(stream_);
    if (s.ok()) {
      host_start = host_now_ns();
      Transfer op = sending ? conn.send_async(buffers_.send(c.size), c.size)
                            : conn.recv_async(buffers_.recv(c.size), c.size);
      s = op.wait(after(wait_limit_));
      host_end = host_now_ns();
      if (s.code() == Code::kDeadlineExceeded) op.cancel();
      if (s.ok() && receiving && op.bytes() != c.size) {
        s = Status(Code::kDataLoss, "received " + std::to_string(op.bytes()) + " bytes");
      }
      if (!s.ok()) {
        s = s.with_context(std::string(sending ? "send to rank " : "receive from rank ") + std::to_string(peer) +
                           " (GPU " + std::to_string(sending ? c.dst : c.src) + "), " + std::to_string(c.size) +
                           " bytes, " + label);
      }
    }
    if (s.ok()) s = timer_->end(stream_);
    nvtxRangePop();
    if (!s.ok()) return s;
    if (receiving) buffers_.received(c.size, c.src);
    t = profile_cuda::op_timing(*timer_, gpu(), sending ? "send" : "recv");
    t.host_start_ns = host_start;  // post and completion only (see the top of this file)
    t.host_end_ns = host_end;
    return t;
  }

  Result<uint64_t> verify() override { return buffers_.verify(args_.seed, stream_); }

  std::vector<std::pair<std::string, std::string>> versions() const override {
    return {{"ferry", FERRY_VERSION}, {"ferry_transport", "local"}};
  }
  std::string device_timing() const override {
    return "events on an idle stream around posting and completion (includes the engine's host path)";
  }

 private:
  // Registers a buffer of this rank's GPU with the engine, which must see it
  // as that GPU's memory (it asks the CUDA driver).
  Status register_gpu_buffer(void* p, uint64_t size) {
    auto region = ranks_->engine().reg(p, size);
    if (!region.ok()) return region.status().with_context("registering a buffer of GPU " + std::to_string(gpu()));
    if (region->kind != MemoryKind::kCuda || region->device != gpu()) {
      return Status(Code::kUnimplemented, "the engine sees a buffer of GPU " + std::to_string(gpu()) + " as " +
                                              std::string(memory_kind_name(region->kind)) + " memory of device " +
                                              std::to_string(region->device) + " (no CUDA driver found?)");
    }
    return Status();
  }

  BackendArgs args_;
  std::vector<int> local_;
  Clock::duration wait_limit_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<profile_cuda::OpTimer> timer_;
  profile_cuda::RankBuffers buffers_;  // before ranks_: the engine lets go of them first
  std::unique_ptr<RankConnections> ranks_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_ferry_backend(const BackendArgs& args) {
  FERRY_RETURN_IF_ERROR(check_rank(args, "ferry"));
  if (args.rendezvous_dir.empty()) {
    return Status(Code::kInvalidArgument,
                  "ferry backend: no rendezvous directory (rank started outside ferry profile?)");
  }
  if (!(args.wait_limit_s > 0 && args.wait_limit_s < 1e7)) {
    return Status(Code::kInvalidArgument, "ferry backend: the wait limit must be between 0 and 1e7 s, got " +
                                              std::to_string(args.wait_limit_s));
  }
  auto b = std::make_unique<FerryBackend>(args);
  FERRY_RETURN_IF_ERROR(b->setup());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace ferry::cli::profile
