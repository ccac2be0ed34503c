// `ferry profile` backends: the ways of moving bytes from one GPU to another
// that a profile run can time, behind one interface.
//
// A backend lives in one process and drives the GPUs that process owns. Two
// process layouts exist:
//   - one process for all GPUs (ce: cudaMemcpyPeerAsync on the copy engines);
//   - one process per GPU (nccl, and the ferry engine's local transport): the
//     `ferry profile` parent starts one child per GPU, and each child runs the
//     same plan, taking part in the configurations that involve its GPU.
//
// Adding a backend: implement Backend in its own file (a .cu file when it
// needs CUDA), give it a factory, and add a BackendSpec to backends() in
// profile_backend.cc. Nothing else changes: the plan, warm-up, timing loop,
// drift windows, files and analysis are shared.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ferry/status.h"
#include "profile/plan.h"

namespace ferry::cli::profile {

// One operation as this process saw it.
struct OpTiming {
  bool took_part = false;    // false: this process has no part in the configuration
  int64_t host_start_ns = 0;  // CLOCK_MONOTONIC just before the operation was posted
  int64_t host_end_ns = 0;    // ... just after it was seen complete
  int64_t device_ns = 0;      // between CUDA events around the operation on `gpu`'s stream
  int64_t gpu_start_ns = 0;   // the operation's start on `gpu`'s timer (%globaltimer), 0 if unknown
  int gpu = 0;                // the GPU whose stream and timer timed it
  std::string role;           // "copy", "send" or "recv"
};

// Thread-compatible: one thread drives a backend.
class Backend {
 public:
  virtual ~Backend() = default;

  // The GPUs this process drives (their clocks and metadata are this rank's).
  virtual const std::vector<int>& local_gpus() const = 0;
  // Allocates a send and a receive buffer per size on each local GPU, fills
  // the send buffers with their GPU's pattern and clears the receive buffers.
  // Blocks. Timing starts only after this.
  virtual Status prepare(const std::vector<uint64_t>& sizes) = 0;
  // Returns when every process of the run has reached it (no-op in one
  // process). Called before each operation so that operations never overlap.
  virtual Status barrier() = 0;
  // Runs `c` once and returns when it is complete (blocking semantics).
  // `label` names the NVTX range around it.
  virtual Result<OpTiming> run_once(const ferry::profile::Config& c, const std::string& label) = 0;
  // Compares every receive buffer written during the run with its sender's
  // pattern; returns the number of wrong bytes. Blocks.
  virtual Result<uint64_t> verify() = 0;
  // Library versions and paths worth recording ("nccl" -> "2.28.3", ...).
  virtual std::vector<std::pair<std::string, std::string>> versions() const { return {}; }
  // How device times were taken, for the metadata: "held" (the stream waited
  // until the operation and both events were queued) or "posted in turn".
  virtual std::string device_timing() const { return "posted in turn"; }
};

// What a backend is handed. A process-per-GPU backend gets from the parent
// whatever its ranks need to find each other (nccl_id_hex, rendezvous_dir).
struct BackendArgs {
  std::vector<int> gpus;       // every GPU of the plan, in plan order
  int rank = 0;                // this process (process-per-GPU: drives gpus[rank])
  int world = 1;               // processes in the run
  std::string nccl_id_hex;     // nccl: the communicator's unique id
  std::string rendezvous_dir;  // ferry: the empty directory where ranks publish their engines
  double wait_limit_s = 3600;  // ferry: longest wait for another rank, seconds (the run's --timeout)
  uint64_t seed = 42;          // seeds the buffers' data
};

struct BackendSpec {
  const char* name;
  const char* summary;
  bool process_per_gpu;
  // Why this build cannot run it, or nullptr when it can.
  const char* unavailable;
};

// Process-per-GPU backends: the part of the rank driving `gpu` (of `gpus`,
// one rank each, in order) in configuration `c`: whether it sends, and the
// rank at the other end; nullopt when `gpu` takes no part. kInvalidArgument
// if the other GPU has no rank.
struct PeerRole {
  bool sending = false;
  int peer = -1;
};
Result<std::optional<PeerRole>> peer_role(const ferry::profile::Config& c, const std::vector<int>& gpus, int gpu);
// Whether args' rank and world fit its GPU list (kInvalidArgument naming
// `backend` if not).
Status check_rank(const BackendArgs& args, const std::string& backend);

// Every backend name ferry knows, built or not.
const std::vector<BackendSpec>& backends();
// nullptr for an unknown name.
const BackendSpec* find_backend(const std::string& name);
// kInvalidArgument for an unknown name, kUnimplemented for a backend this
// build or this engine does not have, or the backend's own setup error.
Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const BackendArgs& args);

// Factories of the CUDA backends (profile_ce.cu, profile_nccl.cu, profile_ferry.cu).
Result<std::unique_ptr<Backend>> make_ce_backend(const BackendArgs& args);
Result<std::unique_ptr<Backend>> make_nccl_backend(const BackendArgs& args);
Result<std::unique_ptr<Backend>> make_ferry_backend(const BackendArgs& args);

}  // namespace ferry::cli::profile
