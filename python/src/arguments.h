// The scalar arguments of the Python API, checked at the boundary: a wrong
// type is a TypeError, a wrong value a ValueError, each naming the argument
// and never printing its value (an argument may be a large array).
//
// Each is its own C++ type with a pybind11 caster that accepts any Python
// object and checks it itself: a mismatch used to fall through to pybind11's
// "incompatible function arguments ... Invoked with: <every argument>" or
// "Unable to cast Python instance to C++ type".
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>

#include "ferry/memory.h"
#include "ferry/transfer.h"

namespace ferry::py {

namespace pyb = pybind11;

// `timeout`: seconds >= 0, or None for no deadline; the deadline is taken
// when the call starts.
struct Timeout {
  std::optional<double> seconds;
  Deadline deadline = kNoDeadline;
};
// `size`: a byte count >= 0, or None for "all of the buffer".
struct Size {
  std::optional<uint64_t> value;
};
// `remote_offset` (or another byte offset): an int >= 0.
struct Offset {
  uint64_t value = 0;
};
// `remote`: a RemoteDescriptor, or the bytes its serialize() gave.
struct Remote {
  RemoteDescriptor value;
};
// `peer`: 'host:port' or a directory name (str), or an engine's metadata (bytes).
struct Peer {
  std::string value;
};

Timeout timeout_from(pyb::handle h, const std::string& name = "timeout");
std::optional<uint64_t> optional_count_from(pyb::handle h, const std::string& name);
uint64_t count_from(pyb::handle h, const std::string& name);
RemoteDescriptor remote_from(pyb::handle h, const std::string& name);
Region region_from(pyb::handle h, const std::string& name);
std::string str_from(pyb::handle h, const std::string& name);
std::string peer_from(pyb::handle h, const std::string& name);
// The Python type name of `h`, for messages.
std::string type_name(pyb::handle h);

}  // namespace ferry::py

namespace pybind11::detail {

template <>
struct type_caster<ferry::py::Timeout> {
  PYBIND11_TYPE_CASTER(ferry::py::Timeout, const_name("float | None"));
  bool load(handle src, bool) {
    value = ferry::py::timeout_from(src);
    return true;
  }
};
template <>
struct type_caster<ferry::py::Size> {
  PYBIND11_TYPE_CASTER(ferry::py::Size, const_name("int | None"));
  bool load(handle src, bool) {
    value.value = ferry::py::optional_count_from(src, "size");
    return true;
  }
};
template <>
struct type_caster<ferry::py::Offset> {
  PYBIND11_TYPE_CASTER(ferry::py::Offset, const_name("int"));
  bool load(handle src, bool) {
    value.value = ferry::py::count_from(src, "remote_offset");
    return true;
  }
};
template <>
struct type_caster<ferry::py::Remote> {
  PYBIND11_TYPE_CASTER(ferry::py::Remote, const_name("RemoteDescriptor | bytes"));
  bool load(handle src, bool) {
    value.value = ferry::py::remote_from(src, "remote");
    return true;
  }
};
template <>
struct type_caster<ferry::py::Peer> {
  PYBIND11_TYPE_CASTER(ferry::py::Peer, const_name("str | bytes"));
  bool load(handle src, bool) {
    value.value = ferry::py::peer_from(src, "peer");
    return true;
  }
};

}  // namespace pybind11::detail
