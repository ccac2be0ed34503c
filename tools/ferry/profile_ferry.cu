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
#include <map>
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
    for (auto& [size, p] : send_) cudaFree(p);
    for (auto& [size, p] : recv_) cudaFree(p);
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
    options.transport = "local";
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
    for (uint64_t size : sizes) {
      void* s = nullptr;
      void* r = nullptr;
      FERRY_CUDA(cudaMalloc(&s, size), gpu());
      send_[size] = s;
      FERRY_CUDA(cudaMalloc(&r, size), gpu());
      recv_[size] = r;
      FERRY_RETURN_IF_ERROR(profile_cuda::fill_pattern(s, size, gpu(), args_.seed, gpu(), stream_));
      FERRY_CUDA(cudaMemsetAsync(r, 0, size, stream_), gpu());
      FERRY_RETURN_IF_ERROR(register_gpu_buffer(s, size));
      FERRY_RETURN_IF_ERROR(register_gpu_buffer(r, size));
    }
    FERRY_CUDA(cudaStreamSynchronize(stream_), gpu());
    return Status();
  }

  Status barrier() override { return ranks_->barrier(after(wait_limit_)); }

  Result<OpTiming> run_once(const ferry::profile::Config& c, const std::string& label) override {
    OpTiming t;
    const bool sending = c.src == gpu();
    const bool receiving = c.dst == gpu();
    if (!sending && !receiving) return t;
    const int peer = rank_of(sending ? c.dst : c.src);
    if (peer < 0) {
      return Status(Code::kInvalidArgument, "GPU of configuration " + std::to_string(c.id) + " has no rank");
    }
    Connection& conn = ranks_->to(peer);
    int64_t host_start = 0;
    int64_t host_end = 0;
    nvtxRangePushA(label.c_str());
    Status s = timer_->begin(stream_);
    if (s.ok()) {
      host_start = host_now_ns();
      Transfer op = sending ? conn.send_async(send_.at(c.size), c.size) : conn.recv_async(recv_.at(c.size), c.size);
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
    if (receiving) last_src_[c.size] = c.src;
    t.took_part = true;
    t.host_start_ns = host_start;
    t.host_end_ns = host_end;
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
    return {{"ferry", FERRY_VERSION}, {"ferry_transport", "local"}};
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
  int rank_of(int g) const {
    for (size_t i = 0; i < args_.gpus.size(); ++i) {
      if (args_.gpus[i] == g) return static_cast<int>(i);
    }
    return -1;
  }

  BackendArgs args_;
  std::vector<int> local_;
  Clock::duration wait_limit_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<profile_cuda::OpTimer> timer_;
  std::unique_ptr<RankConnections> ranks_;
  std::map<uint64_t, void*> send_;
  std::map<uint64_t, void*> recv_;
  std::map<uint64_t, int> last_src_;  // size -> the GPU that sent it last
};

}  // namespace

Result<std::unique_ptr<Backend>> make_ferry_backend(const BackendArgs& args) {
  if (args.rank < 0 || args.rank >= static_cast<int>(args.gpus.size()) ||
      args.world != static_cast<int>(args.gpus.size())) {
    return Status(Code::kInvalidArgument, "ferry backend: rank " + std::to_string(args.rank) + " of " +
                                              std::to_string(args.world) + " does not match the GPU list");
  }
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
