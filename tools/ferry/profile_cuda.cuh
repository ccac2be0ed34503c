// Shared CUDA pieces of `ferry profile` (included by its .cu files only):
// error mapping, the data pattern, timer reads, the op timer and the buffers
// of one rank.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ferry/profile_backend.h"
#include "ferry/status.h"

namespace ferry::cli::profile_cuda {

// A CUDA error as a Status naming the call and the GPU.
inline Status cuda_status(cudaError_t e, const char* what, int gpu) {
  if (e == cudaSuccess) return Status();
  return Status(Code::kInternal, std::string(what) + " on GPU " + std::to_string(gpu) + ": " + cudaGetErrorName(e) +
                                     " (" + cudaGetErrorString(e) + ")");
}

#define FERRY_CUDA(call, gpu) FERRY_RETURN_IF_ERROR(::ferry::cli::profile_cuda::cuda_status((call), #call, (gpu)))

// The byte at `index` of the buffer GPU `src` sends at `size`: random-looking,
// never zero, a function of (seed, src, size, index) so that a receiver can
// check what arrived without being told.
__host__ __device__ inline uint8_t pattern_byte(uint64_t seed, int src, uint64_t size, uint64_t index) {
  uint64_t z = seed ^ (uint64_t(src + 1) * 0x9e3779b97f4a7c15ull) ^ (size * 0xbf58476d1ce4e5b9ull) ^
               ((index >> 3) * 0x94d049bb133111ebull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  uint8_t b = uint8_t(z >> (8 * (index & 7)));
  return b == 0 ? uint8_t(0x5a) : b;
}

__device__ inline uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Fills `buf` with src's pattern; blocks until done.
Status fill_pattern(void* buf, uint64_t size, int src, uint64_t seed, int gpu, cudaStream_t stream);
// Counts bytes of `buf` that differ from src's pattern; blocks.
Result<uint64_t> count_mismatches(const void* buf, uint64_t size, int src, uint64_t seed, int gpu,
                                  cudaStream_t stream);
// Writes %globaltimer into *slot (mapped host memory) when the stream reaches it.
void launch_stamp(uint64_t* slot, cudaStream_t stream);

// Times one operation on one stream: host CLOCK_MONOTONIC before posting and
// after completion, CUDA events around it, and a %globaltimer stamp just
// after the end event that places it on the GPU's timer.
//
// Held timing (begin_held) keeps the host's posting out of the device time:
// the stream first waits for a flag in mapped host memory (a stream memory
// operation, cuStreamWaitValue32), so the start event, the operation and the
// end event are all queued when end() raises the flag. Posted in turn
// instead, the start event fires at once on an idle stream and the device
// time includes however long cudaMemcpyPeerAsync took to post: on the
// two-H200 host that put 9 of 100 copies of 1 MiB over 1.15x their median
// (CV 15 %), and held timing none (CV 1.5-2.2 %), medians within 0.2 us.
class OpTimer {
 public:
  OpTimer() = default;
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;
  // Creates the events and the mapped stamp slot on `gpu` (must be current).
  Status init(int gpu);
  // begin(): host time, then the start event. end(): the end event and the
  // stamp, then waits for the end event and takes the host time; then waits
  // for the stamp. Results in the fields below.
  Status begin(cudaStream_t stream);
  // begin() behind the hold described above; where the driver has no stream
  // memory operations it is begin() and held() says false.
  Status begin_held(cudaStream_t stream);
  Status end(cudaStream_t stream);
  // Lifts a hold without timing: call it when posting the operation failed.
  void release();
  bool held() const { return wait_value_ != nullptr; }

  int64_t host_start_ns = 0;
  int64_t host_end_ns = 0;
  int64_t device_ns = 0;
  int64_t gpu_start_ns = 0;

 private:
  int gpu_ = -1;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  cudaStream_t stamp_stream_ = nullptr;  // where the stamp kernel runs, off the timed stream
  using WaitValueFn = int (*)(cudaStream_t, unsigned long long, unsigned, unsigned);
  uint64_t* stamp_ = nullptr;  // mapped pinned host memory: the stamp, then the hold flag
  volatile unsigned* hold_ = nullptr;
  unsigned long long hold_device_ = 0;  // hold_ as the GPU sees it
  unsigned hold_seq_ = 0;               // the value that lifts the current hold
  bool holding_ = false;
  WaitValueFn wait_value_ = nullptr;  // cuStreamWaitValue32, nullptr if the driver lacks it
};

int64_t host_now_ns();

// What an OpTimer measured, as the OpTiming of one operation on `gpu`.
inline cli::profile::OpTiming op_timing(const OpTimer& timer, int gpu, const char* role) {
  cli::profile::OpTiming t;
  t.took_part = true;
  t.host_start_ns = timer.host_start_ns;
  t.host_end_ns = timer.host_end_ns;
  t.device_ns = timer.device_ns;
  t.gpu_start_ns = timer.gpu_start_ns;
  t.gpu = gpu;
  t.role = role;
  return t;
}

// The buffers of one rank of a process-per-GPU backend (nccl, ferry): a send
// and a receive buffer per size on the rank's GPU, and which GPU wrote each
// receive buffer last, for the check after the run.
class RankBuffers {
 public:
  RankBuffers() = default;
  ~RankBuffers();
  RankBuffers(const RankBuffers&) = delete;
  RankBuffers& operator=(const RankBuffers&) = delete;

  // Allocates both buffers of every size on `gpu` (must be current), fills
  // the send buffers with its pattern and clears the receive buffers. Blocks.
  Status allocate(int gpu, const std::vector<uint64_t>& sizes, uint64_t seed, cudaStream_t stream);
  void* send(uint64_t size) const { return send_.at(size); }
  void* recv(uint64_t size) const { return recv_.at(size); }
  void received(uint64_t size, int src) { last_src_[size] = src; }
  // Wrong bytes over every receive buffer written during the run. Blocks.
  Result<uint64_t> verify(uint64_t seed, cudaStream_t stream) const;

 private:
  int gpu_ = -1;
  std::map<uint64_t, void*> send_;
  std::map<uint64_t, void*> recv_;
  std::map<uint64_t, int> last_src_;  // size -> the GPU that sent it last
};

}  // namespace ferry::cli::profile_cuda
