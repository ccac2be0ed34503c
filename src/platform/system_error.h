// errno to Status: the one wording for a failed system call.
//
// Why this file exists: every failed system call in ferry becomes a Status
// whose message says what was being done and the system's text for the error,
// "memfd_create: Too many open files". Callers choose the code (what the
// failure means to ferry's caller); this file makes the text, thread-safely
// (strerror may share one buffer between threads; this does not).
//
// Example:
//   if (::getifaddrs(&list) != 0) return errno_status(Code::kUnavailable, "getifaddrs");
//
// For files of /proc and /sys, host_files.h's errno_status(err, action, path)
// also picks the code from the error and names the path.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::platform {

// "what: <text of err>", e.g. "poll: Bad file descriptor". `err` defaults to
// errno as it is when the arguments are evaluated: read errno into a variable
// first when building `what` or cleaning up could change it.
std::string errno_message(std::string_view what, int err = errno);

// Status(code, errno_message(what, err)). REQUIRES: code != Code::kOk.
Status errno_status(Code code, std::string_view what, int err = errno);

}  // namespace ferry::platform
