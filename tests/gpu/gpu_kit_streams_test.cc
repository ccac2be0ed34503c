// The streams a connection's kit gives ferry's copiers, against a stream
// that waits on the host (what Connection::stream_wait queues): streams
// share CUDA_DEVICE_MAX_CONNECTIONS hardware queues, and a copy queued on a
// stream sharing the waiting stream's queue runs only after the wait. With
// default-priority streams, a copy on every 8th stream made after the waiter
// was held on an H200 (bench/gpu/aliased_stream_probe.cu); a copy that ends
// a transfer held so never ends it. And the copier a kit serves, which
// queues no kernel while such a stream waits (cuda_copier.cc says why).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gather_kernel.h"
#include "gpu/gpu_kit.h"
#include "gpu/gpu_memory.h"
#include "gpu/staging_copier.h"
#include "gpu/staging_kernel.h"
#include "gpu/stream_signals.h"

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

// Polls `copier` until `ticket` is done or `limit` passed; true when done.
bool done_within(platform::StagingCopier& copier, uint64_t ticket, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    auto d = copier.done(ticket);
    if (!d.ok()) return false;
    if (d.value()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a poll with a deadline: nothing to wake on
  }
  return false;
}

TEST(GpuKitStreams, WhileAStreamWaitsOnAnyEngineTheCopierQueuesNoKernelAndItsCopiesLand) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  constexpr size_t kWhole = (1 << 20) + 48;  // 16-byte aligned: the staging kernel's
  constexpr size_t kPiece = 4096 + 16;      // a run of eight: the gather kernel's
  constexpr int kPieces = 8;
  constexpr size_t kBytes = 3 * kWhole + kPieces * kPiece;
  GpuBuffer dev = gpu_alloc(0, kBytes);
  ASSERT_NE(dev.ptr, nullptr);
  ASSERT_TRUE(platform::use_device(0).ok());
  const auto& d = platform::cuda();
  // The copier's engine and another engine of this process, which arms the
  // wait: the hardware queues a waiting stream holds are the process's.
  auto own = std::make_shared<platform::StreamSignals>();
  auto other = std::make_shared<platform::StreamSignals>();
  auto kit = std::make_shared<platform::GpuKit>(std::make_shared<platform::GpuReserve>(), own);
  auto copier = platform::make_cuda_copier(std::make_shared<platform::StagingKernels>(),
                                           std::make_shared<platform::GatherKernels>(), kit);
  auto host = copier->alloc_host(0, kBytes);
  ASSERT_TRUE(host.ok()) << host.status().message();
  auto* src = static_cast<uint8_t*>(host.value());
  // Region r of the source holds pattern(r + 11), from its first byte.
  const size_t starts[] = {0, kWhole, 2 * kWhole, 3 * kWhole};
  const size_t sizes[] = {kWhole, kWhole, kWhole, kPieces * kPiece};
  for (int r = 0; r < 4; ++r) {
    auto v = pattern(static_cast<uint64_t>(r) + 11, sizes[r]);
    std::memcpy(src + starts[r], v.data(), v.size());
  }

  // No stream waits: the aligned copy goes to the kernel.
  ASSERT_TRUE(copier->copy(0, dev.ptr, src, kWhole).ok());
  auto t = copier->fence();
  ASSERT_TRUE(t.ok() && copier->wait(t.value()).ok());
  ASSERT_EQ(copier->kernel_copies(), 1u) << "the staging kernel did not copy: nothing below would tell";

  // A stream waits on the other engine: a whole copy and a run of small
  // pieces, both of which a kernel would take, go to the copy engines and
  // land while the stream still waits.
  cu::Stream waiter = nullptr;
  ASSERT_EQ(d.stream_create(&waiter, cu::kStreamNonBlocking), cu::kSuccess);
  auto armed = other->arm(CudaStreamRef{waiter, 0});
  ASSERT_TRUE(armed.ok()) << armed.status().message();
  EXPECT_TRUE(platform::StreamSignals::any_waiting());
  ASSERT_TRUE(copier->copy(0, dev.ptr + kWhole, src + kWhole, kWhole).ok());
  std::vector<platform::StagingCopier::Op> run;
  for (int i = 0; i < kPieces; ++i) {
    size_t at = 3 * kWhole + static_cast<size_t>(i) * kPiece;
    run.push_back({dev.ptr + at, src + at, kPiece});
  }
  ASSERT_TRUE(copier->copy_many(0, run).ok());
  t = copier->fence();
  ASSERT_TRUE(t.ok());
  bool landed = done_within(*copier, t.value(), std::chrono::seconds(10));
  const uint64_t kernels_while_waiting = copier->kernel_copies() - 1;
  other->signal(armed.value());
  ASSERT_EQ(d.stream_synchronize(waiter), cu::kSuccess);
  EXPECT_FALSE(platform::StreamSignals::any_waiting());
  EXPECT_TRUE(landed) << "copies queued while a stream waited did not end within 10 s";
  EXPECT_EQ(kernels_while_waiting, 0u) << "a kernel was queued while a stream waited on an engine of the process";

  // Released: the kernel again.
  ASSERT_TRUE(copier->copy(0, dev.ptr + 2 * kWhole, src + 2 * kWhole, kWhole).ok());
  t = copier->fence();
  ASSERT_TRUE(t.ok() && copier->wait(t.value()).ok());
  EXPECT_EQ(copier->kernel_copies(), 2u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(check(dev.ptr + starts[r], sizes[r], static_cast<uint64_t>(r) + 11), "") << "region " << r;
  }
  copier->free_host(host.value(), kBytes);
  d.stream_destroy(waiter);
  d.mem_free(reinterpret_cast<cu::DevicePtr>(dev.ptr));
}

}  // namespace
}  // namespace ferry::testing
