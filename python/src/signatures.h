// Python-readable signatures for every function of the module.
//
// pybind11 writes each signature into the docstring with C++-flavoured types
// ("data: handle", "-> ferry::py::PyConnection"), which help() shows as is
// and inspect.signature() cannot read. After all bindings are made, this
// rewrites each docstring's first line into CPython's own form,
// "name(self, data, size=None, *, timeout=None)\n--\n\n", from which both
// help() and inspect.signature() take the signature; types live in the
// stubs (_ferry.pyi).
#pragma once

#include <pybind11/pybind11.h>

namespace ferry::py {

// Rewrites the functions of `m` and the methods of its classes. Overloaded
// functions (pybind11's "Overloaded function." docs) are left as they are.
void publish_text_signatures(pybind11::module_& m);

}  // namespace ferry::py
