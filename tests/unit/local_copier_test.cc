// The local copier and the engine's copy helpers (CopyPool): a large host
// copy is shared with a fixed set of named, pinned helpers that every
// copier of the engine uses (none started per copy or per connection), a
// helper the kernel refuses costs speed and never the copy, stop() ends a
// copier's copies and leaves the helpers to the others, pieces of different
// copies take turns, and a peer that gives up mid-copy stops every helper
// before its next piece. Copies go between two buffers of this process
// through cross-memory attach, as they would with a peer's.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "platform/thread.h"
#include "transport/local/copy_pool.h"
#include "transport/local/gpu_sharing.h"
#include "transport/local/local_copier.h"

namespace ferry::local {
namespace {

// The ids of this process's threads whose name starts with `prefix`.
std::set<pid_t> threads_named(const std::string& prefix) {
  std::set<pid_t> out;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(f, name);
    if (name.rfind(prefix, 0) == 0) out.insert(static_cast<pid_t>(std::stol(e->d_name)));
  }
  ::closedir(d);
  return out;
}

// The helpers name and pin themselves once they run, which may be after the
// copy that started them ended on a busy host: wait for it, up to 10 s.
template <typename Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    ::usleep(10000);
  }
  return pred();
}

bool pinned_to(pid_t tid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(tid, sizeof set, &set) == 0 && CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set);
}

std::vector<SharedSpan> far_spans(std::vector<uint8_t>& mem) {
  SharedSpan s;
  s.address = reinterpret_cast<uint64_t>(mem.data());
  s.length = mem.size();
  return {s};
}

core::SegmentList near_list(std::vector<uint8_t>& mem) {
  auto entry = std::make_shared<core::RegionEntry>();
  entry->region = Region{1, mem.data(), mem.size(), MemoryKind::kHost, -1};
  core::SegmentList list;
  list.add(core::MemorySpan{entry, mem.data(), mem.size()});
  return list;
}

std::vector<uint8_t> random_bytes(size_t n, unsigned seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; i += 4096) v[i] = static_cast<uint8_t>(rng());
  v[n - 1] = 0x5a;
  return v;
}

// Copies all of `src` into `dst` with `copier` and returns the copy's status.
Status copy(LocalCopier& copier, std::vector<uint8_t>& src, std::vector<uint8_t>& dst) {
  Status done = Status(Code::kInternal, "no completion");
  Status s = copier.start(near_list(src), far_spans(dst), src.size(), /*to_remote=*/true,
                          [&](const Status& st) { done = st; });
  return s.ok() ? done : s;
}

TEST(LocalCopierHelpers, LargeCopiesShareOneFixedSetOfNamedPinnedHelpers) {
  const size_t size = (48u << 20) + 7;
  std::vector<uint8_t> src = random_bytes(size, 3), dst(size, 0);
  // Pinned to one CPU this thread may use.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  GpuImports imports;
  // Helpers that never end idle here: this test counts them (a slow build
  // may take seconds between copies).
  auto pool = std::make_shared<CopyPool>(4, CopyHelpers{"ferry-tcopy", {cpu}}, std::chrono::hours(1));
  auto owned = std::make_unique<LocalCopier>(imports, 1, ::getpid(), [] { return Status(); }, pool);
  LocalCopier& copier = *owned;
  EXPECT_TRUE(threads_named("ferry-tcopy").empty()) << "helpers start with the first large copy, not before";
  std::vector<uint8_t> small = random_bytes(1u << 20, 4), small_dst(small.size());
  ASSERT_TRUE(copy(copier, small, small_dst).ok());
  EXPECT_TRUE(threads_named("ferry-tcopy").empty()) << "a copy one thread does needs no helper";

  ASSERT_TRUE(copy(copier, src, dst).ok());
  EXPECT_EQ(dst, src);
  EXPECT_TRUE(eventually([] { return threads_named("ferry-tcopy-").size() == 4; }))
      << "four helpers: three share a large copy with the caller, four one handed to them alone";
  std::set<pid_t> helpers = threads_named("ferry-tcopy-");
  for (pid_t tid : helpers) {
    EXPECT_TRUE(eventually([&] { return pinned_to(tid, cpu); })) << "helper " << tid << " is not pinned to " << cpu;
  }
  for (int round = 0; round < 3; ++round) {
    std::fill(dst.begin(), dst.end(), 0);
    src[round] ^= 0xff;
    ASSERT_TRUE(copy(copier, src, dst).ok());
    EXPECT_EQ(dst, src);
  }
  EXPECT_EQ(threads_named("ferry-tcopy-"), helpers) << "the same helpers serve every copy";

  copier.stop();
  EXPECT_EQ(copy(copier, src, dst).code(), Code::kCancelled);
  EXPECT_EQ(threads_named("ferry-tcopy-"), helpers) << "stop() leaves the helpers to the other copiers";
  // Another copier (another connection of the engine) uses the same helpers.
  {
    LocalCopier other(imports, 2, ::getpid(), [] { return Status(); }, pool);
    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_TRUE(copy(other, src, dst).ok());
    EXPECT_EQ(dst, src);
    EXPECT_EQ(threads_named("ferry-tcopy-"), helpers) << "a second copier started helpers of its own";
  }
  owned.reset();
  pool.reset();
  // A joined thread may still be listed for a moment: the kernel wakes the
  // joiner before it takes the thread's entry out of /proc.
  EXPECT_TRUE(eventually([] { return threads_named("ferry-tcopy-").empty(); })) << "the pool's end ends the helpers";
}

TEST(LocalCopierHelpers, AHelperTheKernelRefusesLeavesItsShareToTheCaller) {
  const size_t size = 32u << 20;
  std::vector<uint8_t> src = random_bytes(size, 5), dst(size, 0);
  GpuImports imports;
  LocalCopier copier(imports, 1, ::getpid(), [] { return Status(); },
                     std::make_shared<CopyPool>(4, CopyHelpers{"ferry-tref", {}}));
  // The second helper is refused: two help, the caller copies the rest.
  platform::set_thread_start_fault([](std::string_view name) { return name == "ferry-tref-1"; });
  Status s = copy(copier, src, dst);
  platform::set_thread_start_fault(nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(dst, src);
  EXPECT_TRUE(eventually([] { return threads_named("ferry-tref-").size() == 1; }));
  ::usleep(50000);
  EXPECT_EQ(threads_named("ferry-tref-").size(), 1u) << "helpers after the refused one are not asked for at once";
  // Every helper refused: the caller copies alone, and the copy still succeeds.
  LocalCopier alone(imports, 1, ::getpid(), [] { return Status(); },
                    std::make_shared<CopyPool>(4, CopyHelpers{"ferry-tnone", {}}));
  platform::set_thread_start_fault([](std::string_view name) { return name.rfind("ferry-tnone", 0) == 0; });
  std::fill(dst.begin(), dst.end(), 0);
  s = copy(alone, src, dst);
  platform::set_thread_start_fault(nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(dst, src);
  EXPECT_TRUE(threads_named("ferry-tnone").empty());
}

TEST(LocalCopierHelpers, APeerThatGivesUpStopsEveryHelperBeforeItsNextPiece) {
  // 64 MiB: eight pieces of 8 MiB shared by four threads. The check passes
  // before the copy and before two pieces, then says the peer gave up.
  const size_t piece = 8u << 20, size = 8 * piece;
  std::vector<uint8_t> src = random_bytes(size, 6), dst(size, 0xEE);
  GpuImports imports;
  auto calls = std::make_shared<std::atomic<int>>(0);
  LocalCopier copier(
      imports, 1, ::getpid(),
      [calls] { return calls->fetch_add(1) < 3 ? Status() : Status(Code::kPeerLost, "the peer gave up"); },
      std::make_shared<CopyPool>(4, CopyHelpers{"ferry-tgive", {}}));
  int completions = 0;
  Status s = copier.start(near_list(src), far_spans(dst), size, true, [&](const Status&) { ++completions; });
  EXPECT_EQ(s.code(), Code::kPeerLost) << s.to_string();
  EXPECT_EQ(completions, 0);
  int copied = 0, untouched = 0;
  for (size_t i = 0; i < size; i += piece) {
    if (std::memcmp(dst.data() + i, src.data() + i, piece) == 0) ++copied;
    if (std::all_of(dst.begin() + i, dst.begin() + i + piece, [](uint8_t b) { return b == 0xEE; })) ++untouched;
  }
  EXPECT_EQ(copied, 2) << "the two pieces checked before the peer gave up";
  EXPECT_EQ(untouched, 6) << "nothing may be written into the peer's memory once it gave up";
}

// A copy handed to the helpers alone (HostCopyBy::kHelpers, what a
// progress worker asks for) returns at once; its completion runs on a
// helper once every byte is in place, and drain() waits for it.
TEST(LocalCopierHelpers, ACopyHandedToTheHelpersEndsOnAHelper) {
  const size_t size = (24u << 20) + 5;
  std::vector<uint8_t> src = random_bytes(size, 11), dst(size, 0);
  for (size_t i = 0; i < size; i += 997) src[i] = static_cast<uint8_t>(i * 31);
  GpuImports imports;
  LocalCopier copier(imports, 1, ::getpid(), [] { return Status(); },
                     std::make_shared<CopyPool>(4, CopyHelpers{"ferry-toff", {}}));
  std::atomic<bool> ended{false};
  std::atomic<pid_t> ended_on{0};
  Status result = Status(Code::kInternal, "no completion");
  Status s = copier.start(
      near_list(src), far_spans(dst), size, /*to_remote=*/true,
      [&](const Status& st) {
        result = st;
        ended_on = static_cast<pid_t>(::gettid());
        ended = true;
      },
      LocalCopier::HostCopyBy::kHelpers);
  ASSERT_TRUE(s.ok()) << s.to_string();
  copier.drain();
  ASSERT_TRUE(ended.load()) << "drain() returned before the handed-over copy ended";
  EXPECT_TRUE(result.ok()) << result.to_string();
  EXPECT_NE(ended_on.load(), static_cast<pid_t>(::gettid())) << "the caller copied it itself";
  EXPECT_EQ(threads_named("ferry-toff-").count(ended_on.load()), 1u) << "it ended on a thread that is no helper";
  EXPECT_EQ(dst, src);
}

// stop() while a copy handed to the helpers runs (a failed connection's
// close): the helpers take no piece after it, the copy ends kCancelled, and
// stop() returns once the pieces under way ended. A copy that went on to its
// last piece made the close wait for all of it, however large.
TEST(LocalCopierHelpers, StopEndsARunningCopyAtItsNextPiece) {
  // 64 MiB: eight pieces of 8 MiB, for four helpers. Each piece takes at
  // least 200 ms here (the peer check before it sleeps).
  const size_t piece = 8u << 20, size = 8 * piece;
  std::vector<uint8_t> src = random_bytes(size, 7), dst(size, 0xEE);
  GpuImports imports;
  auto checks = std::make_shared<std::atomic<int>>(0);
  LocalCopier copier(
      imports, 1, ::getpid(),
      [checks] {
        if (checks->fetch_add(1) > 0) ::usleep(200000);  // the first check is start()'s own
        return Status();
      },
      std::make_shared<CopyPool>(4, CopyHelpers{"ferry-tstop", {}}));
  std::atomic<bool> ended{false};
  Status result = Status(Code::kInternal, "no completion");
  Status s = copier.start(
      near_list(src), far_spans(dst), size, /*to_remote=*/true,
      [&](const Status& st) {
        result = st;
        ended = true;
      },
      LocalCopier::HostCopyBy::kHelpers);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(eventually([&] { return checks->load() >= 2; })) << "no helper took a piece";
  copier.stop();
  ASSERT_TRUE(ended.load()) << "stop() returned before the running copy ended";
  EXPECT_EQ(result.code(), Code::kCancelled) << result.to_string();
  int copied = 0;
  for (size_t i = 0; i < size; i += piece) copied += std::memcmp(dst.data() + i, src.data() + i, piece) == 0;
  EXPECT_LE(copied, 4) << "pieces taken after stop() began";
}

// A helper that finds no piece for its idle time ends; the next copy that
// wants helpers starts them again, under the same names.
TEST(LocalCopierHelpers, IdleHelpersEndAndTheNextCopyStartsThemAgain) {
  const size_t size = 32u << 20;
  std::vector<uint8_t> src = random_bytes(size, 12), dst(size, 0);
  GpuImports imports;
  auto pool = std::make_shared<CopyPool>(2, CopyHelpers{"ferry-tidle", {}}, std::chrono::milliseconds(100));
  LocalCopier copier(imports, 1, ::getpid(), [] { return Status(); }, pool);
  ASSERT_TRUE(copy(copier, src, dst).ok());
  EXPECT_EQ(dst, src);
  EXPECT_TRUE(eventually([] { return threads_named("ferry-tidle-").empty(); })) << "idle helpers did not end";
  std::fill(dst.begin(), dst.end(), 0);
  ASSERT_TRUE(copy(copier, src, dst).ok());
  EXPECT_EQ(dst, src);
  EXPECT_LE(threads_named("ferry-tidle-").size(), 2u);
  // Handed to them alone: a copy queued as they end still finds one.
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(95 + 2 * i));
    std::atomic<bool> ended{false};
    Status result = Status(Code::kInternal, "no completion");
    ASSERT_TRUE(copier
                    .start(near_list(src), far_spans(dst), size, true,
                           [&](const Status& st) {
                             result = st;
                             ended = true;
                           },
                           LocalCopier::HostCopyBy::kHelpers)
                    .ok());
    copier.drain();
    ASSERT_TRUE(ended.load());
    EXPECT_TRUE(result.ok()) << result.to_string();
  }
}

// Two copies handed to one helper: the later, small one does not wait for
// the whole of the earlier, large one (pieces of different copies take
// turns), so one connection's bulk copy holds another's for a piece or two.
TEST(LocalCopierHelpers, PiecesOfDifferentCopiesTakeTurns) {
  // The large copy: eight pieces of 8 MiB, each at least 100 ms (the peer
  // check before it sleeps); the small one, 1 MiB, starts once the large
  // one's first piece runs.
  const size_t piece = 8u << 20, size = 8 * piece;
  std::vector<uint8_t> src = random_bytes(size, 8), dst(size, 0);
  std::vector<uint8_t> small = random_bytes(1u << 20, 9), small_dst(small.size(), 0);
  GpuImports imports;
  auto pool = std::make_shared<CopyPool>(1, CopyHelpers{"ferry-tturn", {}});
  auto checks = std::make_shared<std::atomic<int>>(0);
  LocalCopier bulk(
      imports, 1, ::getpid(),
      [checks] {
        if (checks->fetch_add(1) > 0) ::usleep(100000);  // the first check is start()'s own
        return Status();
      },
      pool);
  LocalCopier quick(imports, 2, ::getpid(), [] { return Status(); }, pool);
  std::atomic<bool> bulk_ended{false}, bulk_ended_first{false}, quick_ended{false};
  ASSERT_TRUE(bulk.start(near_list(src), far_spans(dst), size, true, [&](const Status&) { bulk_ended = true; },
                         LocalCopier::HostCopyBy::kHelpers)
                  .ok());
  ASSERT_TRUE(eventually([&] { return checks->load() >= 2; })) << "the helper took no piece of the large copy";
  ASSERT_TRUE(quick
                  .start(near_list(small), far_spans(small_dst), small.size(), true,
                         [&](const Status& st) {
                           EXPECT_TRUE(st.ok()) << st.to_string();
                           bulk_ended_first = bulk_ended.load();
                           quick_ended = true;
                         },
                         LocalCopier::HostCopyBy::kHelpers)
                  .ok());
  quick.drain();
  ASSERT_TRUE(quick_ended.load());
  EXPECT_FALSE(bulk_ended_first.load()) << "the small copy waited for the whole large one";
  EXPECT_EQ(small_dst, small);
  bulk.drain();
  ASSERT_TRUE(bulk_ended.load());
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace ferry::local
