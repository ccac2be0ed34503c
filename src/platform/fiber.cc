// Fiber: ucontext switches, stacks from mmap, and the sanitizers told of
// each switch.
#include "platform/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "platform/sanitizers.h"
#include "platform/system_error.h"

#if defined(FERRY_ASAN)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
#endif
#if defined(FERRY_TSAN)
extern "C" void* __tsan_get_current_fiber();
extern "C" void* __tsan_create_fiber(unsigned flags);
extern "C" void __tsan_destroy_fiber(void* fiber);
extern "C" void __tsan_switch_to_fiber(void* fiber, unsigned flags);
#endif

#if defined(__x86_64__)
// Saves the callee-saved registers and the SSE and x87 control words on the
// current stack, stores the stack pointer at *save, loads `load` and restores
// the same from there. A new fiber's stack is laid out as if it had been
// switched out just before ferry_fiber_entry, which passes r12 (the Fiber)
// to fiber_main.
extern "C" void ferry_fiber_switch(void** save, void* load);
extern "C" void ferry_fiber_entry();
asm(R"(
  .text
  .globl ferry_fiber_switch
  .type ferry_fiber_switch,@function
ferry_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ferry_fiber_switch,.-ferry_fiber_switch

  .globl ferry_fiber_entry
  .type ferry_fiber_entry,@function
ferry_fiber_entry:
  movq %r12, %rdi
  andq $-16, %rsp
  call ferry_fiber_main
  ud2
  .size ferry_fiber_entry,.-ferry_fiber_entry
  .section .note.GNU-stack,"",@progbits
  .text
)");
#define FERRY_FIBER_ASM 1
#endif

namespace ferry::platform {

void fiber_main(Fiber* f);

}  // namespace ferry::platform

extern "C" void ferry_fiber_main(void* f) { ferry::platform::fiber_main(static_cast<ferry::platform::Fiber*>(f)); }

namespace ferry::platform {
namespace {

thread_local Fiber* g_current = nullptr;

size_t page_size() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

// Mappings left to the rest of the process: a CUDA process holds a few
// thousand (its libraries, pinned pools, IPC handles), malloc's arenas and
// every thread's stack more.
constexpr size_t kMappingsLeftToTheProcess = 16000;

size_t budget_from_the_kernel() {
  size_t max_maps = 65530;  // the kernel's default
  if (FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
    unsigned long long v = 0;
    if (std::fscanf(f, "%llu", &v) == 1 && v > 0) max_maps = static_cast<size_t>(v);
    std::fclose(f);
  }
  const size_t left = max_maps >= 2 * kMappingsLeftToTheProcess ? kMappingsLeftToTheProcess : max_maps / 2;
  return (max_maps - left) / 2;  // two mappings a stack
}

// The process's stacks (see Fiber::stacks_held): process-wide because the
// kernel's limit is.
std::atomic<size_t> g_stacks_held{0};
std::atomic<size_t> g_budget_for_testing{0};

}  // namespace

size_t Fiber::stacks_held() { return g_stacks_held.load(std::memory_order_relaxed); }

size_t Fiber::stack_budget() {
  static const size_t from_the_kernel = budget_from_the_kernel();
  size_t testing = g_budget_for_testing.load(std::memory_order_relaxed);
  return testing != 0 ? testing : from_the_kernel;
}

void Fiber::set_stack_budget_for_testing(size_t stacks) { g_budget_for_testing.store(stacks); }

Result<std::unique_ptr<Fiber>> Fiber::create(std::function<void()> fn, size_t stack_bytes) {
  std::unique_ptr<Fiber> f(new Fiber());
  f->fn_ = std::move(fn);
  const size_t page = page_size();
  size_t usable = (stack_bytes + page - 1) / page * page;
  f->mapped_ = usable + page;
  const size_t budget = stack_budget();
  if (g_stacks_held.fetch_add(1, std::memory_order_relaxed) >= budget) {
    g_stacks_held.fetch_sub(1, std::memory_order_relaxed);
    return Status(Code::kResourceExhausted,
                  "fiber stacks: this process holds " + std::to_string(budget) +
                      ", the most that vm.max_map_count leaves room for (each is two memory mappings); "
                      "raise vm.max_map_count, or serve fewer connections or streams");
  }
  f->counted_ = true;  // the destructor gives it back
  // Reserved, not committed: a fiber's stack costs what it touches.
  void* m = ::mmap(nullptr, f->mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                   -1, 0);
  if (m == MAP_FAILED) return errno_status(Code::kResourceExhausted, "mapping a fiber's stack");
  f->stack_ = m;
  // The guard page below the stack turns an overflow into a fault, not into
  // another fiber's memory.
  (void)::mprotect(m, page, PROT_NONE);
#if defined(FERRY_FIBER_ASM)
  {
    // What ferry_fiber_switch pops, from the lowest address: the control
    // words, r15, r14, r13, r12 (the Fiber), rbx, rbp, then the address it
    // returns to. That address sits 16-byte aligned.
    auto top = reinterpret_cast<uintptr_t>(static_cast<char*>(m) + page + usable) & ~uintptr_t{15};
    auto* ret = reinterpret_cast<uint64_t*>(top - 16);
    ret[0] = reinterpret_cast<uint64_t>(&ferry_fiber_entry);
    ret[1] = 0;
    uint64_t* regs = ret - 7;
    const uint32_t mxcsr = 0x1F80;   // all exceptions masked, round to nearest
    const uint16_t fpucw = 0x037F;   // the same for x87
    regs[0] = mxcsr | (uint64_t{fpucw} << 32);
    regs[1] = 0;                                       // r15
    regs[2] = 0;                                       // r14
    regs[3] = 0;                                       // r13
    regs[4] = reinterpret_cast<uint64_t>(f.get());     // r12
    regs[5] = 0;                                       // rbx
    regs[6] = 0;                                       // rbp
    f->self_sp_ = regs;
  }
#else
  if (::getcontext(&f->self_) != 0) return errno_status(Code::kInternal, "getcontext");
  f->self_.uc_stack.ss_sp = static_cast<char*>(m) + page;
  f->self_.uc_stack.ss_size = usable;
  f->self_.uc_link = nullptr;
  const auto p = reinterpret_cast<uintptr_t>(f.get());
  ::makecontext(&f->self_, reinterpret_cast<void (*)()>(&Fiber::trampoline), 2, static_cast<unsigned>(p),
                static_cast<unsigned>(p >> 32));
#endif
#if defined(FERRY_TSAN)
  f->tsan_fiber_ = __tsan_create_fiber(0);
#endif
  return f;
}

Fiber::~Fiber() {
#if defined(FERRY_TSAN)
  if (tsan_fiber_ != nullptr) __tsan_destroy_fiber(tsan_fiber_);
#endif
  if (stack_ != nullptr) ::munmap(stack_, mapped_);
  if (counted_) g_stacks_held.fetch_sub(1, std::memory_order_relaxed);
}

Fiber* Fiber::current() { return g_current; }

void Fiber::resume() {
  outer_ = g_current;
  g_current = this;
#if defined(FERRY_TSAN)
  tsan_caller_ = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(tsan_fiber_, 0);
#endif
#if defined(FERRY_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, static_cast<char*>(stack_) + page_size(), mapped_ - page_size());
#endif
  switch_context(this, /*into=*/true);
#if defined(FERRY_ASAN)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  g_current = outer_;
}

void Fiber::suspend() {
  Fiber* f = g_current;
  if (f == nullptr) std::abort();  // only a fiber suspends
#if defined(FERRY_TSAN)
  __tsan_switch_to_fiber(f->tsan_caller_, 0);
#endif
#if defined(FERRY_ASAN)
  __sanitizer_start_switch_fiber(&f->asan_fake_stack_, f->asan_caller_bottom_, f->asan_caller_size_);
#endif
  switch_context(f, /*into=*/false);
#if defined(FERRY_ASAN)
  __sanitizer_finish_switch_fiber(f->asan_fake_stack_, &f->asan_caller_bottom_, &f->asan_caller_size_);
#endif
}

void Fiber::switch_context(Fiber* f, bool into) {
#if defined(FERRY_FIBER_ASM)
  if (into) {
    ferry_fiber_switch(&f->caller_sp_, f->self_sp_);
  } else {
    ferry_fiber_switch(&f->self_sp_, f->caller_sp_);
  }
#else
  if (into) {
    ::swapcontext(&f->caller_, &f->self_);
  } else {
    ::swapcontext(&f->self_, &f->caller_);
  }
#endif
}

void Fiber::trampoline(unsigned lo, unsigned hi) {
  fiber_main(reinterpret_cast<Fiber*>(static_cast<uintptr_t>(lo) | (static_cast<uintptr_t>(hi) << 32)));
}

void fiber_main(Fiber* f) {
#if defined(FERRY_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &f->asan_caller_bottom_, &f->asan_caller_size_);
#endif
  f->fn_();
  f->fn_ = nullptr;
  f->done_ = true;
#if defined(FERRY_TSAN)
  __tsan_switch_to_fiber(f->tsan_caller_, 0);
#endif
#if defined(FERRY_ASAN)
  __sanitizer_start_switch_fiber(nullptr, f->asan_caller_bottom_, f->asan_caller_size_);
#endif
#if defined(FERRY_FIBER_ASM)
  // Through switch_context, as every switch: the resumer comes back out of
  // its own switch_context, and ThreadSanitizer's record of the resumer's
  // calls stays balanced (one entry, one exit).
  Fiber::switch_context(f, /*into=*/false);
#else
  ::setcontext(&f->caller_);
#endif
  std::abort();  // a fiber that ended is never switched back into
}

}  // namespace ferry::platform
