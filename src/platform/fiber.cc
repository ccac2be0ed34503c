// Fiber: ucontext switches, stacks from mmap, and the sanitizers told of
// each switch.
#include "platform/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "platform/system_error.h"

#if defined(__SANITIZE_ADDRESS__)
#define FERRY_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FERRY_FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_FIBER_TSAN 1
#endif
#endif

#if defined(FERRY_FIBER_ASAN)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
#endif
#if defined(FERRY_FIBER_TSAN)
extern "C" void* __tsan_get_current_fiber();
extern "C" void* __tsan_create_fiber(unsigned flags);
extern "C" void __tsan_destroy_fiber(void* fiber);
extern "C" void __tsan_switch_to_fiber(void* fiber, unsigned flags);
#endif

namespace ferry::platform {
namespace {

thread_local Fiber* g_current = nullptr;

size_t page_size() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

}  // namespace

Result<std::unique_ptr<Fiber>> Fiber::create(std::function<void()> fn, size_t stack_bytes) {
  std::unique_ptr<Fiber> f(new Fiber());
  f->fn_ = std::move(fn);
  const size_t page = page_size();
  size_t usable = (stack_bytes + page - 1) / page * page;
  f->mapped_ = usable + page;
  // Reserved, not committed: a fiber's stack costs what it touches.
  void* m = ::mmap(nullptr, f->mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                   -1, 0);
  if (m == MAP_FAILED) return errno_status(Code::kResourceExhausted, "mapping a fiber's stack");
  f->stack_ = m;
  // The guard page below the stack turns an overflow into a fault, not into
  // another fiber's memory.
  (void)::mprotect(m, page, PROT_NONE);
  if (::getcontext(&f->self_) != 0) return errno_status(Code::kInternal, "getcontext");
  f->self_.uc_stack.ss_sp = static_cast<char*>(m) + page;
  f->self_.uc_stack.ss_size = usable;
  f->self_.uc_link = nullptr;
  const auto p = reinterpret_cast<uintptr_t>(f.get());
  ::makecontext(&f->self_, reinterpret_cast<void (*)()>(&Fiber::trampoline), 2, static_cast<unsigned>(p),
                static_cast<unsigned>(p >> 32));
#if defined(FERRY_FIBER_TSAN)
  f->tsan_fiber_ = __tsan_create_fiber(0);
#endif
  return f;
}

Fiber::~Fiber() {
#if defined(FERRY_FIBER_TSAN)
  if (tsan_fiber_ != nullptr) __tsan_destroy_fiber(tsan_fiber_);
#endif
  if (stack_ != nullptr) ::munmap(stack_, mapped_);
}

Fiber* Fiber::current() { return g_current; }

void Fiber::resume() {
  outer_ = g_current;
  g_current = this;
#if defined(FERRY_FIBER_TSAN)
  tsan_caller_ = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(tsan_fiber_, 0);
#endif
#if defined(FERRY_FIBER_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, static_cast<char*>(stack_) + page_size(), mapped_ - page_size());
#endif
  ::swapcontext(&caller_, &self_);
#if defined(FERRY_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  g_current = outer_;
}

void Fiber::suspend() {
  Fiber* f = g_current;
  if (f == nullptr) std::abort();  // only a fiber suspends
#if defined(FERRY_FIBER_TSAN)
  __tsan_switch_to_fiber(f->tsan_caller_, 0);
#endif
#if defined(FERRY_FIBER_ASAN)
  __sanitizer_start_switch_fiber(&f->asan_fake_stack_, f->asan_caller_bottom_, f->asan_caller_size_);
#endif
  ::swapcontext(&f->self_, &f->caller_);
#if defined(FERRY_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(f->asan_fake_stack_, &f->asan_caller_bottom_, &f->asan_caller_size_);
#endif
}

void Fiber::trampoline(unsigned lo, unsigned hi) {
  Fiber* f = reinterpret_cast<Fiber*>(static_cast<uintptr_t>(lo) | (static_cast<uintptr_t>(hi) << 32));
#if defined(FERRY_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &f->asan_caller_bottom_, &f->asan_caller_size_);
#endif
  f->fn_();
  f->fn_ = nullptr;
  f->done_ = true;
#if defined(FERRY_FIBER_TSAN)
  __tsan_switch_to_fiber(f->tsan_caller_, 0);
#endif
#if defined(FERRY_FIBER_ASAN)
  __sanitizer_start_switch_fiber(nullptr, f->asan_caller_bottom_, f->asan_caller_size_);
#endif
  ::setcontext(&f->caller_);
  std::abort();  // setcontext returns only on failure
}

}  // namespace ferry::platform
