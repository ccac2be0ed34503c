// ferry's log lines for Python's `logging`, and what the build is.
//
// The C++ side never takes the GIL to log: lines go to ferry's bounded log
// queue (include/ferry/log.h), and the `ferry-log` thread of ferry/_logs.py
// takes them with the GIL released while it waits, then hands them to
// `logging` with the GIL held, as any Python thread would.
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "ferry/log.h"
#include "ferry/version.h"

namespace ferry::py {

void start_log_reader() {
  // Imported here, not at module load: _ferry is imported by the package
  // before ferry._logs exists, and a module used without its package
  // (tests of _ferry alone) has no reader to start.
  try {
    pyb::module_::import("ferry._logs").attr("start")();
  } catch (const pyb::error_already_set& e) {
    if (!e.matches(PyExc_ImportError)) throw;
  }
}

void bind_logs(pyb::module_& m) {
  m.def(
      "_log_queue", [](size_t capacity) { queue_log_lines(capacity); }, pyb::arg("capacity"),
      "ferry's log lines go to a queue of at most `capacity` lines (the rest are dropped and counted) "
      "instead of stderr, until _log_to_stderr().");
  m.def(
      "_log_to_stderr", [] { log_to_stderr(); },
      "ferry's log lines go to stderr again; a thread waiting in _log_take() wakes up.");
  m.def(
      "_log_take",
      [](double timeout) {
        auto wait = std::chrono::milliseconds(static_cast<int64_t>(std::max(timeout, 0.0) * 1000));
        LogLines got;
        {
          pyb::gil_scoped_release nogil;
          got = take_log_lines(wait);
        }
        pyb::list lines;
        for (const LogLine& l : got.lines) {
          double at = std::chrono::duration<double>(l.time.time_since_epoch()).count();
          lines.append(pyb::make_tuple(std::string(to_string(l.level)), l.subsystem, l.engine_id, at,
                                       text_to_python(l.thread), text_to_python(l.message), text_to_python(l.text)));
        }
        return pyb::make_tuple(lines, got.dropped, got.queued);
      },
      pyb::arg("timeout"),
      "Waits up to `timeout` seconds (the GIL released) for queued log lines; returns (lines, dropped, queued): "
      "each line (level, subsystem, engine_id, unix time, thread, message, text), the lines dropped since the "
      "queue opened, and whether lines still go to the queue.");
  m.def(
      "_log_lines_from_threads",
      [](int threads, int lines, LogLevel level, const std::string& subsystem) {
        // The GIL stays held while the threads log and until they end: a
        // logger that needed it would never let them finish.
        std::vector<std::thread> started;
        for (int t = 0; t < threads; ++t) {
          started.emplace_back([t, lines, level, subsystem] {
            for (int i = 0; i < lines; ++i) {
              write_log_line(level, subsystem, 0, "line " + std::to_string(i) + " of thread " + std::to_string(t));
            }
          });
        }
        for (std::thread& t : started) t.join();
      },
      pyb::arg("threads"), pyb::arg("lines"), pyb::arg("level"), pyb::arg("subsystem"),
      "For tests: `threads` C++ threads each log `lines` lines while this call holds the GIL.");
  m.def(
      "build_info",
      [] {
        BuildInfo b = build_info();
        pyb::dict d;
        d["version"] = b.version;
        d["protocol"] = b.protocol_version;
        d["protocol_range"] = pyb::make_tuple(b.min_protocol_version, b.protocol_version);
        d["cuda"] = b.cuda;
        d["nixl_plugin"] = b.nixl_plugin;
        d["directories"] = b.directories;
        d["text"] = describe(b);
        return d;
      },
      "What this build is: version, wire protocol version and the range it accepts, and what was compiled in "
      "(cuda, nixl_plugin, directories); `text` is what `ferry --version` prints of it.");
}

}  // namespace ferry::py
