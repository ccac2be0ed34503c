// Ordering transfers after the work an application queued on CUDA streams.
//
// A GPU buffer handed to ferry is often still being written by kernels
// queued on the application's stream (torch fills a tensor, then calls
// send); a receive buffer may still have a fill queued that would overwrite
// what lands. A transfer posted "after" streams is held until each stream
// has run what was queued on it at the call, then posted; the posting thread
// never waits for the GPU. Later operations on the same connection queue
// behind a held one, so operations posted from one thread keep their order.
//
//   OrderedPosts  one connection's held operations, in posting order
//   StreamGate    engine-wide: the one thread that posts what became ready
//                 (the driver's callback may not call CUDA, and posting may)
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "core/transfer_state.h"
#include "ferry/transfer.h"
#include "gpu/stream_waits.h"
#include "platform/mutex.h"

namespace ferry::core {

class OrderedPosts;

class StreamGate : public std::enable_shared_from_this<StreamGate> {
 public:
  explicit StreamGate(std::unique_ptr<platform::StreamWaits> waits) : waits_(std::move(waits)) {}
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  platform::StreamWaits& waits() { return *waits_; }
  // `queue` has an operation whose streams were reached: called from the
  // driver's thread (no CUDA, no waiting beyond a short lock).
  void ready(std::weak_ptr<OrderedPosts> queue) EXCLUDES(mu_);
  // Starts the posting thread unless it runs (kResourceExhausted if it
  // cannot start; kCancelled once stopped).
  Status start() EXCLUDES(mu_);
  // Stops and joins the thread; later ready() calls are ignored.
  void stop() EXCLUDES(mu_);

 private:
  void run();

  std::unique_ptr<platform::StreamWaits> waits_;
  platform::Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::weak_ptr<OrderedPosts>> ready_ GUARDED_BY(mu_);
  bool started_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class OrderedPosts : public std::enable_shared_from_this<OrderedPosts> {
 public:
  explicit OrderedPosts(std::shared_ptr<StreamGate> gate) : gate_(std::move(gate)) {}
  OrderedPosts(const OrderedPosts&) = delete;
  OrderedPosts& operator=(const OrderedPosts&) = delete;

  // True when an operation ordered after `streams` may be posted at once:
  // nothing is held here and every stream is idle. False on a stream the
  // driver refuses (post_later reports it).
  bool posts_now(std::span<const CudaStreamRef> streams) EXCLUDES(mu_);
  // Holds the operation that `post()` posts until every stream in `streams`
  // has run what is queued on it now and everything held before it here was
  // posted; `outer` is the handle the caller gets, finished with the posted
  // operation's result. A stream the driver refuses fails `outer` with why.
  Transfer post_later(std::span<const CudaStreamRef> streams, std::shared_ptr<TransferState> outer,
                      std::function<Transfer()> post) EXCLUDES(mu_);
  // Finishes every operation still held with `why` (the connection failed).
  void fail_all(const Status& why) EXCLUDES(mu_);
  // StreamGate's thread: posts the held operations that are ready, in order.
  void drain() EXCLUDES(mu_);
  // Operations held now (for tests and diagnostics).
  size_t held() EXCLUDES(mu_);

 private:
  struct Held;
  bool withdraw(const std::shared_ptr<Held>& op) EXCLUDES(mu_);
  static std::shared_ptr<TransferState> posted_state(Held& held);
  static void chain(const std::shared_ptr<TransferState>& outer, const Transfer& inner);

  const std::shared_ptr<StreamGate> gate_;
  platform::Mutex mu_;
  std::deque<std::shared_ptr<Held>> held_ GUARDED_BY(mu_);
};

}  // namespace ferry::core
