// Named worker threads. Every ferry thread carries a name that says what it
// serves (ferry-c3-p0-tx: connection 3, path 0, transmit) so that top, perf
// and gdb show who is busy.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "platform/cpu_binding.h"

namespace ferry::platform {

// Starts `fn` on a new thread named `name` (truncated to 15 characters, the
// kernel's limit).
std::thread start_thread(std::string name, std::function<void()> fn);

// Restricts the calling thread to `cpus` (no change when empty) and returns
// the CPUs it may actually run on afterwards, as the kernel reports them.
CpuList pin_current_thread(const CpuList& cpus);

// How many CPUs the calling thread may run on (at least 1).
int usable_cpu_count();

}  // namespace ferry::platform
