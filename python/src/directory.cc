// Directory, DirectoryEntry, DirectoryEvent and DirectoryWatch: engines found
// by name through Redis or etcd (docs/directory.md).
#include <pybind11/stl.h>

#include <cinttypes>

#include "bindings.h"
#include "errors.h"
#include "transfer.h"

namespace ferry::py {
namespace {


pyb::list to_python(const std::vector<std::string>& v) {
  pyb::list out;
  for (const auto& s : v) out.append(text_to_python(s));
  return out;
}

struct PyWatch {
  std::unique_ptr<DirectoryWatch> watch;
};

}  // namespace

std::shared_ptr<Directory> PyDirectory::resolve() const {
  if (own) return own;
  std::shared_ptr<Engine> e = engine();
  Directory* d = e->directory();
  if (d == nullptr) {
    throw StatusError(Status(Code::kInvalidArgument,
                             "this engine has no directory (ferry.Engine(directory='redis://...' or 'etcd://...'), "
                             "or FERRY_DIRECTORY)"));
  }
  return std::shared_ptr<Directory>(std::move(e), d);  // keeps the engine while the call runs
}

void bind_directory(pyb::module_& m) {
  pyb::class_<DirectoryEntry>(m, "DirectoryEntry", "One engine as the directory names it; a plain value.")
      .def_property_readonly("name", [](const DirectoryEntry& e) { return text_to_python(e.name); })
      .def_readonly("engine_id", &DirectoryEntry::engine_id, "The engine's random id (Engine.id).")
      .def_readonly("incarnation", &DirectoryEntry::incarnation, "Higher for every later start under this name.")
      .def_property_readonly("host_id", [](const DirectoryEntry& e) { return text_to_python(e.host_id); })
      .def_property_readonly(
          "addresses", [](const DirectoryEntry& e) { return to_python(e.addresses); },
          "'host:port' the engine listens on, preferred first.")
      .def_readonly("pid", &DirectoryEntry::pid)
      .def_readonly("started_unix_ms", &DirectoryEntry::started_unix_ms)
      .def(
          "metadata", [](const DirectoryEntry& e) { return pyb::bytes(e.metadata()); },
          "The metadata bytes Engine.connect accepts.")
      .def("__repr__", [](const DirectoryEntry& e) {
        return pyb::str("<ferry.DirectoryEntry {}>").format(text_to_python(e.to_string()));
      });

  pyb::class_<DirectoryEvent>(m, "DirectoryEvent",
                              "A change a watch saw: kind is 'appeared', 'vanished' or 'replaced'.")
      .def_property_readonly("kind", [](const DirectoryEvent& e) { return std::string(event_kind_name(e.kind)); })
      .def_readonly("entry", &DirectoryEvent::entry, "The entry (for 'vanished': as last seen).")
      .def("__repr__", [](const DirectoryEvent& e) {
        return pyb::str("<ferry.DirectoryEvent {} {}>")
            .format(std::string(event_kind_name(e.kind)), text_to_python(e.entry.to_string()));
      });

  pyb::class_<PyWatch>(m, "DirectoryWatch", "Compares successive listings of a directory; one owner (not thread-safe).")
      .def(
          "poll",
          [](PyWatch& w, const Timeout& timeout) {
            Result<std::vector<DirectoryEvent>> r = Status();
            {
              pyb::gil_scoped_release nogil;
              r = w.watch->poll(timeout.deadline);
            }
            return value_or_throw(std::move(r));
          },
          pyb::arg("timeout") = 5.0,
          "Lists once; returns the DirectoryEvents since the last listing (the first call: every entry "
          "'appeared'). Raises Unavailable if the directory cannot be reached.")
      .def(
          "next",
          [](PyWatch& w, const Timeout& timeout, double interval) {
            Deadline end = timeout.deadline;
            auto step = std::chrono::milliseconds(static_cast<int64_t>(std::max(interval, 0.01) * 1000));
            // In slices, so that Ctrl-C is seen; an unreachable directory is
            // retried until `timeout`, like DirectoryWatch::next.
            Status unreachable;
            for (;;) {
              Deadline slice = std::min(end, after(std::chrono::milliseconds(500)));
              Result<std::vector<DirectoryEvent>> r = Status();
              {
                pyb::gil_scoped_release nogil;
                r = w.watch->next(slice, step);
              }
              bool down = !r.ok() && r.status().code() == Code::kUnavailable;
              if (down) unreachable = r.status();
              if (r.ok() && !r->empty()) return std::move(r).value();
              if (!r.ok() && !down) return value_or_throw(std::move(r));
              if (Clock::now() >= end) {
                if (down) throw StatusError(unreachable);
                return std::vector<DirectoryEvent>();
              }
              if (PyErr_CheckSignals() != 0) throw pyb::error_already_set();
            }
          },
          pyb::arg("timeout") = pyb::none(), pyb::arg("interval") = 0.2,
          "Polls every `interval` seconds until something changed (returns the events) or `timeout` passed "
          "(returns []). None: wait as long as it takes.");

  pyb::class_<PyDirectory>(m, "Directory",
                           "A client of a directory (redis://[user:pass@]host:port[/ns] or "
                           "etcd://host:port[,host:port...][/ns]). Engine.directory is the engine's own.")
      .def(pyb::init([](const std::string& url) {
             start_log_reader();
             PyDirectory d;
             d.own = std::shared_ptr<Directory>(value_or_throw(Directory::open(url)));
             return d;
           }),
           pyb::arg("url"), "Parses `url` (InvalidArgument if malformed); connects on first use.")
      .def_property_readonly(
          "url", [](const PyDirectory& d) { return d.resolve()->url(); }, "The URL without its password.")
      .def_property_readonly("namespace", [](const PyDirectory& d) { return d.resolve()->ns(); })
      .def(
          "lookup",
          [](const PyDirectory& d, pyb::handle name_arg, const Timeout& timeout) {
            std::string name = str_from(name_arg, "name");
            auto dir = d.resolve();
            Result<DirectoryEntry> r = Status();
            {
              pyb::gil_scoped_release nogil;
              r = dir->lookup(name, timeout.deadline);
            }
            return value_or_throw(std::move(r));
          },
          pyb::arg("name"), pyb::arg("timeout") = 5.0,
          "The DirectoryEntry of `name`. Raises NotFound (LookupError) if there is none, DataLoss if it is "
          "malformed, Unavailable if the directory cannot be reached within `timeout` seconds.")
      .def(
          "list",
          [](const PyDirectory& d, const Timeout& timeout) {
            auto dir = d.resolve();
            Result<DirectoryListing> r = Status();
            {
              pyb::gil_scoped_release nogil;
              r = dir->list(timeout.deadline);
            }
            return value_or_throw(std::move(r)).entries;
          },
          pyb::arg("timeout") = 5.0, "Every valid entry, sorted by name (malformed ones are skipped).")
      .def(
          "listing",
          [](const PyDirectory& d, const Timeout& timeout) {
            auto dir = d.resolve();
            Result<DirectoryListing> r = Status();
            {
              pyb::gil_scoped_release nogil;
              r = dir->list(timeout.deadline);
            }
            DirectoryListing l = value_or_throw(std::move(r));
            pyb::list errors;
            for (const Status& s : l.malformed) errors.append(text_to_python(s.message()));
            return pyb::make_tuple(l.entries, errors);
          },
          pyb::arg("timeout") = 5.0, "(entries, [messages about malformed entries]).")
      .def(
          "watch", [](const PyDirectory& d) { return PyWatch{d.resolve()->watch()}; },
          "A DirectoryWatch reporting names that appear, vanish or are replaced (a restart).")
      .def("__repr__", [](const PyDirectory& d) {
        try {
          return "<ferry.Directory " + d.resolve()->url() + ">";
        } catch (const StatusError& e) {  // a closed engine, or none: repr() must not raise
          return "<ferry.Directory unavailable: " + e.status().to_string() + ">";
        }
      });
}

}  // namespace ferry::py
