// aliased_stream_probe: does work queued on other streams of the context run
// while one stream waits on the host (cuStreamWaitValue32 on mapped pinned
// memory)?
//
// Why it exists: Connection::stream_wait makes an application stream wait on
// a word ferry writes once a transfer has landed; a receive over TCP lands
// through copies ferry queues on its own streams after that wait was queued.
// Streams share a bounded set of hardware queues (CUDA_DEVICE_MAX_CONNECTIONS,
// 8 unless set before the context is made); a copy whose stream shares the
// waiting stream's queue sits behind the wait, and the wait behind the copy:
// a deadlock the driver cannot see (the driver API's "stream memory
// operations" warning). This tool counts, for each way of queuing the
// landing work, how many of STREAMS streams are held by one waiting stream.
//
//   nvcc -O2 -std=c++17 bench/gpu/aliased_stream_probe.cu -o aliased_stream_probe -lcuda
//   aliased_stream_probe [STREAMS] [LIMIT_MS]
//
// One line a case: WAITER STREAMS-KIND WORK held N of STREAMS (indices)
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "driver_check.cuh"

namespace {

enum class Work { kCopy, kKernel };
enum class Kind { kPlain, kHighPriority, kOtherContext };

const char* name(Work w) { return w == Work::kCopy ? "copy" : "kernel"; }
const char* name(Kind k) {
  switch (k) {
    case Kind::kPlain: return "plain";
    case Kind::kHighPriority: return "high-priority";
    case Kind::kOtherContext: return "other-context";
  }
  return "?";
}

struct Setup {
  CUcontext primary = nullptr;
  CUcontext other = nullptr;
  CUdeviceptr dev = 0;        // 1 MiB in the primary context
  CUdeviceptr dev_other = 0;  // 1 MiB in the other context (its kernels' target)
  void* pinned = nullptr;  // 1 MiB, portable
  uint32_t* word = nullptr;
  CUdeviceptr word_dev = 0;
  uint32_t value = 0;
  CUfunction poke = nullptr;        // primary context
  CUfunction poke_other = nullptr;  // other context
};

// One case: `waiter` waits on the word; each of `n` streams of `kind` then
// gets `work`; after `limit_ms`, the streams whose work has not run are held.
// Waiters: the legacy default stream, a non-blocking stream of the lowest
// (default) or the highest priority, and a stream that waits on an event of
// a waiting stream (a consumer's second stream).
enum class Waiter { kLegacy, kNonBlocking, kHighPriority, kChained };
const char* name(Waiter w) {
  switch (w) {
    case Waiter::kLegacy: return "legacy";
    case Waiter::kNonBlocking: return "non-blocking";
    case Waiter::kHighPriority: return "high-waiter";
    case Waiter::kChained: return "chained";
  }
  return "?";
}

void run_case(Setup& s, Waiter who, Kind kind, Work work, int n, int limit_ms) {
  CU(cuCtxSetCurrent(s.primary));
  int least = 0, greatest = 0;
  CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  CUstream waiter = nullptr;
  CUstream chained = nullptr;
  if (who != Waiter::kLegacy) {
    CU(cuStreamCreateWithPriority(&waiter, CU_STREAM_NON_BLOCKING, who == Waiter::kHighPriority ? greatest : 0));
  }
  if (who == Waiter::kChained) CU(cuStreamCreateWithPriority(&chained, CU_STREAM_NON_BLOCKING, greatest));
  CUcontext ctx = kind == Kind::kOtherContext ? s.other : s.primary;
  CU(cuCtxSetCurrent(ctx));
  std::vector<CUstream> streams(static_cast<size_t>(n));
  std::vector<CUevent> done(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    int prio = kind == Kind::kHighPriority ? greatest : 0;
    CU(cuStreamCreateWithPriority(&streams[static_cast<size_t>(i)], CU_STREAM_NON_BLOCKING, prio));
    CU(cuEventCreate(&done[static_cast<size_t>(i)], CU_EVENT_DISABLE_TIMING));
  }
  CU(cuCtxSetCurrent(s.primary));
  ++s.value;
  CU(cuStreamWaitValue32(waiter, s.word_dev, s.value, CU_STREAM_WAIT_VALUE_GEQ));
  CUevent after_wait = nullptr;
  if (chained) {
    CU(cuEventCreate(&after_wait, CU_EVENT_DISABLE_TIMING));
    CU(cuEventRecord(after_wait, waiter));
    CU(cuStreamWaitEvent(chained, after_wait, 0));
  }
  CU(cuCtxSetCurrent(ctx));
  std::string err;
  for (int i = 0; i < n; ++i) {
    CUstream st = streams[static_cast<size_t>(i)];
    CUresult r;
    if (work == Work::kCopy) {
      // Into the primary context's memory, from the other context too.
      r = cuMemcpyHtoDAsync(s.dev + static_cast<CUdeviceptr>(i) * 4096, static_cast<char*>(s.pinned) + i * 4096,
                            4096, st);
    } else {
      CUdeviceptr p = (kind == Kind::kOtherContext ? s.dev_other : s.dev) + static_cast<CUdeviceptr>(i) * 4096;
      void* args[] = {&p};
      r = cuLaunchKernel(kind == Kind::kOtherContext ? s.poke_other : s.poke, 1, 1, 1, 1, 1, 1, 0, st, args,
                         nullptr);
    }
    if (r != CUDA_SUCCESS && err.empty()) {
      const char* e = nullptr;
      cuGetErrorName(r, &e);
      err = e ? e : "?";
    }
    CU(cuEventRecord(done[static_cast<size_t>(i)], st));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(limit_ms));
  std::string held;
  int count = 0;
  for (int i = 0; i < n; ++i) {
    if (cuEventQuery(done[static_cast<size_t>(i)]) == CUDA_ERROR_NOT_READY) {
      ++count;
      held += (held.empty() ? "" : ",") + std::to_string(i);
    }
  }
  __atomic_store_n(s.word, s.value, __ATOMIC_RELEASE);
  CU(cuCtxSetCurrent(s.primary));
  CU(cuCtxSynchronize());
  CU(cuCtxSetCurrent(ctx));
  CU(cuCtxSynchronize());
  for (int i = 0; i < n; ++i) {
    CU(cuStreamDestroy(streams[static_cast<size_t>(i)]));
    CU(cuEventDestroy(done[static_cast<size_t>(i)]));
  }
  CU(cuCtxSetCurrent(s.primary));
  if (waiter) CU(cuStreamDestroy(waiter));
  if (chained) CU(cuStreamDestroy(chained));
  if (after_wait) CU(cuEventDestroy(after_wait));
  std::printf("%-12s %-14s %-7s held %2d of %2d %s%s\n", name(who), name(kind),
              name(work), count, n, err.empty() ? "" : ("error " + err + " ").c_str(),
              held.empty() ? "" : ("(" + held + ")").c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 40;
  const int limit_ms = argc > 2 ? std::atoi(argv[2]) : 300;
  const char* conn = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  std::printf("CUDA_DEVICE_MAX_CONNECTIONS=%s, %d streams, %d ms\n", conn ? conn : "(unset)", n, limit_ms);
  CUdevice device;
  Setup s;
  s.primary = use_primary_context(&device);
  CU(cuMemAlloc(&s.dev, 1 << 20));
  CU(cuMemHostAlloc(&s.pinned, 1 << 20, CU_MEMHOSTALLOC_PORTABLE));
  CU(cuMemHostAlloc(reinterpret_cast<void**>(&s.word), 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CU(cuMemHostGetDevicePointer(&s.word_dev, s.word, 0));
  CUmodule m;
  CU(cuModuleLoadData(&m, kPokePtx));
  CU(cuModuleGetFunction(&s.poke, m, "poke"));
#if CUDA_VERSION >= 13000
  CU(cuCtxCreate(&s.other, nullptr, 0, device));
#else
  CU(cuCtxCreate(&s.other, 0, device));
#endif
  CU(cuCtxSetCurrent(s.other));
  CU(cuMemAlloc(&s.dev_other, 1 << 20));
  CUmodule m2;
  CU(cuModuleLoadData(&m2, kPokePtx));
  CU(cuModuleGetFunction(&s.poke_other, m2, "poke"));
  for (Waiter who : {Waiter::kLegacy, Waiter::kNonBlocking, Waiter::kHighPriority, Waiter::kChained}) {
    for (Kind k : {Kind::kPlain, Kind::kHighPriority, Kind::kOtherContext}) {
      for (Work w : {Work::kCopy, Work::kKernel}) run_case(s, who, k, w, n, limit_ms);
    }
  }
  return 0;
}
