// Leveled logging with a subsystem prefix, to stderr.
//
// The level comes from FERRY_LOG (error|warn|info|debug|trace, default warn)
// or from Options::log_level, whichever was set last. Nothing on a hot path
// logs: per-chunk and per-frame events are trace-level and guarded by a cheap
// level check before any formatting happens.
#pragma once

#include <atomic>
#include <cstdio>

#include "ferry/options.h"

namespace ferry::log {

// The process-wide threshold. An atomic so the check costs one relaxed load.
std::atomic<int>& threshold();
void set_level(LogLevel level);
inline bool enabled(LogLevel level) { return static_cast<int>(level) <= threshold().load(std::memory_order_relaxed); }
// Writes "ferry <level> [subsystem] message\n" in one write(2).
void write(LogLevel level, const char* subsystem, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

}  // namespace ferry::log

#define FERRY_LOG(level, subsystem, ...)                                     \
  do {                                                                       \
    if (::ferry::log::enabled(::ferry::LogLevel::level))                     \
      ::ferry::log::write(::ferry::LogLevel::level, subsystem, __VA_ARGS__); \
  } while (0)
