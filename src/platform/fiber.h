// Fiber: a function run on a stack of its own that can stop mid-way and go
// on later, on the thread that resumes it.
//
// Why it exists: the TCP data plane serves every connection's streams from a
// fixed pool of worker threads (transport/tcp/io_pool.h). A stream's reader
// and writer keep their place in a frame (a header half read, a payload half
// landed, a send half done) on their fiber's stack, so that the protocol code
// stays straight-line and a worker turns to another socket whenever one has
// nothing to read or no room to write, instead of blocking on it.
//
// A fiber runs only between resume() and its suspend() (or its end), on the
// resuming thread; it must never suspend while holding a lock that another
// fiber of the same thread may take. Sanitizers are told of every switch
// (AddressSanitizer's and ThreadSanitizer's fiber interfaces).
//
// Not thread-safe: one thread at a time resumes a fiber.
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "ferry/status.h"

namespace ferry::platform {

class Fiber {
 public:
  // A fiber that will run `fn` on a stack of `stack_bytes` (rounded up to
  // pages; a guard page below it), not started. kResourceExhausted when the
  // stack cannot be mapped.
  static Result<std::unique_ptr<Fiber>> create(std::function<void()> fn, size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Runs the fiber on the calling thread until it suspends or ends. Only
  // from outside it, and not once done().
  void resume();
  // From inside a fiber: back to where it was resumed from.
  static void suspend();
  // The fiber the calling thread runs now, or null.
  static Fiber* current();
  bool done() const { return done_; }

 private:
  Fiber() = default;
  static void trampoline(unsigned lo, unsigned hi);

  std::function<void()> fn_;
  void* stack_ = nullptr;  // the mapping, guard page included
  size_t mapped_ = 0;
  ucontext_t self_{};
  ucontext_t caller_{};
  Fiber* outer_ = nullptr;  // the fiber that resumed this one (null: a thread)
  bool done_ = false;
  // What the sanitizers need of a switch (unused in other builds).
  [[maybe_unused]] void* tsan_fiber_ = nullptr;
  [[maybe_unused]] void* tsan_caller_ = nullptr;
  [[maybe_unused]] const void* asan_caller_bottom_ = nullptr;
  [[maybe_unused]] size_t asan_caller_size_ = 0;
  [[maybe_unused]] void* asan_fake_stack_ = nullptr;
};

}  // namespace ferry::platform
