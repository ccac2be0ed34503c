// Status and Result<T>: how every ferry operation reports failure.
//
// ferry never throws and never aborts on user error. A failure is a value: a
// canonical Code that a program can branch on, plus a message written for a
// human that says what failed and where (peer, region, offset). The code set
// is small on purpose, in the spirit of absl::StatusCode; the detail lives in
// the message.
//
// Example:
//   ferry::Result<ferry::Region> r = engine->reg(buf, len);
//   if (!r.ok()) { fprintf(stderr, "%s\n", r.status().to_string().c_str()); }
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ferry {

// Canonical error codes. Which one to use:
enum class Code : uint8_t {
  kOk = 0,
  kCancelled = 1,          // the caller (or close()) cancelled the operation
  kInvalidArgument = 2,    // the arguments are wrong whatever the state (bad size, bad address string)
  kDeadlineExceeded = 3,   // a deadline passed before the operation finished
  kNotFound = 4,           // memory not registered, unknown region or descriptor, unknown peer name
  kOutOfRange = 5,         // offset/length outside a registered region or exported descriptor
  kPermissionDenied = 6,   // wrong region key: the peer was not given access to that memory
  kUnauthenticated = 7,    // shared-secret challenge failed, or the peer requires a secret we lack
  kResourceExhausted = 8,  // out of memory, descriptors, ports, queue slots
  kUnavailable = 9,        // peer unreachable: connection refused, no route, handshake never finished
  kPeerLost = 10,          // an established peer died, closed or went silent while work was pending
  kBufferTooSmall = 11,    // a receive buffer is smaller than the message sent to it
  kUnimplemented = 12,     // not supported here (transport, memory kind or feature unavailable)
  kDataLoss = 13,          // garbage or a protocol violation arrived on the wire
  kInternal = 14,          // a broken invariant inside ferry: a bug, please report it
};

// Stable lower-case name of a code, e.g. "peer_lost".
std::string_view code_name(Code code);

// A code plus a message. Cheap when OK (no allocation). Thread-compatible.
class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "peer_lost: connection 3 to 10.0.0.2:7000 ..." or "ok".
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context + ": "`.
  Status with_context(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) { return a.code_ == b.code_ && a.message_ == b.message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Prints "ferry: value() of a failed Result: <status>" to stderr and aborts:
// what value() does on an error, so the status is never lost.
[[noreturn]] void abort_on_failed_value(const Status& status);

// Either a T or a non-OK Status; never holds an OK status without a value.
// value() (and -> and *) on an error is a bug in the caller: it prints the
// status and aborts rather than throw. Check ok() first, or use
// FERRY_ASSIGN_OR_RETURN.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) {
      v_ = Status(Code::kInternal, "Result constructed from an OK status without a value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error, or OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  // REQUIRES: ok(); otherwise prints the status and aborts.
  T& value() & {
    check_value();
    return *std::get_if<T>(&v_);
  }
  const T& value() const& {
    check_value();
    return *std::get_if<T>(&v_);
  }
  T&& value() && {
    check_value();
    return std::move(*std::get_if<T>(&v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  void check_value() const {
    if (!ok()) abort_on_failed_value(*std::get_if<Status>(&v_));
  }

  std::variant<T, Status> v_;
};

}  // namespace ferry

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define FERRY_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::ferry::Status ferry_status_ = (expr);        \
    if (!ferry_status_.ok()) return ferry_status_; \
  } while (0)

#define FERRY_CONCAT_INNER_(a, b) a##b
#define FERRY_CONCAT_(a, b) FERRY_CONCAT_INNER_(a, b)

// `FERRY_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the error.
#define FERRY_ASSIGN_OR_RETURN(decl, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL_(FERRY_CONCAT_(ferry_result_, __LINE__), decl, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  decl = std::move(tmp).value()
