// ferry's copies against a stream that waits on the host (what
// Connection::stream_wait queues). Copies share CUDA_DEVICE_MAX_CONNECTIONS
// hardware queues with the waiting stream, and one queued where the wait sits
// runs only after it; a copy held so, when it ends the transfer the stream
// waits for, never ends it. On an H200 (bench/gpu/aliased_stream_probe.cu,
// queue_rotation_probe.cu): alone on the GPU, copies on streams of the
// greatest priority were never held; with a second process on the GPU,
// every 8th copy queued after the wait was, whatever its stream's priority,
// and the queue a copy takes turns with each copy (not with its stream), so
// no choice of stream avoids it. Work in another context was never held, so
// while a stream waits the copier queues in ferry's own context
// (GpuContext::kFerry, cuda_copier.cc). The copier tests fail, beside another
// process on the GPU, if it queues in the application's context then.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
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

// Releases an armed wait when it goes, whatever the test did meanwhile: an
// assertion that returns between arm() and signal() would leave the stream
// waiting for good, and the process's later frees behind it.
class ReleaseAtEnd {
 public:
  ReleaseAtEnd(platform::StreamSignals& signals, platform::StreamSignals::Armed armed)
      : signals_(signals), armed_(armed) {}
  ~ReleaseAtEnd() { release(); }
  void release() {
    if (!released_) signals_.signal(armed_);
    released_ = true;
  }

 private:
  platform::StreamSignals& signals_;
  platform::StreamSignals::Armed armed_;
  bool released_ = false;
};

// Made once, not left current, and what it costs in device memory (the
// closing note's number: the first stream wait of a process pays it).
TEST(FerryContext, IsMadeOnceLeavesTheThreadsContextAndItsCostIsMeasured) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  ASSERT_TRUE(platform::use_device(0).ok());
  const auto& d = platform::cuda();
  auto primary = platform::device_context(0);
  ASSERT_TRUE(primary.ok());
  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(d.mem_get_info(&free_before, &total), cu::kSuccess);
  auto own = platform::ferry_context(0);
  ASSERT_TRUE(own.ok()) << own.status().message();
  EXPECT_NE(own.value(), primary.value());
  cu::Context current = nullptr;
  ASSERT_EQ(d.ctx_get_current(&current), cu::kSuccess);
  EXPECT_EQ(current, primary.value()) << "making ferry's context left it current on the caller's thread";
  {
    // A stream and an event in it, as a kit makes them.
    platform::DeviceScope scope(0, platform::GpuContext::kFerry);
    ASSERT_TRUE(scope.ok()) << scope.status().message();
    cu::Stream s = nullptr;
    ASSERT_EQ(d.create_own_stream(&s), cu::kSuccess);
    ASSERT_EQ(d.stream_destroy(s), cu::kSuccess);
    size_t stack = 0;
    if (d.ctx_get_limit != nullptr && d.ctx_get_limit(&stack, cu::kLimitStackSize) == cu::kSuccess) {
      std::printf("ferry's own context: %zu bytes of stack a thread\n", stack);
    }
  }
  ASSERT_EQ(d.ctx_get_current(&current), cu::kSuccess);
  EXPECT_EQ(current, primary.value());
  ASSERT_EQ(d.mem_get_info(&free_after, &total), cu::kSuccess);
  auto again = platform::ferry_context(0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value(), own.value());
  const double mib = (static_cast<double>(free_before) - static_cast<double>(free_after)) / (1 << 20);
  RecordProperty("ferry_context_mib", std::to_string(mib));
  std::printf("ferry's own context took %.1f MiB of device memory\n", mib);
}

TEST(GpuKitStreams, CopiersLandWhileAStreamWaitsWhicheverQueueTheirStreamsShare) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  constexpr int kStreams = 48;  // six times the default number of hardware queues
  constexpr size_t kPiece = 4096 + 24;
  GpuBuffer dev = gpu_alloc(0, 2 * kStreams * kPiece);  // the copiers' half, then the probes'
  ASSERT_NE(dev.ptr, nullptr);
  ASSERT_TRUE(platform::use_device(0).ok());
  const auto& d = platform::cuda();
  void* pinned = nullptr;
  ASSERT_EQ(d.mem_host_alloc(&pinned, 2 * kStreams * kPiece, cu::kHostAllocPortable), cu::kSuccess);
  for (int i = 0; i < kStreams; ++i) {
    auto v = pattern(static_cast<uint64_t>(i) + 101, kPiece);
    std::memcpy(static_cast<char*>(pinned) + static_cast<size_t>(i) * kPiece, v.data(), kPiece);
  }

  // The application's stream, made just before the kit's (the first
  // stream_wait fills the kit right before it queues the wait), waiting on
  // another engine's signals.
  cu::Stream waiter = nullptr;
  ASSERT_EQ(d.stream_create(&waiter, cu::kStreamNonBlocking), cu::kSuccess);
  auto signals = std::make_shared<platform::StreamSignals>();
  auto kit = std::make_shared<platform::GpuKit>(std::make_shared<platform::GpuReserve>(), nullptr);
  platform::GpuKitSize size;
  size.streams = kStreams;
  size.events = 2 * kStreams;
  ASSERT_TRUE(kit->fill(size).ok());
  auto armed = signals->arm(CudaStreamRef{waiter, 0});
  ASSERT_TRUE(armed.ok()) << armed.status().message();
  ReleaseAtEnd release(*signals, armed.value());

  // What the hardware does: a copy on each kit stream, straight. Those held
  // stay queued (into the probes' half) and their streams go back to the
  // kit, so the copiers below are handed them.
  std::vector<cu::Stream> streams;
  std::vector<cu::Event> probes;
  for (int i = 0; i < kStreams; ++i) {
    auto st = kit->take_stream(0);
    auto e = kit->take_event(0);
    ASSERT_TRUE(st.ok() && e.ok());
    streams.push_back(st.value());
    probes.push_back(e.value());
    auto at = static_cast<size_t>(kStreams + i) * kPiece;
    ASSERT_EQ(d.memcpy_htod_async(reinterpret_cast<cu::DevicePtr>(dev.ptr) + at, static_cast<char*>(pinned) + at,
                                  kPiece, st.value()),
              cu::kSuccess);
    ASSERT_EQ(d.event_record(e.value(), st.value()), cu::kSuccess);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // 4 KiB copies take microseconds
  int held = 0;
  for (cu::Event e : probes) held += d.event_query(e) == cu::kNotReady ? 1 : 0;
  for (cu::Stream st : streams) kit->give_stream(0, st);
  RecordProperty("kit_streams_held", held);
  std::printf("kit streams whose copy was held behind the waiting stream: %d of %d\n", held, kStreams);

  // A copier a connection, each on a stream of the kit: every copy lands
  // while the stream still waits.
  std::vector<std::unique_ptr<platform::StagingCopier>> copiers;
  std::vector<uint64_t> tickets;
  for (int i = 0; i < kStreams; ++i) {
    copiers.push_back(platform::make_cuda_copier(nullptr, nullptr, kit));
    auto at = static_cast<size_t>(i) * kPiece;
    ASSERT_TRUE(copiers.back()->copy(0, dev.ptr + at, static_cast<char*>(pinned) + at, kPiece).ok());
    auto t = copiers.back()->fence();
    ASSERT_TRUE(t.ok());
    tickets.push_back(t.value());
  }
  std::vector<int> stuck;
  std::string stuck_list;
  for (int i = 0; i < kStreams; ++i) {
    if (!done_within(*copiers[static_cast<size_t>(i)], tickets[static_cast<size_t>(i)], std::chrono::seconds(2))) {
      stuck.push_back(i);
      stuck_list += " " + std::to_string(i);
    }
  }
  release.release();
  // Which wait held them: this stream's (they end as soon as it is
  // released) or another's (another process's waiting streams, say).
  std::string after_release;
  for (int i : stuck) {
    const bool ended =
        done_within(*copiers[static_cast<size_t>(i)], tickets[static_cast<size_t>(i)], std::chrono::seconds(1));
    after_release += " " + std::to_string(i) + (ended ? ": ended once the wait was released;" : ": still held;");
  }
  ASSERT_EQ(d.stream_synchronize(waiter), cu::kSuccess);
  for (cu::Event e : probes) ASSERT_EQ(d.event_synchronize(e), cu::kSuccess);
  EXPECT_EQ(stuck_list, "") << "copiers whose copy was held while the stream waited:" << stuck_list << " ("
                            << after_release << ")";
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_EQ(check(dev.ptr + static_cast<size_t>(i) * kPiece, kPiece, static_cast<uint64_t>(i) + 101), "")
        << "copier " << i;
  }
  copiers.clear();
  for (cu::Event e : probes) kit->give_event(0, e);
  d.stream_destroy(waiter);
  d.mem_free_host(pinned);
  d.mem_free(reinterpret_cast<cu::DevicePtr>(dev.ptr));
}

// Copies queued before the wait and fenced after it: the fence must not
// queue an event behind the wait (it asks the copier's stream instead).
TEST(GpuKitStreams, CopiesQueuedBeforeAWaitAndFencedAfterItEndWhileItWaits) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  constexpr int kCopiers = 48;
  constexpr size_t kPiece = 4096 + 40;
  GpuBuffer dev = gpu_alloc(0, kCopiers * kPiece);
  ASSERT_NE(dev.ptr, nullptr);
  ASSERT_TRUE(platform::use_device(0).ok());
  const auto& d = platform::cuda();
  void* pinned = nullptr;
  ASSERT_EQ(d.mem_host_alloc(&pinned, kCopiers * kPiece, cu::kHostAllocPortable), cu::kSuccess);
  for (int i = 0; i < kCopiers; ++i) {
    auto v = pattern(static_cast<uint64_t>(i) + 303, kPiece);
    std::memcpy(static_cast<char*>(pinned) + static_cast<size_t>(i) * kPiece, v.data(), kPiece);
  }
  cu::Stream waiter = nullptr;
  ASSERT_EQ(d.stream_create(&waiter, cu::kStreamNonBlocking), cu::kSuccess);
  auto signals = std::make_shared<platform::StreamSignals>();
  auto kit = std::make_shared<platform::GpuKit>(std::make_shared<platform::GpuReserve>(), signals);
  platform::GpuKitSize size;
  size.streams = kCopiers;
  size.events = kCopiers;
  ASSERT_TRUE(kit->fill(size).ok());
  std::vector<std::unique_ptr<platform::StagingCopier>> copiers;
  for (int i = 0; i < kCopiers; ++i) {
    copiers.push_back(platform::make_cuda_copier(nullptr, nullptr, kit));
    auto at = static_cast<size_t>(i) * kPiece;
    ASSERT_TRUE(copiers.back()->copy(0, dev.ptr + at, static_cast<char*>(pinned) + at, kPiece).ok());
  }
  auto armed = signals->arm(CudaStreamRef{waiter, 0});
  ASSERT_TRUE(armed.ok()) << armed.status().message();
  ReleaseAtEnd release(*signals, armed.value());
  std::string stuck;
  for (int i = 0; i < kCopiers; ++i) {
    auto t = copiers[static_cast<size_t>(i)]->fence();
    ASSERT_TRUE(t.ok());
    if (!done_within(*copiers[static_cast<size_t>(i)], t.value(), std::chrono::seconds(2))) {
      stuck += " " + std::to_string(i);
    }
  }
  release.release();
  ASSERT_EQ(d.stream_synchronize(waiter), cu::kSuccess);
  EXPECT_EQ(stuck, "") << "fences held while the stream waited:" << stuck;
  for (auto& c : copiers) c->wait_all();
  for (int i = 0; i < kCopiers; ++i) {
    EXPECT_EQ(check(dev.ptr + static_cast<size_t>(i) * kPiece, kPiece, static_cast<uint64_t>(i) + 303), "")
        << "copier " << i;
  }
  copiers.clear();
  d.stream_destroy(waiter);
  d.mem_free_host(pinned);
  d.mem_free(reinterpret_cast<cu::DevicePtr>(dev.ptr));
}

TEST(GpuKitStreams, WhileAStreamWaitsOnAnyEngineTheCopierQueuesNoKernelAndItsCopiesLand) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU";
  constexpr size_t kWhole = (1 << 20) + 48;  // 16-byte aligned: the staging kernel's
  constexpr size_t kPiece = 4096 + 16;       // a run of eight: the gather kernel's
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
  ReleaseAtEnd release(*other, armed.value());
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
  release.release();
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
