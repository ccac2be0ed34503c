// The pieces of the _ferry module, one per concern:
//   errors.cc      Code, Status, FerryError and the Code -> exception table
//   buffers.cc     Python objects -> (pointer, length) without copies
//   transfer.cc    deadlines, interruptible waits, Transfer
//   engine.cc      Options, Region, RemoteDescriptor, Engine
//   connection.cc  Connection
//   address_blocks.cc  raw addresses to block rows (ferry.mooncake)
//   logs.cc        ferry's log lines to `logging`; what the build is
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <string>

#include "ferry/engine.h"

namespace ferry::py {

namespace pyb = pybind11;

// The Python-side Connection: the C++ connection plus the Python engine
// object it came from (kept alive as long as the connection is).
struct PyConnection {
  std::shared_ptr<Connection> conn;
  pyb::object engine;
};

// The Python-side Directory: a client of its own (`own`), or an engine's,
// found through `engine` on every call (so the engine may close meanwhile).
struct PyDirectory {
  std::shared_ptr<Directory> own;
  std::function<std::shared_ptr<Engine>()> engine;
  // The directory to use now; throws StatusError (closed engine, none).
  std::shared_ptr<Directory> resolve() const;
};

struct BufferArg;
// Throws InvalidArgument (naming `what`) when `b` overlaps memory the Python
// engine object `engine` registered from a read-only object: nothing may
// land there. Needs the GIL.
void check_destination(pyb::handle engine, const BufferArg& b, const std::string& what);

// Starts the thread that hands ferry's log lines to Python's `logging`
// (ferry/_logs.py), unless it runs or the application chose stderr. Called
// with the GIL held before anything that may log is made.
void start_log_reader();

void bind_logs(pyb::module_& m);
void bind_engine(pyb::module_& m);
void bind_directory(pyb::module_& m);
void bind_connection(pyb::module_& m);
void bind_address_blocks(pyb::module_& m);

}  // namespace ferry::py
