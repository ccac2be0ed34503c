// Transfers ordered after CUDA streams (core/stream_order.h), with a stand-in
// for the driver that the test moves by hand: held until every stream is
// reached, posted in order behind what is held, withdrawn by cancel, failed
// with the connection, refused streams reported. Then the same through a
// real connection on a host without a CUDA driver.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/stream_order.h"
#include "engine_pair.h"

namespace ferry::core {
namespace {

using namespace std::chrono_literals;

// The driver, moved by hand: a stream is busy until reach() runs its
// callbacks on a thread of its own, as the driver's callback thread would.
class HandStreams final : public platform::StreamWaits {
 public:
  Result<bool> idle(const CudaStreamRef& ref) override {
    std::lock_guard lock(mu_);
    asked_.push_back(ref.device);
    if (refused_.count(ref.stream)) return Status(Code::kInvalidArgument, "refused stream");
    return busy_.count(ref.stream) == 0;
  }
  Status when_reached(const CudaStreamRef& ref, std::function<void()> reached) override {
    std::lock_guard lock(mu_);
    asked_.push_back(ref.device);
    if (refused_.count(ref.stream)) return Status(Code::kInvalidArgument, "refused stream");
    waiting_[ref.stream].push_back(std::move(reached));
    return Status();
  }
  // The devices the streams were asked about in, in order.
  std::vector<int> asked() {
    std::lock_guard lock(mu_);
    return asked_;
  }
  void busy(void* stream) {
    std::lock_guard lock(mu_);
    busy_.insert({stream, true});
  }
  void refuse(void* stream) {
    std::lock_guard lock(mu_);
    refused_.insert({stream, true});
  }
  void reach(void* stream) {
    std::vector<std::function<void()>> fns;
    {
      std::lock_guard lock(mu_);
      busy_.erase(stream);
      fns.swap(waiting_[stream]);
    }
    std::thread([fns] {
      for (auto& f : fns) f();
    }).join();
  }

 private:
  std::mutex mu_;
  std::map<void*, bool> busy_, refused_;
  std::map<void*, std::vector<std::function<void()>>> waiting_;
  std::vector<int> asked_;
};

// Streams of no device in particular (the caller's current context).
std::vector<CudaStreamRef> refs(std::vector<void*> streams) {
  std::vector<CudaStreamRef> out;
  for (void* s : streams) out.push_back({s, -1});
  return out;
}

void* const kS1 = reinterpret_cast<void*>(0x1000);
void* const kS2 = reinterpret_cast<void*>(0x2000);

class StreamOrder : public ::testing::Test {
 protected:
  StreamOrder() {
    auto hand = std::make_unique<HandStreams>();
    streams_ = hand.get();
    gate_ = std::make_shared<StreamGate>(std::move(hand));
    posts_ = std::make_shared<OrderedPosts>(gate_);
  }
  ~StreamOrder() override { gate_->stop(); }

  // A held operation that records its posting and hands back a state the
  // test finishes.
  Transfer hold(std::vector<void*> streams, int tag) { return hold(refs(std::move(streams)), tag); }
  Transfer hold(std::vector<CudaStreamRef> streams, int tag) {
    auto outer = std::make_shared<TransferState>(1000 + tag, 1);
    return posts_->post_later(streams, outer, [this, tag] {
      std::lock_guard lock(mu_);
      posted_.push_back(tag);
      auto inner = std::make_shared<TransferState>(tag, 1);
      inner_[tag] = inner;
      return Transfer(inner);
    });
  }
  std::vector<int> posted() {
    std::lock_guard lock(mu_);
    return posted_;
  }
  std::shared_ptr<TransferState> inner(int tag) {
    std::lock_guard lock(mu_);
    return inner_.count(tag) ? inner_[tag] : nullptr;
  }
  // Waits (at most 5 s) until `n` operations were posted.
  bool wait_posted(size_t n) {
    for (auto until = Clock::now() + 5s; Clock::now() < until; std::this_thread::sleep_for(1ms)) {
      if (posted().size() >= n) return true;
    }
    return false;
  }

  HandStreams* streams_ = nullptr;
  std::shared_ptr<StreamGate> gate_;
  std::shared_ptr<OrderedPosts> posts_;
  std::mutex mu_;
  std::vector<int> posted_;
  std::map<int, std::shared_ptr<TransferState>> inner_;
};

TEST_F(StreamOrder, AnIdleStreamWithNothingHeldPostsAtOnce) {
  std::vector<CudaStreamRef> s = refs({kS1});
  EXPECT_TRUE(posts_->posts_now(s));
  streams_->busy(kS1);
  EXPECT_FALSE(posts_->posts_now(s));
  streams_->refuse(kS2);
  EXPECT_FALSE(posts_->posts_now(refs({kS2})));
}

TEST_F(StreamOrder, AHeldTransferIsPostedOnlyOnceItsStreamGetsThereAndEndsAsThePostedOne) {
  streams_->busy(kS1);
  Transfer t = hold({kS1}, 1);
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(posted().empty());
  EXPECT_FALSE(t.test());
  streams_->reach(kS1);
  ASSERT_TRUE(wait_posted(1));
  inner(1)->set_bytes(4099);
  inner(1)->finish(Status());
  ASSERT_TRUE(t.wait(after(5s)).ok());
  EXPECT_EQ(t.bytes(), 4099u);
  EXPECT_EQ(posts_->held(), 0u);
}

TEST_F(StreamOrder, EverythingPostedAfterAHeldTransferWaitsBehindItInOrder) {
  streams_->busy(kS1);
  streams_->busy(kS2);
  std::vector<Transfer> ts;
  ts.push_back(hold({kS1}, 1));
  ts.push_back(hold(std::vector<void*>{}, 2));  // no stream, but behind 1
  ts.push_back(hold({kS2}, 3));
  ts.push_back(hold(std::vector<void*>{}, 4));
  EXPECT_FALSE(posts_->posts_now(refs({})));
  streams_->reach(kS2);  // 3 is ready, but 1 is not
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(posted().empty());
  streams_->reach(kS1);
  ASSERT_TRUE(wait_posted(4));
  EXPECT_EQ(posted(), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(posts_->posts_now(refs({})));
}

TEST_F(StreamOrder, ATransferAfterTwoStreamsWaitsForBoth) {
  streams_->busy(kS1);
  streams_->busy(kS2);
  Transfer t = hold({kS1, kS2}, 1);
  streams_->reach(kS1);
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(posted().empty());
  streams_->reach(kS2);
  ASSERT_TRUE(wait_posted(1));
}

TEST_F(StreamOrder, CancelWithdrawsAHeldTransferAndWhatWaitedBehindItGoesOn) {
  streams_->busy(kS1);
  Transfer first = hold({kS1}, 1);
  Transfer second = hold(std::vector<void*>{}, 2);
  EXPECT_TRUE(first.cancel());
  EXPECT_EQ(first.status().code(), Code::kCancelled);
  ASSERT_TRUE(wait_posted(1));
  EXPECT_EQ(posted(), std::vector<int>{2});
  streams_->reach(kS1);  // the driver calls back for the withdrawn one: nothing posts
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(posted(), std::vector<int>{2});
}

TEST_F(StreamOrder, ADeadlineWithdrawsAHeldReceiveAsNotStarted) {
  streams_->busy(kS1);
  Transfer t = hold({kS1}, 1);
  auto start = Clock::now();
  Status s = t.wait_or_cancel(after(100ms), PastDeadline::kCancelOrFinish);
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.to_string();
  EXPECT_NE(s.message().find("had not started"), std::string::npos) << s.to_string();
  EXPECT_LT(Clock::now() - start, 2s);
  streams_->reach(kS1);
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(posted().empty());
}

TEST_F(StreamOrder, CancelAfterPostingReachesThePostedTransfer) {
  Transfer t = hold(std::vector<void*>{}, 1);  // nothing busy: posted by the gate at once
  ASSERT_TRUE(wait_posted(1));
  inner(1)->set_canceller([s = inner(1)] { return s->finish(Status(Code::kCancelled, "withdrawn by the transport")); });
  EXPECT_TRUE(t.cancel());
  ASSERT_TRUE(t.wait(after(5s)).code() == Code::kCancelled);
  EXPECT_NE(t.status().message().find("by the transport"), std::string::npos);
}

TEST_F(StreamOrder, AFailedConnectionFailsWhatIsHeldAndPostsNothing) {
  streams_->busy(kS1);
  Transfer a = hold({kS1}, 1);
  Transfer b = hold(std::vector<void*>{}, 2);
  posts_->fail_all(Status(Code::kPeerLost, "peer gone"));
  EXPECT_EQ(a.status().code(), Code::kPeerLost);
  EXPECT_EQ(b.status().code(), Code::kPeerLost);
  streams_->reach(kS1);
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(posted().empty());
  EXPECT_EQ(posts_->held(), 0u);
}

TEST_F(StreamOrder, AStreamTheDriverRefusesFailsItsTransferNotTheOnesBehind) {
  streams_->refuse(kS2);
  Transfer bad = hold({kS2}, 1);
  Transfer good = hold(std::vector<void*>{}, 2);
  ASSERT_TRUE(wait_posted(1));
  EXPECT_EQ(bad.wait(after(5s)).code(), Code::kInvalidArgument);
  EXPECT_EQ(posted(), std::vector<int>{2});
}

// A default stream's handle (0) names a stream of a context: each is asked
// about with the device it came with (a torch tensor's, not the thread's
// current device), the same handle on two devices twice.
TEST_F(StreamOrder, DefaultStreamsAreAskedAboutWithTheirDevices) {
  void* const legacy = nullptr;
  std::vector<CudaStreamRef> two{{legacy, 1}, {legacy, 0}};
  EXPECT_TRUE(posts_->posts_now(two));
  EXPECT_EQ(streams_->asked(), (std::vector<int>{1, 0}));
  streams_->busy(legacy);
  Transfer t = hold(two, 1);
  EXPECT_EQ(streams_->asked(), (std::vector<int>{1, 0, 1, 0}));
  streams_->reach(legacy);
  ASSERT_TRUE(wait_posted(1));
  EXPECT_TRUE(t.state() != nullptr);
}

TEST_F(StreamOrder, ManyThreadsEachKeepTheirOwnOrder) {
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::thread> threads;
  std::vector<Transfer> all[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kEach; ++i) {
        void* s = (rng() % 3 == 0) ? kS1 : nullptr;
        if (s != nullptr) streams_->busy(kS1);
        all[t].push_back(s ? hold(std::vector<void*>{s}, t * 10000 + i) : hold(std::vector<void*>{}, t * 10000 + i));
        if (rng() % 5 == 0) streams_->reach(kS1);
      }
    });
  }
  for (auto& th : threads) th.join();
  streams_->reach(kS1);
  ASSERT_TRUE(wait_posted(kThreads * kEach));
  std::vector<int> last(kThreads, -1);
  for (int tag : posted()) {
    int t = tag / 10000, i = tag % 10000;
    EXPECT_GT(i, last[t]) << "thread " << t << " posted out of order";
    last[t] = i;
  }
}

}  // namespace
}  // namespace ferry::core

namespace ferry {
namespace {

using namespace std::chrono_literals;

// Without a CUDA driver: an operation ordered after a stream fails, says
// why, and the connection goes on.
TEST(StreamOrderedConnection, WithoutACudaDriverAnOrderedTransferFailsClearlyAndTheConnectionGoesOn) {
  if (platform::cuda_stream_waits()->idle(CudaStreamRef{}).ok()) GTEST_SKIP() << "a CUDA driver is present";
  EnginePair p = connect_pair("tcp");
  ASSERT_TRUE(p.ca && p.cb);
  std::vector<char> out(4099, 'x'), in(4099, 0);
  ASSERT_TRUE(p.a->reg(out.data(), out.size()).ok());
  ASSERT_TRUE(p.b->reg(in.data(), in.size()).ok());
  void* stream = reinterpret_cast<void*>(0x1);  // CU_STREAM_LEGACY
  Transfer t = p.ca->after_streams(std::span<void* const>(&stream, 1)).send_async(out.data(), out.size());
  Status s = t.wait(after(5s));
  EXPECT_EQ(s.code(), Code::kUnimplemented) << s.to_string();
  EXPECT_NE(s.message().find("CUDA driver"), std::string::npos) << s.to_string();
  Transfer sent = p.ca->send_async(out.data(), out.size());
  auto n = p.cb->recv(in.data(), in.size(), after(5s));
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  ASSERT_TRUE(sent.wait(after(5s)).ok());
  EXPECT_EQ(in, out);
  CudaStreamRef on_device{nullptr, 0};  // the legacy stream of GPU 0
  Transfer t2 = p.ca->after_streams(std::span<const CudaStreamRef>(&on_device, 1)).send_async(out.data(), out.size());
  EXPECT_EQ(t2.wait(after(5s)).code(), Code::kUnimplemented);
  Transfer r = p.cb->recv_async(in.data(), in.size());
  EXPECT_EQ(p.cb->stream_wait(r, stream).code(), Code::kUnimplemented);
  EXPECT_EQ(p.cb->stream_wait(r, on_device).code(), Code::kUnimplemented);
  r.cancel();
}

// With CUDA_DEVICE_MAX_CONNECTIONS=1 every stream shares one hardware queue:
// a stream waiting on the GPU would hold the copies that end the transfer
// (a deadlock on a GPU), so stream_wait refuses, naming the variable; a
// finished transfer has nothing to wait for.
TEST(StreamOrderedConnection, WithOneHardwareQueueAStreamWaitIsRefusedNamingIt) {
  const char* was = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  std::optional<std::string> saved = was ? std::optional<std::string>(was) : std::nullopt;
  EnginePair p = connect_pair("tcp");
  ASSERT_TRUE(p.ca && p.cb);
  std::vector<char> out(4099, 'x'), in(4099, 0);
  ASSERT_TRUE(p.a->reg(out.data(), out.size()).ok());
  ASSERT_TRUE(p.b->reg(in.data(), in.size()).ok());
  void* stream = reinterpret_cast<void*>(0x1);  // CU_STREAM_LEGACY
  Transfer r = p.cb->recv_async(in.data(), in.size());
  ASSERT_EQ(setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1), 0);
  Status s = p.cb->stream_wait(r, stream);
  EXPECT_EQ(s.code(), Code::kUnimplemented) << s.to_string();
  EXPECT_NE(s.message().find("CUDA_DEVICE_MAX_CONNECTIONS=1"), std::string::npos) << s.to_string();
  ASSERT_EQ(setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8", 1), 0);
  // Allowed again (armed on a GPU; without a driver, refused for that).
  s = p.cb->stream_wait(r, stream);
  EXPECT_EQ(s.message().find("CUDA_DEVICE_MAX_CONNECTIONS"), std::string::npos) << s.to_string();
  ASSERT_EQ(setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1), 0);
  ASSERT_TRUE(p.ca->send(out.data(), out.size(), after(5s)).ok());
  ASSERT_TRUE(r.wait(after(5s)).ok());
  EXPECT_TRUE(p.cb->stream_wait(r, stream).ok());  // finished: nothing to wait for
  EXPECT_EQ(in, out);
  if (saved) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", saved->c_str(), 1);
  } else {
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  }
}

}  // namespace
}  // namespace ferry
