// The streams a connection's kit gives ferry's copiers, against a stream
// that waits on the host (what Connection::stream_wait queues): streams
// share CUDA_DEVICE_MAX_CONNECTIONS hardware queues, and a copy queued on a
// stream sharing the waiting stream's queue runs only after the wait. With
// default-priority streams, a copy on every 8th stream made after the waiter
// was held on an H200 (bench/gpu/aliased_stream_probe.cu); a copy that ends
// a transfer held so never ends it. Skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_kit.h"
#include "gpu/gpu_memory.h"

namespace ferry::testing {
namespace {

TEST(GpuKitStreams, CopiesOnEveryKitStreamRunWhileAStreamWaitsOnTheHost) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  constexpr int kStreams = 48;  // six times the default number of hardware queues
  constexpr size_t kPiece = 4096;
  GpuBuffer dev = gpu_alloc(0, kStreams * kPiece);
  ASSERT_NE(dev.ptr, nullptr);
  ASSERT_TRUE(platform::use_device(0).ok());
  const auto& d = platform::cuda();
  void* pinned = nullptr;
  ASSERT_EQ(d.mem_host_alloc(&pinned, kStreams * kPiece, cu::kHostAllocPortable), cu::kSuccess);
  void* word_host = nullptr;
  ASSERT_EQ(d.mem_host_alloc(&word_host, 4096, cu::kHostAllocPortable | cu::kHostAllocDeviceMap), cu::kSuccess);
  auto* word = static_cast<uint32_t*>(word_host);
  __atomic_store_n(word, 0u, __ATOMIC_RELEASE);
  cu::DevicePtr word_dev = 0;
  ASSERT_EQ(d.mem_host_get_device_pointer(&word_dev, word_host, 0), cu::kSuccess);
  ASSERT_NE(d.stream_wait_value32, nullptr) << "no stream memory operations";

  // The application's stream, made just before the kit's (the first
  // stream_wait fills the kit right before it queues the wait).
  cu::Stream waiter = nullptr;
  ASSERT_EQ(d.stream_create(&waiter, cu::kStreamNonBlocking), cu::kSuccess);
  auto reserve = std::make_shared<platform::GpuReserve>();
  auto kit = std::make_shared<platform::GpuKit>(reserve, nullptr);
  platform::GpuKitSize size;
  size.streams = kStreams;
  size.events = kStreams;
  ASSERT_TRUE(kit->fill(size).ok());
  ASSERT_EQ(d.stream_wait_value32(waiter, word_dev, 1, cu::kStreamWaitValueGeq), cu::kSuccess);

  std::vector<cu::Stream> streams;
  std::vector<cu::Event> done;
  for (int i = 0; i < kStreams; ++i) {
    auto s = kit->take_stream(0);
    auto e = kit->take_event(0);
    ASSERT_TRUE(s.ok() && e.ok());
    streams.push_back(s.value());
    done.push_back(e.value());
    auto at = static_cast<size_t>(i) * kPiece;
    ASSERT_EQ(d.memcpy_htod_async(reinterpret_cast<cu::DevicePtr>(dev.ptr) + at, static_cast<char*>(pinned) + at,
                                  kPiece, streams.back()),
              cu::kSuccess);
    ASSERT_EQ(d.event_record(done.back(), streams.back()), cu::kSuccess);
  }
  // Copies of 4 KiB take microseconds; a held one waits for the release.
  std::string held;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (int i = 0; i < kStreams; ++i) {
    cu::Result r;
    while ((r = d.event_query(done[static_cast<size_t>(i)])) == cu::kNotReady &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a poll with a deadline: nothing to wake on
    }
    if (r == cu::kNotReady) held += " " + std::to_string(i);
  }
  __atomic_store_n(word, 1u, __ATOMIC_RELEASE);
  ASSERT_EQ(d.stream_synchronize(waiter), cu::kSuccess);
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_EQ(d.event_synchronize(done[static_cast<size_t>(i)]), cu::kSuccess);
    kit->give_stream(0, streams[static_cast<size_t>(i)]);
    kit->give_event(0, done[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(held, "") << "copies held behind the waiting stream on kit streams:" << held;
  EXPECT_EQ(reserve->made_late(), 0u);  // every stream and event came from the fill
  d.stream_destroy(waiter);
  d.mem_free_host(word_host);
  d.mem_free_host(pinned);
}

}  // namespace
}  // namespace ferry::testing
