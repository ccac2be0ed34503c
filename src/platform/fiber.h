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
// Switches save and restore only what the ABI says a call preserves (on
// x86-64, a few registers and the floating-point control words: no system
// call, which ucontext's switch makes to restore the signal mask; elsewhere
// ucontext). A fiber shares its thread's signal mask.
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

  // Fiber stacks this process holds, and the most it may. Each stack is two
  // of the process's memory mappings (it and its guard page), and the kernel
  // refuses any mapping past vm.max_map_count (65,530 by default) — malloc's,
  // the loader's and CUDA's too, which would then fail anywhere in the
  // process. So stacks stop short of it: past the budget create() is
  // kResourceExhausted, which fails the stream or connection that asked and
  // nothing else. The count is the process's, as the kernel's limit is.
  static size_t stacks_held();
  static size_t stack_budget();
  // Tests: another budget (0: back to the one vm.max_map_count sets).
  static void set_stack_budget_for_testing(size_t stacks);
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
  friend void fiber_main(Fiber* f);
  // Switches from the context saved in `from` to `to`.
  static void switch_context(Fiber* f, bool into);

  std::function<void()> fn_;
  void* stack_ = nullptr;  // the mapping, guard page included
  bool counted_ = false;   // holds one of the process's stacks
  size_t mapped_ = 0;
  ucontext_t self_{};
  ucontext_t caller_{};
  void* self_sp_ = nullptr;    // x86-64: the fiber's stack pointer while it is switched out
  void* caller_sp_ = nullptr;  // and its resumer's
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
