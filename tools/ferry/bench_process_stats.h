// What a process holds and the CPU time it used, read from /proc: `ferry
// bench --peers` samples its target (a separate process, so the numbers are
// the target's alone) to show how threads, descriptors and memory grow with
// the peers it serves, and `ferry bench --local` what an operation costs
// both sides in CPU time.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "ferry/ferry.h"

namespace ferry::cli {

// One sample of a process.
struct ProcessStats {
  int threads = 0;         // /proc/PID/status "Threads:"
  int engine_threads = 0;  // of them, those named "ferry-..." (the engine's; the rest are the program's)
  int fds = 0;             // entries of /proc/PID/fd
  uint64_t rss_bytes = 0;  // /proc/PID/status "VmRSS:"
};

// Reads `pid`'s numbers now. Does not block on the process; the reads are not
// one atomic snapshot (a thread may start between them). kNotFound when the
// process is gone, kPermissionDenied when /proc hides it (another user's).
Result<ProcessStats> sample_process(pid_t pid);

// CPU time (user and system, every thread) `pid` used so far, in
// nanoseconds, from /proc/PID/stat (the kernel counts it in clock ticks,
// usually 10 ms: sample over a second or more).
Result<uint64_t> process_cpu_ns(pid_t pid);

// Time `pid`'s live threads have spent on a CPU, in nanoseconds, summed from
// /proc/PID/task/*/schedstat (nanosecond counts: fine enough for a short
// window; threads that ended are not counted).
Result<uint64_t> threads_on_cpu_ns(pid_t pid);

// This process's CPU time so far, every thread, in nanoseconds.
uint64_t process_cpu_ns();

// The larger of each field of `a` and `b`: the peak over samples of a phase.
ProcessStats peak(const ProcessStats& a, const ProcessStats& b);

}  // namespace ferry::cli
