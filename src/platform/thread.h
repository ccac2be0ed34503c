// Named worker threads. Every ferry thread carries a name that says what it
// serves (ferry-tx-eth1-0: the first transmit worker of NIC eth1) so that top, perf
// and gdb show who is busy.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "ferry/status.h"
#include "platform/cpu_binding.h"

namespace ferry::platform {

// Starts `fn` on a new thread named `name` (truncated to 15 characters, the
// kernel's limit). Throws std::system_error when the kernel refuses a thread:
// only for threads without which the process cannot go on. Threads started
// on a peer's behalf use try_start_thread.
std::thread start_thread(std::string name, std::function<void()> fn);

// As start_thread, but a thread the kernel refuses (the process or its user
// is out of threads or memory: RLIMIT_NPROC, cgroup pids.max) is
// kResourceExhausted naming the thread, and `fn` is dropped unrun.
Result<std::thread> try_start_thread(std::string name, std::function<void()> fn);

// Fault injection for tests: while set, try_start_thread fails as the kernel
// would for every thread whose name `fault` returns true for. nullptr clears
// it. Thread-safe.
void set_thread_start_fault(std::function<bool(std::string_view name)> fault);

// Restricts the calling thread to `cpus` (no change when empty) and returns
// the CPUs it may actually run on afterwards, as the kernel reports them.
CpuList pin_current_thread(const CpuList& cpus);

// How many CPUs the calling thread may run on (at least 1).
int usable_cpu_count();

}  // namespace ferry::platform
