// Where ferry's log lines go.
//
// By default every line goes to stderr, one write per line:
//
//   2026-11-29T07:58:47.123Z ferry[4242] warn [tcp] engine 1a2b3c4d: connection 3 to 10.0.0.2:7000 ...
//
// a UTC timestamp with milliseconds, the process id, the level, the
// subsystem ("engine", "tcp", "local", "directory", "options", "cuda"), and,
// for a line about one engine, that engine's id as its first 8 hex digits (a
// prefix of the 16 that Engine::id() prints as). The level comes from
// FERRY_LOG or Options::log_level (default warn).
//
// An application with a logging system of its own asks for the lines in a
// queue instead and hands them on from a thread of its own, as the Python
// module does for `logging`:
//
//   ferry::queue_log_lines(1024);
//   std::thread reader([] {
//     for (;;) {
//       ferry::LogLines got = ferry::take_log_lines(std::chrono::seconds(1));
//       for (const ferry::LogLine& l : got.lines) my_log(l.level, l.subsystem, l.message);
//       if (!got.queued && got.lines.empty()) return;  // log_to_stderr() was called
//     }
//   });
//
// ferry's threads never wait for the reader: when the queue is full, a line
// is dropped and counted (LogLines::dropped).
//
// Thread-safe. The queue is the process's, shared by every engine in it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/options.h"
#include "ferry/status.h"

namespace ferry {

// "error", "warn", "info", "debug" or "trace", in any case ("INFO", "Info").
// kInvalidArgument otherwise, naming the value and the accepted names.
Result<LogLevel> parse_log_level(std::string_view name);
// The lower-case name of `level` ("warn").
std::string_view to_string(LogLevel level);

// One log line.
struct LogLine {
  LogLevel level = LogLevel::kWarn;
  std::string subsystem;   // "engine", "tcp", "local", "directory", ...
  uint64_t engine_id = 0;  // the engine the line is about; 0: no one engine
  std::chrono::system_clock::time_point time;
  std::string thread;   // the name of the thread that wrote it ("ferry-accept")
  std::string message;  // the text after the subsystem ("engine 1a2b3c4d: ..." when engine_id is set)
  std::string text;     // the whole line as stderr shows it, without the newline
};

// What take_log_lines returns.
struct LogLines {
  std::vector<LogLine> lines;  // oldest first
  // Lines dropped because the queue was full, since queue_log_lines opened it.
  uint64_t dropped = 0;
  // Lines still go to the queue (false after log_to_stderr).
  bool queued = false;
};

// From now on log lines go to a queue of at most `capacity` lines (at
// least 1) instead of stderr; a line that finds it full is dropped and
// counted. Called while queued, changes the capacity only. Does not block.
void queue_log_lines(size_t capacity);

// Log lines go to stderr again (the default). A thread blocked in
// take_log_lines wakes up and takes what was still queued. Does not block.
void log_to_stderr();

// Blocks until lines are queued, log_to_stderr was called, or `timeout`
// passed, and takes every queued line.
LogLines take_log_lines(std::chrono::milliseconds timeout);

// Writes one line through ferry's logger, as ferry's own lines are written,
// if `level` passes the threshold (a binding's own lines, for one system of
// logs). `engine_id` 0: a line about no one engine.
void write_log_line(LogLevel level, std::string_view subsystem, uint64_t engine_id, std::string_view message);

}  // namespace ferry
