// The one table from ferry::Code to Python exception classes.
#include "errors.h"

#include <array>
#include <cctype>

namespace ferry::py {
namespace {

struct ErrorClass {
  Code code;
  const char* name;    // class name inside the ferry package
  PyObject** builtin;  // a built-in exception it also derives from, or nullptr
  const char* doc;
};

// Every non-OK code, its class, and the built-in exception a Python program
// would already catch for it. Keep in step with include/ferry/status.h.
const std::array<ErrorClass, 14> kTable = {{
    {Code::kCancelled, "Cancelled", nullptr, "The operation was cancelled (cancel(), close() or engine shutdown)."},
    {Code::kInvalidArgument, "InvalidArgument", &PyExc_ValueError,
     "The arguments are wrong whatever the state (bad size, bad address string)."},
    {Code::kDeadlineExceeded, "DeadlineExceeded", &PyExc_TimeoutError,
     "The timeout passed before the operation finished."},
    {Code::kNotFound, "NotFound", &PyExc_LookupError,
     "Memory not registered, or an unknown region, descriptor or peer name (code not_found)."},
    {Code::kOutOfRange, "OutOfRange", &PyExc_IndexError,
     "An offset or length falls outside a registered region or an exported descriptor."},
    {Code::kPermissionDenied, "PermissionDenied", &PyExc_PermissionError,
     "Wrong region key: the peer was not given access to that memory."},
    {Code::kUnauthenticated, "Unauthenticated", &PyExc_PermissionError,
     "The shared-secret challenge failed, or the peer requires a secret this side lacks."},
    {Code::kResourceExhausted, "ResourceExhausted", nullptr, "Out of memory, descriptors, ports or queue slots."},
    {Code::kUnavailable, "Unavailable", &PyExc_ConnectionError,
     "Peer unreachable: connection refused, no route, handshake never finished."},
    {Code::kPeerLost, "PeerLost", &PyExc_ConnectionError,
     "An established peer died, closed or went silent while work was pending."},
    {Code::kBufferTooSmall, "BufferTooSmall", nullptr, "A receive buffer is smaller than the message sent to it."},
    {Code::kUnimplemented, "Unimplemented", &PyExc_NotImplementedError,
     "Not supported here (transport, memory kind or feature unavailable)."},
    {Code::kDataLoss, "DataLoss", nullptr, "Garbage or a protocol violation arrived on the wire."},
    {Code::kInternal, "InternalError", nullptr, "A broken invariant inside ferry: a bug, please report it."},
}};

PyObject* g_base = nullptr;             // ferry.FerryError
std::array<PyObject*, 16> g_by_code{};  // indexed by the Code's value

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

pyb::str text_to_python(std::string_view text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
  if (s == nullptr) throw pyb::error_already_set();
  return pyb::reinterpret_steal<pyb::str>(s);
}

pyb::object exception_for(const Status& s) {
  auto index = static_cast<size_t>(s.code());
  PyObject* cls = index < g_by_code.size() && g_by_code[index] != nullptr ? g_by_code[index] : g_base;
  pyb::object type = pyb::reinterpret_borrow<pyb::object>(cls);
  pyb::str message = text_to_python(s.message());
  pyb::object exc = type(message);
  exc.attr("code") = pyb::cast(s.code());
  exc.attr("message") = message;
  return exc;
}

void bind_errors(pyb::module_& m) {
  pyb::enum_<Code> code(m, "Code", "Canonical ferry status codes (include/ferry/status.h).");
  for (int i = 0; i <= static_cast<int>(Code::kInternal); ++i) {
    auto c = static_cast<Code>(i);
    code.value(upper(code_name(c)).c_str(), c);
  }
  m.def(
      "code_name", [](Code c) { return std::string(code_name(c)); }, pyb::arg("code"),
      "Stable lower-case name of a code, e.g. 'peer_lost'.");

  pyb::class_<Status>(m, "Status", "A code and a message; what every ferry operation reports.")
      .def(pyb::init<>())
      .def(pyb::init<Code, std::string>(), pyb::arg("code"), pyb::arg("message"))
      .def_property_readonly("code", &Status::code)
      .def_property_readonly(
          "message", [](const Status& s) { return text_to_python(s.message()); },
          "What failed and where; bytes that are not UTF-8 appear as \\xNN.")
      .def("ok", &Status::ok, "True for the OK status.")
      .def(
          "to_string", [](const Status& s) { return text_to_python(s.to_string()); },
          "'peer_lost: connection 3 to ...' or 'ok'.")
      .def(
          "exception", [](const Status& s) -> pyb::object { return s.ok() ? pyb::none() : exception_for(s); },
          "The matching FerryError subclass instance (not raised), or None when OK.")
      .def(
          "raise_if_error", [](const Status& s) { throw_if_error(s); }, "Raises the matching FerryError unless OK.")
      .def("__eq__", [](const Status& a, const Status& b) { return a == b; })
      .def("__repr__", [](const Status& s) { return text_to_python("<ferry.Status " + s.to_string() + ">"); });

  g_base = PyErr_NewExceptionWithDoc("ferry.FerryError",
                                     "Base class of every error a ferry operation reports. Attributes: code "
                                     "(ferry.Code) and message (the C++ message: what failed and where).",
                                     PyExc_Exception, nullptr);
  if (g_base == nullptr) throw pyb::error_already_set();
  m.add_object("FerryError", pyb::reinterpret_borrow<pyb::object>(g_base));
  for (const ErrorClass& e : kTable) {
    std::string qualified = std::string("ferry.") + e.name;
    pyb::object base = pyb::reinterpret_borrow<pyb::object>(g_base);
    pyb::tuple bases = e.builtin != nullptr
                           ? pyb::tuple(pyb::make_tuple(base, pyb::reinterpret_borrow<pyb::object>(*e.builtin)))
                           : pyb::tuple(pyb::make_tuple(base));
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), e.doc, bases.ptr(), nullptr);
    if (cls == nullptr) throw pyb::error_already_set();
    g_by_code[static_cast<size_t>(e.code)] = cls;  // a reference kept for the life of the process
    m.add_object(e.name, pyb::reinterpret_borrow<pyb::object>(cls));
  }

  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      pyb::object exc = exception_for(e.status());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
}

}  // namespace ferry::py
