// Checks of scalar Python arguments (see arguments.h).
#include "arguments.h"

#include <cmath>

#include "errors.h"
#include "transfer.h"

namespace ferry::py {

std::string type_name(pyb::handle h) { return std::string(pyb::str(pyb::type::handle_of(h).attr("__name__"))); }

Timeout timeout_from(pyb::handle h, const std::string& name) {
  Timeout t;
  if (h.is_none()) return t;
  if (PyBool_Check(h.ptr()) || !(PyFloat_Check(h.ptr()) || PyLong_Check(h.ptr()))) {
    throw pyb::type_error("argument '" + name + "' must be a number of seconds or None, not " + type_name(h));
  }
  double s = PyFloat_AsDouble(h.ptr());
  if (s == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw pyb::value_error("argument '" + name + "' is too large");
  }
  if (std::isnan(s) || s < 0) throw pyb::value_error("argument '" + name + "' must be None or >= 0 seconds");
  t.seconds = s;
  t.deadline = deadline_from(s);
  return t;
}

uint64_t count_from(pyb::handle h, const std::string& name) {
  if (PyBool_Check(h.ptr()) || !PyLong_Check(h.ptr())) {
    throw pyb::type_error("argument '" + name + "' must be an int, not " + type_name(h));
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow < 0 || (overflow == 0 && v < 0)) throw pyb::value_error("argument '" + name + "' must be >= 0");
  unsigned long long u = PyLong_AsUnsignedLongLong(h.ptr());
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw pyb::value_error("argument '" + name + "' does not fit in 64 bits");
  }
  return u;
}

std::optional<uint64_t> optional_count_from(pyb::handle h, const std::string& name) {
  if (h.is_none()) return std::nullopt;
  return count_from(h, name);
}

RemoteDescriptor remote_from(pyb::handle h, const std::string& name) {
  if (pyb::isinstance<RemoteDescriptor>(h)) return h.cast<RemoteDescriptor>();
  std::string bytes;
  if (PyBytes_Check(h.ptr())) {
    bytes = std::string(pyb::reinterpret_borrow<pyb::bytes>(h));
  } else if (PyByteArray_Check(h.ptr())) {
    bytes.assign(PyByteArray_AsString(h.ptr()), static_cast<size_t>(PyByteArray_Size(h.ptr())));
  } else {
    throw pyb::type_error("argument '" + name + "' must be a RemoteDescriptor or the bytes of its serialize(), not " +
                          type_name(h));
  }
  Result<RemoteDescriptor> d = RemoteDescriptor::parse(bytes);
  if (!d.ok()) throw pyb::value_error("argument '" + name + "': " + d.status().message());
  return d.value();
}

Region region_from(pyb::handle h, const std::string& name) {
  if (!pyb::isinstance<Region>(h)) {
    throw pyb::type_error("argument '" + name + "' must be a Region (from Engine.reg), not " + type_name(h));
  }
  return h.cast<Region>();
}

std::string str_from(pyb::handle h, const std::string& name) {
  if (!PyUnicode_Check(h.ptr())) throw pyb::type_error("argument '" + name + "' must be a str, not " + type_name(h));
  return h.cast<std::string>();
}

std::string peer_from(pyb::handle h, const std::string& name) {
  if (PyBytes_Check(h.ptr())) return std::string(pyb::reinterpret_borrow<pyb::bytes>(h));
  if (PyUnicode_Check(h.ptr())) return h.cast<std::string>();
  throw pyb::type_error("argument '" + name +
                        "' must be a str ('host:port' or a name in the directory) or bytes (an engine's "
                        "metadata), not " +
                        type_name(h));
}

}  // namespace ferry::py
