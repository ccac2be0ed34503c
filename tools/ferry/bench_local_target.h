// The target of `ferry bench --local`: this binary started again as a child,
// `ferry bench --listen 127.0.0.1:0 ...`. A target serves until its session
// ends (--once) or forever (a sweep's), so a bench that ended any other way —
// a failure that exits, SIGPIPE from a closed stdout, SIGTERM, SIGKILL — would
// leave it running with nobody to end it. This file makes the child die with
// its parent, always: the kernel kills it when the bench dies (its
// parent-death signal), and every exit of the bench that runs code (exit(),
// SIGPIPE, SIGTERM, SIGHUP) kills and reaps it first.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace ferry::cli {

// Starts the target with `flags` after "bench --listen 127.0.0.1:0" and
// returns the address it reports (its first line on stdout). `once`: the
// target was given --once, and ends by itself after its session. Blocks
// until the address comes (at most 30 s). At most one target lives at a time
// (REQUIRES: none started, or the last stopped). Call from the main thread:
// the parent-death signal follows the thread that started the child. On any
// failure prints "ferry bench: ..." and exits 1, the child ended.
std::string start_local_target(const std::vector<std::string>& flags, bool once);

// As start_local_target, for a target given `--engines count`: returns the
// address of each of its engines, in the order it reports them.
std::vector<std::string> start_local_targets(const std::vector<std::string>& flags, bool once, size_t count);

// The running target's process id, 0 when none runs (`--peers` reads its
// threads, descriptors and memory from /proc).
pid_t local_target_pid();

// Ends the target started last, if any, and reaps it: one given --once gets
// 2 s to exit after its session; any other is killed at once. Blocks until
// reaped. Safe to call when none runs.
void stop_local_target();

}  // namespace ferry::cli
