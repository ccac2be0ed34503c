// queue_rotation_probe: which of ferry's copies a stream waiting on the host
// holds, round after round on the same streams, and whether a marker queued
// first (an event alone, or a 4-byte copy and its event) tells in advance.
//
// Why it exists: a copier clears its stream before copying after a stream
// wait was queued (src/gpu/wait_safe_lane.h); that only works if a stream's
// copies are held or not by the stream, the same every round, and if the
// marker sees what a copy would. On an H200 the kit-stream test found a
// copier's copy held though an event marker on its stream had passed.
//
//   nvcc -O2 -std=c++17 bench/gpu/queue_rotation_probe.cu -o queue_rotation_probe -lcuda
//   [PRECREATE=K] queue_rotation_probe [STREAMS] [ROUNDS] [LIMIT_MS]
// PRECREATE: K streams made first and kept (half default priority, half the
// greatest), as a process that ran other GPU work holds.
//
// Per round and marker kind: the streams whose marker was held, then those
// whose copy was held (indices).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "driver_check.cuh"

namespace {

enum class Marker { kNone, kEvent, kCopy };
const char* name(Marker m) { return m == Marker::kNone ? "none" : m == Marker::kEvent ? "event" : "4-byte copy"; }

std::string held_of(const std::vector<CUevent>& events, int* count) {
  std::string held;
  *count = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (cuEventQuery(events[i]) == CUDA_ERROR_NOT_READY) {
      ++*count;
      held += (held.empty() ? "" : ",") + std::to_string(i);
    }
  }
  return held;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 48;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 4;
  const int limit_ms = argc > 3 ? std::atoi(argv[3]) : 100;
  use_primary_context();
  CUdeviceptr dev;
  CU(cuMemAlloc(&dev, static_cast<size_t>(n) * 4096 * 2));
  void* pinned;
  CU(cuMemHostAlloc(&pinned, static_cast<size_t>(n) * 4096 * 2, CU_MEMHOSTALLOC_PORTABLE));
  uint32_t* word;
  CU(cuMemHostAlloc(reinterpret_cast<void**>(&word), 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr word_dev;
  CU(cuMemHostGetDevicePointer(&word_dev, word, 0));
  int least = 0, greatest = 0;
  CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  const int precreate = std::getenv("PRECREATE") ? std::atoi(std::getenv("PRECREATE")) : 0;
  std::vector<CUstream> kept(static_cast<size_t>(precreate));
  for (int i = 0; i < precreate; ++i) {
    CU(cuStreamCreateWithPriority(&kept[i], CU_STREAM_NON_BLOCKING, i % 2 == 0 ? 0 : greatest));
  }
  std::printf("%d streams made first\n", precreate);
  uint32_t value = 0;
  for (Marker m : {Marker::kNone, Marker::kEvent, Marker::kCopy}) {
    CUstream waiter;
    CU(cuStreamCreate(&waiter, CU_STREAM_NON_BLOCKING));
    std::vector<CUstream> streams(static_cast<size_t>(n));
    std::vector<CUevent> marks(static_cast<size_t>(n)), done(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      CU(cuStreamCreateWithPriority(&streams[i], CU_STREAM_NON_BLOCKING, greatest));
      CU(cuEventCreate(&marks[i], CU_EVENT_DISABLE_TIMING));
      CU(cuEventCreate(&done[i], CU_EVENT_DISABLE_TIMING));
    }
    ++value;
    CU(cuStreamWaitValue32(waiter, word_dev, value, CU_STREAM_WAIT_VALUE_GEQ));
    for (int r = 0; r < rounds; ++r) {
      int marked = 0, copied = 0;
      std::string mheld;
      if (m != Marker::kNone) {
        for (int i = 0; i < n; ++i) {
          if (m == Marker::kCopy) {
            char* p = static_cast<char*>(pinned) + static_cast<size_t>(n + i) * 4096;
            CU(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(p), reinterpret_cast<CUdeviceptr>(p + 64), 4, streams[i]));
          }
          CU(cuEventRecord(marks[i], streams[i]));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(limit_ms));
        mheld = held_of(marks, &marked);
      }
      for (int i = 0; i < n; ++i) {
        CU(cuMemcpyHtoDAsync(dev + static_cast<CUdeviceptr>(i) * 4096, static_cast<char*>(pinned) + i * 4096, 4096,
                             streams[i]));
        CU(cuEventRecord(done[i], streams[i]));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(limit_ms));
      std::string cheld = held_of(done, &copied);
      std::printf("marker %-11s round %d: markers held %2d (%s); copies held %2d (%s)\n", name(m), r, marked,
                  mheld.c_str(), copied, cheld.c_str());
    }
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    CU(cuCtxSynchronize());
    for (int i = 0; i < n; ++i) {
      CU(cuStreamDestroy(streams[i]));
      CU(cuEventDestroy(marks[i]));
      CU(cuEventDestroy(done[i]));
    }
    CU(cuStreamDestroy(waiter));
  }
  std::fflush(stdout);
  return 0;
}
