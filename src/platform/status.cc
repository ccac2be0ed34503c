// Status helpers: code names, formatting, and value() of a failed Result.
#include "ferry/status.h"

#include <cstdio>
#include <cstdlib>

namespace ferry {

std::string_view code_name(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kCancelled:
      return "cancelled";
    case Code::kInvalidArgument:
      return "invalid_argument";
    case Code::kDeadlineExceeded:
      return "deadline_exceeded";
    case Code::kNotFound:
      return "not_found";
    case Code::kOutOfRange:
      return "out_of_range";
    case Code::kPermissionDenied:
      return "permission_denied";
    case Code::kUnauthenticated:
      return "unauthenticated";
    case Code::kResourceExhausted:
      return "resource_exhausted";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kPeerLost:
      return "peer_lost";
    case Code::kBufferTooSmall:
      return "buffer_too_small";
    case Code::kUnimplemented:
      return "unimplemented";
    case Code::kDataLoss:
      return "data_loss";
    case Code::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(code_name(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

void abort_on_failed_value(const Status& status) {
  std::fprintf(stderr, "ferry: value() of a failed Result: %s\n", status.to_string().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace ferry
