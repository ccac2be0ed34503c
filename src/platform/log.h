// Leveled logging with a subsystem prefix (the line's format and where lines
// go: include/ferry/log.h).
//
// The level comes from FERRY_LOG (error|warn|info|debug|trace in any case,
// default warn) or from Options::log_level, whichever was set last. Nothing on
// a hot path logs: per-chunk and per-frame events are trace-level and guarded
// by a cheap level check before any formatting happens.
//
// A line about one engine names it: FERRY_ENGINE_LOG(level, subsystem,
// engine_id, ...), with the id from the EngineContext (or the connection's
// context) at hand. FERRY_LOG is for lines about no one engine (the process,
// a GPU, a directory client).
//
// Thread-safe. Writing a line takes no lock but the log queue's, for a push
// while lines are queued; it never calls into Python.
#pragma once

#include <atomic>
#include <cstdint>

#include "ferry/log.h"
#include "ferry/options.h"

namespace ferry::log {

// The process-wide threshold. An atomic so the check costs one relaxed load.
std::atomic<int>& threshold();
void set_level(LogLevel level);
inline bool enabled(LogLevel level) { return static_cast<int>(level) <= threshold().load(std::memory_order_relaxed); }
// The lower-case name of `level` ("warn").
const char* level_name(LogLevel level);

// Writes one line (include/ferry/log.h) in one write(2), or queues it while
// lines are queued. `engine_id` 0: the line is about no one engine.
void write(LogLevel level, const char* subsystem, uint64_t engine_id, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace ferry::log

// FERRY_LOG(kWarn, "tcp", "format", args...): a line about no one engine.
#define FERRY_LOG(level, subsystem, ...)                                        \
  do {                                                                          \
    if (::ferry::log::enabled(::ferry::LogLevel::level))                        \
      ::ferry::log::write(::ferry::LogLevel::level, subsystem, 0, __VA_ARGS__); \
  } while (0)

// FERRY_ENGINE_LOG(kWarn, "tcp", ctx.engine_id, "format", args...): a line
// about the engine of that id.
#define FERRY_ENGINE_LOG(level, subsystem, engine_id, ...)                              \
  do {                                                                                  \
    if (::ferry::log::enabled(::ferry::LogLevel::level))                                \
      ::ferry::log::write(::ferry::LogLevel::level, subsystem, engine_id, __VA_ARGS__); \
  } while (0)
