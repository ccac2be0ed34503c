// Status -> Python exception mapping for the _ferry module.
//
// One table (errors.cc) names the exception class of every ferry::Code. C++
// code in the binding reports a failed Status by throwing StatusError; the
// translator registered by bind_errors turns it into the table's exception,
// carrying the C++ message plus `.code` (a ferry.Code) and `.message`
// attributes. Only the thread holding the GIL throws or translates.
//
// A message may quote bytes a peer chose (a refusal's reason, an address from
// a metadata blob), so every C++ string that can carry them crosses into
// Python through text_to_python: valid UTF-8 unchanged, any other byte
// escaped as \xNN. A peer can then never turn an error into a
// UnicodeDecodeError, nor make a repr() or a .message raise.
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/status.h"

namespace ferry::py {

namespace pyb = pybind11;

// A non-OK ferry::Status on its way to Python.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)), text_(status_.to_string()) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return text_.c_str(); }

 private:
  Status status_;
  std::string text_;
};

// Throws StatusError when `s` is not OK.
inline void throw_if_error(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

// Returns the value of `r` or throws its status.
template <typename T>
T value_or_throw(Result<T>&& r) {
  if (!r.ok()) throw StatusError(r.status());
  return std::move(r).value();
}

// `text` as a str: valid UTF-8 decoded, every byte of an invalid sequence
// written as \xNN. Raises (error_already_set) only when out of memory.
pyb::str text_to_python(std::string_view text);

// The Python exception object (not yet raised) for a non-OK status.
pyb::object exception_for(const Status& s);

// Defines Code, Status, FerryError and its subclasses on `m`, and registers
// the StatusError translator.
void bind_errors(pyb::module_& m);

}  // namespace ferry::py
