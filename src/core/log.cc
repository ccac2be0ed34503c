// Implementation of the leveled stderr logger.
#include "core/log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace ferry::log {
namespace {

int level_from_env() {
  const char* v = std::getenv("FERRY_LOG");
  if (v == nullptr) return static_cast<int>(LogLevel::kWarn);
  std::string_view s(v);
  if (s == "error") return 0;
  if (s == "warn") return 1;
  if (s == "info") return 2;
  if (s == "debug") return 3;
  if (s == "trace") return 4;
  return static_cast<int>(LogLevel::kWarn);
}

const char* level_name(LogLevel l) {
  switch (l) {
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

}  // namespace

std::atomic<int>& threshold() {
  // The only process-wide state outside an engine: the logger's level, read
  // once from the environment.
  static std::atomic<int> level{level_from_env()};
  return level;
}

void set_level(LogLevel level) { threshold().store(static_cast<int>(level)); }

void write(LogLevel level, const char* subsystem, const char* fmt, ...) {
  char buf[1024];
  int n = std::snprintf(buf, sizeof(buf), "ferry %s [%s] ", level_name(level), subsystem);
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof(buf) - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof(buf) - 2) len = sizeof(buf) - 2;
  buf[len++] = '\n';
  ssize_t ignored = ::write(2, buf, len);
  (void)ignored;
}

}  // namespace ferry::log
