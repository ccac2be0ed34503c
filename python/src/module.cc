// The _ferry extension module: the C++ API of ferry for Python. The package
// `ferry` (python/ferry/__init__.py) re-exports it with friendlier
// constructors and the ferry.p2p facade.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "errors.h"
#include "signatures.h"
#include "transfer.h"
#include "waker.h"

PYBIND11_MODULE(_ferry, m) {
  m.doc() = "ferry: point-to-point transfers between host and GPU memories (C++ core binding).";
  ferry::py::bind_errors(m);
  ferry::py::bind_waker(m);
  ferry::py::bind_transfer(m);
  ferry::py::bind_engine(m);
  ferry::py::bind_directory(m);
  ferry::py::bind_connection(m);
  ferry::py::bind_address_blocks(m);
  ferry::py::bind_logs(m);
  ferry::py::publish_text_signatures(m);
}
