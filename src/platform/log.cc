// The leveled logger: the line's prefix, stderr, and the process's log queue.
#include "platform/log.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "platform/log_queue.h"
#include "platform/thread_annotations.h"

namespace ferry {
namespace log {
namespace {

int level_from_env() {
  // An unknown value leaves the default; Engine::create refuses it with
  // the error that names it (tunables.cc).
  const char* v = std::getenv("FERRY_LOG");
  if (v == nullptr) return static_cast<int>(LogLevel::kWarn);
  auto level = parse_log_level(v);
  return static_cast<int>(level.ok() ? level.value() : LogLevel::kWarn);
}

LogQueue& queue();

// fork() handlers: the queue's lock is held from before a fork to after it,
// across these functions, which the analysis cannot follow.
void queue_before_fork() NO_THREAD_SAFETY_ANALYSIS { queue().before_fork(); }
void queue_after_fork_in_parent() NO_THREAD_SAFETY_ANALYSIS { queue().after_fork_in_parent(); }
void queue_after_fork_in_child() NO_THREAD_SAFETY_ANALYSIS { queue().after_fork_in_child(); }

// The process's queue, made on first use and never destroyed (threads may
// log while the process exits).
LogQueue& queue() {
  static LogQueue* q = [] {
    auto* made = new LogQueue();
    ::pthread_atfork(queue_before_fork, queue_after_fork_in_parent, queue_after_fork_in_child);
    return made;
  }();
  return *q;
}

// "2026-11-29T07:58:47.123Z" into `out`. The date is computed here, not by
// gmtime_r: that takes glibc's time-zone lock, which a thread that held it at
// fork() leaves taken for ever in the child.
void format_time(std::chrono::system_clock::time_point t, char* out, size_t n) {
  int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
  int64_t days = secs >= 0 ? secs / 86400 : (secs - 86399) / 86400;
  int64_t in_day = secs - days * 86400;
  // Days since 1970-01-01 to a civil date (proleptic Gregorian calendar).
  int64_t z = days + 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  int64_t day = doy - (153 * mp + 2) / 5 + 1;
  int64_t month = mp < 10 ? mp + 3 : mp - 9;
  int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  std::snprintf(out, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", static_cast<int>(year), static_cast<int>(month),
                static_cast<int>(day), static_cast<int>(in_day / 3600), static_cast<int>(in_day / 60 % 60),
                static_cast<int>(in_day % 60), static_cast<int>(ms - secs * 1000));
}

}  // namespace

std::atomic<int>& threshold() {
  // The logger's level, read once from the environment; with the queue
  // below, the only process-wide state outside an engine.
  static std::atomic<int> level{level_from_env()};
  return level;
}

void set_level(LogLevel level) { threshold().store(static_cast<int>(level)); }

void write(LogLevel level, const char* subsystem, uint64_t engine_id, const char* fmt, ...) {
  auto now = std::chrono::system_clock::now();
  // "engine 1a2b3c4d: " then the message.
  char body[1024];
  int n = 0;
  if (engine_id != 0) {
    n = std::snprintf(body, sizeof(body), "engine %08" PRIx32 ": ", static_cast<uint32_t>(engine_id >> 32));
  }
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(body + n, sizeof(body) - static_cast<size_t>(n), fmt, ap);
  va_end(ap);
  size_t body_len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (body_len > sizeof(body) - 1) body_len = sizeof(body) - 1;

  char stamp[64];
  format_time(now, stamp, sizeof(stamp));
  char head[128];
  int h = std::snprintf(head, sizeof(head), "%s ferry[%d] %s [%.32s] ", stamp, static_cast<int>(::getpid()),
                        level_name(level), subsystem);
  size_t head_len = h < 0 ? 0 : std::min(static_cast<size_t>(h), sizeof(head) - 1);

  LogQueue& q = queue();
  if (q.is_open()) {
    LogLine line;
    line.level = level;
    line.subsystem = subsystem;
    line.engine_id = engine_id;
    line.time = now;
    char thread[16] = {};
    if (::pthread_getname_np(::pthread_self(), thread, sizeof(thread)) == 0) line.thread = thread;
    line.message.assign(body, body_len);
    line.text.reserve(head_len + body_len);
    line.text.append(head, head_len).append(body, body_len);
    if (q.push(line)) return;
  }
  char out[sizeof(head) + sizeof(body) + 1];
  std::memcpy(out, head, head_len);
  std::memcpy(out + head_len, body, body_len);
  out[head_len + body_len] = '\n';
  ssize_t ignored = ::write(2, out, head_len + body_len + 1);
  (void)ignored;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kTrace:
      return "trace";
  }
  return "?";
}

}  // namespace log

Result<LogLevel> parse_log_level(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (LogLevel l : {LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug, LogLevel::kTrace}) {
    if (lower == log::level_name(l)) return l;
  }
  return Status(Code::kInvalidArgument,
                "\"" + std::string(name) + "\" is no log level: expected error, warn, info, debug or trace (any case)");
}

std::string_view to_string(LogLevel level) { return log::level_name(level); }

void queue_log_lines(size_t capacity) { log::queue().open(capacity); }

void log_to_stderr() { log::queue().close(); }

LogLines take_log_lines(std::chrono::milliseconds timeout) { return log::queue().take(timeout); }

void write_log_line(LogLevel level, std::string_view subsystem, uint64_t engine_id, std::string_view message) {
  if (!log::enabled(level)) return;
  std::string tag(subsystem.substr(0, 32));
  log::write(level, tag.c_str(), engine_id, "%.*s", static_cast<int>(std::min<size_t>(message.size(), 1000)),
             message.data());
}

}  // namespace ferry
