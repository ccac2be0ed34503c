// Options, Region, RemoteDescriptor and Engine.
#include <pthread.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "arguments.h"
#include "bindings.h"
#include "buffers.h"
#include "errors.h"
#include "ferry/log.h"
#include "transfer.h"
#include "waker.h"

namespace ferry::py {
namespace {

// ---- Options --------------------------------------------------------------

// Durations are seconds in Python (int, float or datetime.timedelta).
double to_seconds(pyb::handle v, const char* field) {
  double seconds;
  if (pyb::hasattr(v, "total_seconds")) {
    seconds = v.attr("total_seconds")().cast<double>();
  } else if ((PyLong_Check(v.ptr()) || PyFloat_Check(v.ptr())) && !PyBool_Check(v.ptr())) {
    seconds = v.cast<double>();
  } else {
    throw pyb::type_error(std::string(field) + " must be seconds (int, float or datetime.timedelta)");
  }
  if (!(seconds >= 0)) throw pyb::value_error(std::string(field) + " must be >= 0 seconds");
  return seconds;
}

template <typename Duration>
Duration to_duration(pyb::handle v, const char* field) {
  return std::chrono::round<Duration>(std::chrono::duration<double>(to_seconds(v, field)));
}

LogLevel to_level(pyb::handle v) {
  if (pyb::isinstance<LogLevel>(v)) return v.cast<LogLevel>();
  if (PyUnicode_Check(v.ptr())) {
    auto level = parse_log_level(v.cast<std::string>());
    if (level.ok()) return level.value();
  }
  throw pyb::value_error(
      "log_level must be a ferry.LogLevel or one of 'error', 'warn', 'info', 'debug', 'trace' (any case)");
}

// A field that holds one of a few names (include/ferry/options.h): Python
// reads and writes the lower-case name, as FERRY_* variables spell it. Any
// other name raises InvalidArgument ("transport must be auto, tcp or local,
// got \"udp\""), anything but a str TypeError.
template <auto Field, auto Parse>
void choice_property(pyb::class_<Options>& c, const char* name, const char* doc) {
  c.def_property(
      name, [](const Options& o) { return std::string(to_string(o.*Field)); },
      [name](Options& o, pyb::handle v) {
        if (!PyUnicode_Check(v.ptr())) throw pyb::type_error(std::string(name) + " must be a str");
        o.*Field = value_or_throw(Parse(v.cast<std::string>()));
      },
      doc);
}

// A value as a TypeError quotes it: its type and repr, the repr cut short
// ("str '1M'", "float 2.5"). pybind11's own error for a setter given the
// wrong type lists the setter's overloads and the whole Options' repr.
std::string describe_value(pyb::handle v) {
  std::string repr = pyb::repr(v).cast<std::string>();
  if (repr.size() > 40) repr = repr.substr(0, 37) + "...";
  return std::string(Py_TYPE(v.ptr())->tp_name) + " " + repr;
}

// An integer field: any int (or object with __index__, such as numpy's), bool
// excepted; `what` is how the field is described ("an int (bytes)"). Another
// type raises TypeError, a value past the field's C++ type ValueError, each
// one line naming the field.
template <auto Field>
void int_property(pyb::class_<Options>& c, const char* name, const char* what, const char* doc) {
  using T = std::remove_reference_t<decltype(std::declval<Options&>().*Field)>;
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  c.def_property(
      name, [](const Options& o) { return o.*Field; },
      [name, what](Options& o, pyb::handle v) {
        if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr())) {
          throw pyb::type_error(std::string(name) + " must be " + what + ", got " + describe_value(v));
        }
        pyb::int_ i = pyb::reinterpret_steal<pyb::int_>(PyNumber_Index(v.ptr()));
        if (!i) throw pyb::error_already_set();
        // pybind11's cast checks the range (an error it raises is cleared here).
        try {
          o.*Field = i.cast<T>();
        } catch (const pyb::cast_error&) {
          PyErr_Clear();
          throw pyb::value_error(
              std::string(name) + " must be " + what + " from " + std::to_string(std::numeric_limits<T>::min()) +
              " to " + std::to_string(std::numeric_limits<T>::max()) + ", got " + pyb::str(i).cast<std::string>());
        }
      },
      doc);
}

// A str field, or a bool one: the value's own type only (a bool is not
// taken from 1, nor a str from 7000), else a one-line TypeError.
template <auto Field>
void exact_property(pyb::class_<Options>& c, const char* name, const char* doc) {
  using T = std::remove_reference_t<decltype(std::declval<Options&>().*Field)>;
  static_assert(std::is_same_v<T, std::string> || std::is_same_v<T, bool>);
  c.def_property(
      name, [](const Options& o) { return o.*Field; },
      [name](Options& o, pyb::handle v) {
        constexpr bool kText = std::is_same_v<T, std::string>;
        if (kText ? !PyUnicode_Check(v.ptr()) : !PyBool_Check(v.ptr())) {
          throw pyb::type_error(std::string(name) + (kText ? " must be a str" : " must be a bool") + ", got " +
                                describe_value(v));
        }
        o.*Field = v.cast<T>();
      },
      doc);
}

template <auto Field>
void duration_property(pyb::class_<Options>& c, const char* name, const char* doc) {
  using Duration = std::remove_reference_t<decltype(std::declval<Options&>().*Field)>;
  c.def_property(
      name, [](const Options& o) { return std::chrono::duration<double>(o.*Field).count(); },
      [name](Options& o, pyb::handle v) { o.*Field = to_duration<Duration>(v, name); }, doc);
}

void bind_options(pyb::module_& m) {
  pyb::enum_<LogLevel>(m, "LogLevel")
      .value("ERROR", LogLevel::kError)
      .value("WARN", LogLevel::kWarn)
      .value("INFO", LogLevel::kInfo)
      .value("DEBUG", LogLevel::kDebug)
      .value("TRACE", LogLevel::kTrace);

  pyb::class_<Options> o(m, "Options",
                         "Engine options (include/ferry/options.h). Each can be overridden by its FERRY_* "
                         "environment variable when the engine starts; durations are in seconds.");
  o.def(pyb::init<>()).def(pyb::init<const Options&>(), pyb::arg("other"), "A copy of `other`.");
  // Each field checks the type it is given (int_property, exact_property), so
  // that a wrong one is a one-line error naming the field.
  constexpr const char* kInt = "an int";
  constexpr const char* kBytes = "an int (bytes)";
  exact_property<&Options::listen>(o, "listen", "host:port to listen on; port 0 picks a free port.");
  exact_property<&Options::nics>(o, "nics",
                                 "NICs to serve and move data on, comma-separated interface names ('eth1,eth2'); "
                                 "empty: only the listen address.");
  exact_property<&Options::tx_bindings>(o, "tx_bindings", "CPUs of each NIC's transmit workers, 'eth1:8-21;eth2:...'.");
  exact_property<&Options::rx_bindings>(o, "rx_bindings", "CPUs of each NIC's receive workers.");
  int_property<&Options::workers>(
      o, "workers", kInt, "TCP worker threads per NIC and direction (0: one per default stream, at most the bound CPUs).");
  int_property<&Options::streams>(o, "streams", kInt, "Data streams (paths) per NIC pair, besides the control one.");
  int_property<&Options::chunk_bytes>(o, "chunk_bytes", kBytes,
                                      "Bulk transfers are cut into chunks of this many bytes.");
  int_property<&Options::staging_depth>(o, "staging_depth", kInt,
                                        "GPU memory over TCP: chunks each path stages ahead per direction.");
  int_property<&Options::staging_chunk_bytes>(o, "staging_chunk_bytes", kBytes,
                                              "GPU memory over TCP: chunk and staging slot size in bytes.");
  exact_property<&Options::staging_lend_pages>(
      o, "staging_lend_pages", "GPU memory over TCP: sockets borrow sent slots' pages instead of copying them.");
  int_property<&Options::window>(o, "window", kInt, "Unconfirmed chunks a path may have in flight.");
  int_property<&Options::inline_max>(o, "inline_max", kBytes, "Messages up to this size ride on the control stream.");
  exact_property<&Options::auth_token>(o, "auth_token", "Shared secret; empty means no authentication.");
  int_property<&Options::socket_buffer_bytes>(
      o, "socket_buffer_bytes", kBytes, "Kernel socket buffer per stream in bytes; 0 keeps the kernel's autotuning.");
  int_property<&Options::max_connections>(
      o, "max_connections", kInt,
      "Connections the engine holds at once (accepted, dialed or queued); one more is refused.");
  int_property<&Options::max_handshakes>(o, "max_handshakes", kInt,
                                         "Handshakes in progress at once; a connection past it is closed unread.");
  int_property<&Options::max_connections_per_peer>(o, "max_connections_per_peer", kInt,
                                                   "Connections one peer address may hold at once.");
  int_property<&Options::max_streams>(
      o, "max_streams", kInt,
      "Data streams over all connections (each costs a descriptor, no thread); a handshake past it is refused.");
  int_property<&Options::connection_memory_bytes>(
      o, "connection_memory_bytes", kBytes,
      "Bytes a connection may hold for its peer (unreceived messages, unpolled notifications, unread replies); past "
      "it the connection fails with ResourceExhausted.");
  int_property<&Options::engine_memory_bytes>(
      o, "engine_memory_bytes", kBytes,
      "Bytes all connections together may hold for their peers (each within connection_memory_bytes); a connection "
      "whose peer would pass it fails with ResourceExhausted.");
  exact_property<&Options::metrics>(o, "metrics", "Count transfers for engine.metrics() (on by default).");
  exact_property<&Options::metrics_listen>(
      o, "metrics_listen",
      "host:port (or :port, loopback) to serve engine.metrics() to Prometheus at /metrics; port 0 picks one "
      "(engine.metrics_address); empty: none.");
  exact_property<&Options::local_other_uids>(
      o, "local_other_uids", "Same-host peers of another uid may use the local transport (refused by default).");
  exact_property<&Options::local_same_process>(
      o, "local_same_process", "An engine may be its own peer on the local transport (two engines of one process always may).");
  exact_property<&Options::directory>(
      o, "directory",
      "'redis://[user:pass@]host:port[/ns]' or 'etcd://host:port[,...][/ns]': publish this engine there under `name` "
      "and resolve names in connect(); empty: no directory.");
  exact_property<&Options::name>(o, "name", "The name published in the directory; empty: hostname-pid.");
  choice_property<&Options::transport, &parse_transport>(
      o, "transport", "'auto' (the local transport for same-host peers, TCP otherwise), 'tcp' or 'local'.");
  choice_property<&Options::nic_policy, &parse_nic_policy>(o, "nic_policy",
                                                           "'nearest' (NICs on the memory's NUMA node) or 'all'.");
  choice_property<&Options::path_policy, &parse_path_policy>(
      o, "path_policy", "'adaptive' (paths by CPU headroom and measured gain) or 'all' (every path, always).");
  choice_property<&Options::staging_copy, &parse_staging_copy>(
      o, "staging_copy", "GPU memory over TCP: 'kernel' (staging copies on a few SMs) or 'engine' (the copy engines).");
  duration_property<&Options::heartbeat_interval>(o, "heartbeat_interval",
                                                  "Seconds without control traffic before a heartbeat goes out.");
  duration_property<&Options::peer_timeout>(o, "peer_timeout",
                                            "Seconds of silence after which a peer is lost and its transfers fail.");
  duration_property<&Options::path_timeout>(
      o, "path_timeout", "Seconds a data stream may leave sent bytes unacknowledged before it is declared dead.");
  duration_property<&Options::handshake_timeout>(o, "handshake_timeout", "Seconds a connection handshake may take.");
  duration_property<&Options::directory_ttl>(
      o, "directory_ttl",
      "Seconds a directory entry lives unless refreshed (every third of it); a dead engine "
      "vanishes within it.");
  duration_property<&Options::wait_spin>(o, "wait_spin",
                                         "Seconds Transfer.wait polls before it sleeps; 0 lets the transport choose.");
  duration_property<&Options::gather_linger>(
      o, "gather_linger",
      "Local transport, batches of GPU blocks: seconds the gather kernel stays resident after a batch (no launch "
      "a batch; it holds 32 SMs' blocks meanwhile); 0: launched for each batch.");
  o.def_property(
      "log_level", [](const Options& x) { return x.log_level; },
      [](Options& x, pyb::handle v) { x.log_level = to_level(v); }, "A ferry.LogLevel or its name, in any case.");
  o.def("__repr__", [](const Options& x) {
    std::string s = "ferry.Options(";
    bool first = true;
    for (const TunableInfo& t : describe_tunables(x)) {
      std::string v = t.value;
      if (t.name == "auth_token") v = x.auth_token.empty() ? "''" : "'***'";
      if (t.name == "directory" || t.name == "name") v = "'" + v + "'";
      if (t.unit == "ms") {  // Python speaks seconds
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%g", std::strtod(t.value.c_str(), nullptr) / 1000.0);
        v = buf;
      }
      s += (first ? "" : ", ") + t.name + "=" + v;
      first = false;
    }
    return s + ")";
  });

  m.def(
      "apply_environment", [](const Options& base) { return value_or_throw(apply_environment(base)); },
      pyb::arg("options"),
      "Returns `options` with every FERRY_* environment variable applied (InvalidArgument "
      "names a malformed one).");
  m.def(
      "validate", [](const Options& o) { throw_if_error(validate(o)); }, pyb::arg("options"),
      "Raises InvalidArgument naming the first field out of range.");
  m.def(
      "describe_tunables",
      [](const Options& o) {
        pyb::list out;
        for (const TunableInfo& t : describe_tunables(o)) {
          pyb::dict d;
          d["name"] = t.name;
          d["env"] = t.env;
          d["default"] = t.default_value;
          d["value"] = t.value;
          d["unit"] = t.unit;
          d["doc"] = t.doc;
          out.append(d);
        }
        return out;
      },
      pyb::arg("options"),
      "Every tunable as `ferry config` shows it: dicts with name, env, default, value, unit, doc.");
}

// ---- Region and RemoteDescriptor ------------------------------------------

void bind_memory(pyb::module_& m) {
  pyb::enum_<MemoryKind>(m, "MemoryKind")
      .value("HOST", MemoryKind::kHost)
      .value("HOST_PINNED", MemoryKind::kHostPinned)
      .value("CUDA", MemoryKind::kCuda);

  pyb::class_<Region>(m, "Region", "A registered region, as Engine.reg returns it; a plain value.")
      .def_readonly("id", &Region::id)
      .def_property_readonly(
          "base", [](const Region& r) { return reinterpret_cast<uintptr_t>(r.base); }, "Start address (int).")
      .def_readonly("length", &Region::length)
      .def_readonly("kind", &Region::kind)
      .def_readonly("device", &Region::device, "GPU ordinal for CUDA memory, -1 otherwise.")
      .def("__repr__", [](const Region& r) {
        char buf[160];
        std::snprintf(buf, sizeof(buf), "<ferry.Region id=%llu base=0x%llx length=%zu kind=%s device=%d>",
                      static_cast<unsigned long long>(r.id),
                      static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(r.base)), r.length,
                      std::string(memory_kind_name(r.kind)).c_str(), r.device);
        return std::string(buf);
      });

  pyb::class_<RemoteDescriptor>(m, "RemoteDescriptor",
                                "What a peer needs for one-sided access to an exported slice of a region. Send "
                                "serialize()'s bytes to the peer through any channel; it calls parse().")
      .def(pyb::init<>())
      .def_readwrite("engine_id", &RemoteDescriptor::engine_id)
      .def_readwrite("export_id", &RemoteDescriptor::export_id)
      .def_readwrite("key", &RemoteDescriptor::key)
      .def_readwrite("length", &RemoteDescriptor::length, "Bytes reachable from offset 0.")
      .def_readwrite("kind", &RemoteDescriptor::kind)
      .def_readwrite("device", &RemoteDescriptor::device)
      .def(
          "serialize", [](const RemoteDescriptor& d) { return pyb::bytes(d.serialize()); },
          "A fixed-size byte string, safe to send through any side channel.")
      .def_static(
          "parse",
          [](pyb::bytes b) {
            std::string s = b;
            return value_or_throw(RemoteDescriptor::parse(s));
          },
          pyb::arg("data"), "Parses serialize()'s output; InvalidArgument says what is malformed.")
      .def("__eq__",
           [](const RemoteDescriptor& a, const RemoteDescriptor& b) { return a.serialize() == b.serialize(); })
      .def(pyb::pickle([](const RemoteDescriptor& d) { return pyb::bytes(d.serialize()); },
                       [](pyb::bytes b) {
                         std::string s = b;
                         return value_or_throw(RemoteDescriptor::parse(s));
                       }))
      .def("__repr__", [](const RemoteDescriptor& d) {
        return "<ferry.RemoteDescriptor engine=" + std::to_string(d.engine_id) +
               " export=" + std::to_string(d.export_id) + " length=" + std::to_string(d.length) +
               " kind=" + std::string(memory_kind_name(d.kind)) + ">";
      });
}

// ---- Engine -----------------------------------------------------------------

// Owns the C++ engine. Calls copy the shared_ptr (GIL held) before releasing
// the GIL, so close() never destroys an engine under a running call.
class PyEngine {
 public:
  explicit PyEngine(const Options& options) {
    start_log_reader();  // the engine's first lines go to `logging` already
    Result<std::unique_ptr<Engine>> r = Status();
    {
      pyb::gil_scoped_release nogil;
      r = Engine::create(options);
    }
    engine_ = std::shared_ptr<Engine>(value_or_throw(std::move(r)));
  }

  ~PyEngine() { shutdown(false); }

  std::shared_ptr<Engine> get() const {
    if (!engine_) throw StatusError(Status(Code::kCancelled, "the engine is closed"));
    return engine_;
  }
  bool closed() const { return closed_.load(); }

  void close() { shutdown(true); }

  Region reg(pyb::handle data, const Size& size) {
    auto e = get();
    BufferArg b = resolve_buffer(data, size.value, Access::kRead, "data");
    Result<Region> r = Status();
    {
      pyb::gil_scoped_release nogil;
      r = e->reg(b.data, b.size);
    }
    Region region = value_or_throw(std::move(r));
    Registration& held = registrations_[region.id];
    held.region = region;
    held.owners.push_back(Owner{b.keep, b.read_only});  // counted like the registration
    if (!b.read_only.empty()) ++read_only_owners_;
    return region;
  }

  void dereg(pyb::handle region_arg) {
    Region region = region_from(region_arg, "region");
    auto e = get();
    Status s;
    {
      pyb::gil_scoped_release nogil;
      s = e->dereg(region);  // waits for bytes landing in it right now
    }
    throw_if_error(s);
    auto it = registrations_.find(region.id);
    if (it != registrations_.end()) {
      if (!it->second.owners.back().read_only.empty()) --read_only_owners_;
      it->second.owners.pop_back();
      if (it->second.owners.empty()) registrations_.erase(it);
    }
  }

  // A peer given an export may write into it, and ferry's descriptors carry
  // no access mode: memory Python holds immutable (bytes, a read-only view
  // or array) is refused here rather than changed behind Python's back.
  RemoteDescriptor export_region(pyb::handle region_arg, pyb::handle offset, pyb::handle length) {
    Region region = region_from(region_arg, "region");
    auto it = registrations_.find(region.id);
    if (it != registrations_.end()) {
      std::string kind = read_only_kind(it->second);
      if (!kind.empty()) {
        throw StatusError(Status(Code::kInvalidArgument,
                                 "export_region: region " + std::to_string(region.id) + " is read-only (" + kind +
                                     "): a peer could write into its export; register a writable buffer "
                                     "(bytearray, a writable NumPy array, ...) to export it"));
      }
    }
    return value_or_throw(get()->export_region(region, count_from(offset, "offset"), count_from(length, "length")));
  }

  // Refuses a destination (recv, read) that overlaps memory registered from
  // a read-only object, however the caller names it (the object, or its
  // address). Costs nothing while no read-only object is registered.
  void check_destination(const BufferArg& b, const std::string& what) const {
    if (read_only_owners_ == 0 || b.size == 0) return;
    auto lo = reinterpret_cast<uintptr_t>(b.data), hi = lo + b.size;
    for (const auto& [id, held] : registrations_) {
      auto base = reinterpret_cast<uintptr_t>(held.region.base), end = base + held.region.length;
      if (hi <= base || lo >= end) continue;
      std::string kind = read_only_kind(held);
      if (kind.empty()) continue;
      throw StatusError(Status(Code::kInvalidArgument, "argument '" + what + "': its memory is in region " +
                                                           std::to_string(id) + ", registered from a read-only " +
                                                           kind + "; a destination must be writable"));
    }
  }

  // Dials until `deadline` while the address refuses (the peer may not be
  // listening yet); any other failure, or the deadline, ends it.
  PyConnection connect(pyb::object self, const std::string& peer, const Timeout& timeout) {
    auto e = get();
    int refusals = 0;
    StillWaiting still(timeout.deadline, "connect: still trying to reach " + printable_peer(peer));
    for (;;) {
      still.check();
      Result<std::shared_ptr<Connection>> r = dial(e, peer, timeout.deadline);
      if (r.ok()) return PyConnection{std::move(r).value(), std::move(self)};
      bool refused = r.status().code() == Code::kUnavailable &&
                     r.status().message().find("Connection refused") != std::string::npos;
      Deadline retry_at = Clock::now() + kConnectRetry;
      if (!refused || retry_at >= timeout.deadline) {
        Status s = r.status();
        if (refusals > 0) {
          s = s.with_context("refused " + std::to_string(refusals + 1) + " times until the deadline");
        }
        throw_if_error(s);
      }
      ++refusals;
      wait_in_slices(retry_at, [&](Deadline d) {
        std::this_thread::sleep_until(d);
        return false;
      });
    }
  }

  Notification wait_notification(const Timeout& timeout) {
    auto e = get();
    Result<Notification> r = Status(Code::kDeadlineExceeded, "no notification by the deadline");
    wait_in_slices(timeout.deadline, [&](Deadline d) {
      r = closed_.load() ? Result<Notification>(Status(Code::kCancelled, "the engine was closed"))
                         : e->wait_notification(d);
      return r.ok() || r.status().code() != Code::kDeadlineExceeded;
    });
    if (!r.ok() && r.status().code() == Code::kDeadlineExceeded) {
      throw StatusError(
          Status(Code::kDeadlineExceeded, "wait_notification: no notification from any peer of " + e->address() +
                                              " by the deadline"));
    }
    return value_or_throw(std::move(r));
  }

  PyConnection accept(pyb::object self, const Timeout& timeout) {
    auto e = get();
    Deadline deadline = timeout.deadline;
    Result<std::shared_ptr<Connection>> r = Status(Code::kDeadlineExceeded, "accept: no peer by the deadline");
    StillWaiting still(deadline, "accept: still waiting for a peer to connect to " + e->address());
    wait_in_slices(deadline, [&](Deadline d) {
      if (closed_.load()) {
        r = Status(Code::kCancelled, "accept: the engine was closed");
        return true;
      }
      still.check();
      r = e->accept(d);
      return r.ok() || r.status().code() != Code::kDeadlineExceeded;
    });
    if (!r.ok() && r.status().code() == Code::kDeadlineExceeded) {
      throw StatusError(
          Status(Code::kDeadlineExceeded, "accept: no peer connected to " + e->address() + " by the deadline"));
    }
    return PyConnection{value_or_throw(std::move(r)), std::move(self)};
  }

 private:
  // A wait with no deadline says once, after kStillWaitingAfter, that it is
  // still waiting (timeout=None waits for ever): a silent hang is the worst
  // first experience.
  class StillWaiting {
   public:
    StillWaiting(Deadline deadline, std::string what)
        : since_(Clock::now()), forever_(deadline == kNoDeadline), what_(std::move(what)) {}
    // Any thread state: takes the GIL to log (the `ferry` logger).
    void check() {
      if (!forever_ || said_ || Clock::now() - since_ < kStillWaitingAfter) return;
      said_ = true;
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - since_).count();
      pyb::gil_scoped_acquire gil;
      pyb::module_::import("logging")
          .attr("getLogger")("ferry")
          .attr("warning")("%s after %d s (timeout=None waits for ever; pass timeout= to give up)", what_,
                           static_cast<long long>(waited));
    }

   private:
    static constexpr auto kStillWaitingAfter = std::chrono::seconds(5);
    const Clock::time_point since_;
    const bool forever_;
    const std::string what_;
    bool said_ = false;
  };
  // `peer` for a log line: a metadata blob is bytes, not text.
  static std::string printable_peer(const std::string& peer) {
    return peer.rfind("FRYM", 0) == 0 ? "the engine of a metadata blob" : peer;
  }

  // Pause between dials of an address that refused.
  static constexpr std::chrono::milliseconds kConnectRetry{100};

  // One dial. It cannot be cut into slices, so it runs on a helper thread
  // while this one waits in slices; after a Ctrl-C the helper finishes alone
  // and the connection it may make is closed by the engine (nobody holds it).
  static Result<std::shared_ptr<Connection>> dial(const std::shared_ptr<Engine>& e, const std::string& peer,
                                                  Deadline deadline) {
    struct Call {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      Result<std::shared_ptr<Connection>> result = Status(Code::kInternal, "connect did not run");
    };
    auto call = std::make_shared<Call>();
    std::thread helper;
    try {
      helper = std::thread([e, peer, deadline, call] {
        pthread_setname_np(pthread_self(), "ferry-py-connect");
        auto r = e->connect(peer, deadline);
        std::lock_guard lock(call->mu);
        call->result = std::move(r);
        call->done = true;
        call->cv.notify_all();
      });
    } catch (const std::system_error& err) {
      // Out of threads: a ferry error like the engine's own, not a RuntimeError.
      return Status(Code::kResourceExhausted, std::string("connect: cannot start a thread: ") + err.what());
    }
    helper.detach();
    // The helper honours `deadline` itself; wait for its answer.
    wait_in_slices(kNoDeadline, [&](Deadline d) {
      std::unique_lock lock(call->mu);
      return call->cv.wait_until(lock, d, [&] { return call->done; });
    });
    std::lock_guard lock(call->mu);
    return std::move(call->result);
  }

  void shutdown(bool may_release_gil) {
    closed_.store(true);
    if (!engine_) return;
    std::shared_ptr<Engine> e = std::move(engine_);
    engine_.reset();
    if (may_release_gil) {
      // Calls in other threads see closed_ within a slice and drop their copies.
      pyb::gil_scoped_release nogil;
      auto until = Clock::now() + std::chrono::seconds(2);
      while (e.use_count() > 1 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    bool last = e.use_count() == 1;
    if (may_release_gil) {
      pyb::gil_scoped_release nogil;
      e.reset();  // closes every connection and joins the engine's threads
    } else {
      e.reset();  // ferry's threads never take the GIL, so holding it is safe
    }
    if (last) {
      registrations_.clear();
    } else {
      // Someone (a connect still dialing) holds the engine: its connections
      // may still land bytes, so the registered memory must outlive it.
      static auto* leaked = new std::vector<pyb::object>();
      for (auto& [id, held] : registrations_)
        for (auto& o : held.owners) leaked->push_back(std::move(o.keep));
      registrations_.clear();
    }
    read_only_owners_ = 0;
  }

  // One registration's Python owner (None for an address) and, for a
  // read-only object, its type.
  struct Owner {
    pyb::object keep;
    std::string read_only;
  };
  // A region and its registrations, in order (dereg drops the last).
  struct Registration {
    Region region;
    std::vector<Owner> owners;
  };

  // The type of a read-only object this region was registered from, "" if
  // none: one such registration makes the memory read-only, whatever else
  // was registered over it.
  static std::string read_only_kind(const Registration& held) {
    for (const Owner& o : held.owners)
      if (!o.read_only.empty()) return o.read_only;
    return {};
  }

  std::shared_ptr<Engine> engine_;
  std::atomic<bool> closed_{false};
  // Python owners of registered memory, kept alive while registered. Only
  // touched with the GIL held.
  std::unordered_map<uint64_t, Registration> registrations_;
  size_t read_only_owners_ = 0;  // owners with read_only set, over all regions
};

}  // namespace

void check_destination(pyb::handle engine, const BufferArg& b, const std::string& what) {
  engine.cast<const PyEngine&>().check_destination(b, what);
}

void bind_engine(pyb::module_& m) {
  bind_options(m);
  bind_memory(m);

  pyb::class_<Notification>(m, "Notification", "A notification from the engine-wide stream: who sent it, and what.")
      .def_readonly("connection_id", &Notification::connection_id, "Connection.id of the connection it came on.")
      .def_readonly("peer_engine_id", &Notification::peer_engine_id, "The sender's engine id.")
      .def_property_readonly(
          "peer_address", [](const Notification& n) { return text_to_python(n.peer_address); },
          "The sender's end of that connection.")
      .def_property_readonly(
          "message", [](const Notification& n) { return pyb::bytes(n.message); }, "The notification (bytes).")
      .def("__repr__", [](const Notification& n) {
        return text_to_python("<ferry.Notification connection=" + std::to_string(n.connection_id) + " from " +
                              n.peer_address + " (" + std::to_string(n.message.size()) + " bytes)>");
      });

  pyb::class_<ferry::Note>(m, "Note",
                          "A notification as Connection.wait_note gives it: the message, and whether the write that "
                          "carried it was delivered.")
      .def_property_readonly(
          "message", [](const ferry::Note& n) { return pyb::bytes(n.message); }, "The notification (bytes).")
      .def_readonly("delivered", &ferry::Note::delivered,
                    "False: the write that carried it failed or was cancelled, and none of its bytes land here "
                    "any more (which landed before is unspecified).")
      .def("__repr__", [](const ferry::Note& n) {
        return text_to_python(std::string("<ferry.Note ") + (n.delivered ? "delivered" : "not delivered") + " (" +
                              std::to_string(n.message.size()) + " bytes)>");
      });

  pyb::class_<PyEngine>(m, "Engine",
                        "The process's transfer engine: registers memory, listens for peers, connects. "
                        "Thread-safe. Every blocking call releases the GIL and can be interrupted with Ctrl-C.")
      .def(pyb::init<const Options&>(), pyb::arg("options") = Options(),
           "Starts an engine with `options`, overridden by FERRY_* environment variables. Raises "
           "InvalidArgument for bad options, Unavailable if it cannot listen.")
      .def_property_readonly(
          "id", [](const PyEngine& e) { return e.get()->id(); }, "Random 64-bit id, fresh for each engine.")
      .def_property_readonly(
          "address", [](const PyEngine& e) { return e.get()->address(); }, "'host:port' peers can connect to.")
      .def_property_readonly(
          "metadata", [](const PyEngine& e) { return pyb::bytes(e.get()->metadata()); },
          "Bytes with everything a peer needs to connect; connect() accepts them in place of an address.")
      .def_property_readonly(
          "options", [](const PyEngine& e) { return e.get()->options(); },
          "A copy of the options in force (after the environment).")
      .def_property_readonly("closed", &PyEngine::closed)
      .def_property_readonly(
          "name", [](const PyEngine& e) { return e.get()->name(); },
          "The name this engine publishes in its directory ('' without one).")
      .def_property_readonly(
          "incarnation", [](const PyEngine& e) { return e.get()->incarnation(); },
          "This start's incarnation in the directory (0 without one).")
      .def_property_readonly(
          "directory",
          [](pyb::object self) {
            PyDirectory d;
            d.engine = [self] { return self.cast<const PyEngine&>().get(); };
            return d;
          },
          "The engine's ferry.Directory (lookup, list, watch); raises InvalidArgument on use without one.")
      .def("reg", &PyEngine::reg, pyb::arg("data"), pyb::arg("size") = pyb::none(),
           "Registers memory: a buffer, NumPy array or tensor (size defaults to all of it), or an address (int) "
           "with `size`. Detects host, pinned host or CUDA memory. Registering the same range again returns the "
           "same region (counted). The object is kept alive until dereg. Read-only memory (bytes, a read-only "
           "memoryview or NumPy array) may be registered as a source: it cannot be exported, and no receive or "
           "read lands in it. Raises InvalidArgument for a null address or zero size.")
      .def("dereg", &PyEngine::dereg, pyb::arg("region"),
           "Drops one registration of `region`; on the last one revokes its exports. Blocks until bytes landing "
           "in it at that instant are in. Raises NotFound if it is not registered.")
      .def("export_region", &PyEngine::export_region, pyb::arg("region"), pyb::arg("offset") = 0,
           pyb::arg("length") = 0,
           "Exports [offset, offset+length) of `region` (length 0: to the end) for one-sided access; returns a "
           "RemoteDescriptor. Raises NotFound or OutOfRange, or InvalidArgument when the region was registered "
           "from a read-only object (a peer could write into the export).")
      .def(
          "connect",
          [](pyb::object self, const Peer& peer, const Timeout& timeout) {
            return self.cast<PyEngine&>().connect(self, peer.value, timeout);
          },
          pyb::arg("peer"), pyb::arg("timeout") = pyb::none(),
          "Connects to `peer` ('host:port', another engine's metadata bytes, or a name in the engine's "
          "directory), waiting at most `timeout` seconds (None: no deadline). An address that refuses (nobody "
          "listens there yet) is dialed again every 0.1 s until the deadline; with no deadline, until one "
          "answers or Ctrl-C. Blocks, GIL released. Raises Unavailable (refused until the deadline, or "
          "unreachable), Unauthenticated if the shared secret differs, DeadlineExceeded; for a name also "
          "NotFound (no such name) and DataLoss (a malformed entry).")
      .def(
          "accept",
          [](pyb::object self, const Timeout& timeout) { return self.cast<PyEngine&>().accept(self, timeout); },
          pyb::arg("timeout") = pyb::none(),
          "Waits for the next peer that connected to this engine (None: no deadline). Raises DeadlineExceeded, "
          "or Cancelled when the engine closes.")
      .def("wait_notification", &PyEngine::wait_notification, pyb::arg("timeout") = pyb::none(),
           "The next notification from any connection of this engine, as a ferry.Notification (connection_id, "
           "peer_engine_id, peer_address, message): one stream for a server with many peers, served in turn. "
           "Each connection's notifications keep their order; each is taken once, here or by that connection's "
           "own wait_notification/poll_notification. Blocks for `timeout` seconds at most (None: no deadline), "
           "GIL released, Ctrl-C raises KeyboardInterrupt. Raises DeadlineExceeded, or Cancelled once the engine "
           "closes.")
      .def(
          "_set_notification_waker",
          [](PyEngine& e, std::shared_ptr<Waker> waker) {
            if (waker) {
              e.get()->set_notification_listener([waker] { waker->signal(); });
            } else {
              e.get()->set_notification_listener(nullptr);
            }
          },
          pyb::arg("waker"),
          "Signals the ferry._Waker (None: stops) when any connection queues a notification or the engine "
          "closes (ferry.aio).")
      .def(
          "poll_notification",
          [](PyEngine& e) -> pyb::object {
            auto n = e.get()->poll_notification();
            if (!n) return pyb::none();
            return pyb::cast(std::move(*n));
          },
          "Non-blocking: the next ferry.Notification from any connection, or None.")
      .def(
          "metrics",
          [](const PyEngine& e) {
            MetricsSnapshot m = e.get()->metrics();
            pyb::dict transfers;
            for (const auto& [key, c] : m.transfers) {
              pyb::dict d;
              d["succeeded"] = c.succeeded;
              d["failed"] = c.failed;
              d["bytes"] = c.bytes;
              d["seconds_sum"] = c.seconds_sum;
              d["within"] = c.within;
              transfers[pyb::make_tuple(key.first, key.second)] = d;
            }
            pyb::dict peers;
            for (const auto& [key, c] : m.peers) {
              pyb::dict d;
              d["succeeded"] = c.succeeded;
              d["failed"] = c.failed;
              d["bytes"] = c.bytes;
              peers[pyb::make_tuple(key.first, key.second)] = d;
            }
            pyb::dict nics;
            for (const auto& [nic, b] : m.nics) {
              pyb::dict d;
              d["sent"] = b.sent;
              d["received"] = b.received;
              nics[pyb::str(nic)] = d;
            }
            pyb::dict staging;
            for (const auto& [direction, c] : m.staging) {
              pyb::dict d;
              d["chunks"] = c.chunks;
              d["bytes"] = c.bytes;
              d["seconds"] = c.seconds;
              staging[pyb::str(direction)] = d;
            }
            pyb::dict out;
            out["transfers"] = transfers;
            out["peers"] = peers;
            out["nics"] = nics;
            out["staging"] = staging;
            out["latency_bounds"] = MetricsSnapshot::latency_bounds();
            out["failures"] = m.failures;
            out["connections"] = m.connections;
            out["connections_failed"] = m.connections_failed;
            out["gpu_objects_made_late"] = m.gpu_objects_made_late;
            out["handshakes_refused"] = m.handshakes_refused;
            out["paths_lost"] = m.paths_lost;
            pyb::dict resent;
            for (const auto& [transport, c] : m.resent) {
              pyb::dict d;
              d["chunks"] = c.chunks;
              d["bytes"] = c.bytes;
              resent[pyb::str(transport)] = d;
            }
            out["resent"] = resent;
            out["held_bytes"] = m.held_bytes;
            out["held_bytes_peak"] = m.held_bytes_peak;
            return out;
          },
          "What the engine has done, as a dict: 'transfers' by (operation, transport) with 'succeeded', "
          "'failed', 'bytes', 'seconds_sum' and 'within' (transfers that took at most each of "
          "'latency_bounds' seconds, cumulative); 'peers' by (peer address, operation) with 'succeeded', "
          "'failed' and 'bytes', for the connections held now; 'nics': bytes 'sent' and 'received' by the TCP data "
          "streams of each local NIC ('any': no named NIC); 'staging': GPU memory staged through pinned slots over TCP, "
          "'chunks', 'bytes' and 'seconds' by direction ('to_host', 'to_device'); 'failures' by status code name; 'connections' and "
          "'connections_failed' by transport; 'handshakes_refused' by reason; 'paths_lost' by transport; 'resent': 'chunks' and 'bytes' a lost path "
          "had left unconfirmed, sent again on another path, by transport; "
          "'held_bytes' and 'held_bytes_peak' (held for peers); 'gpu_objects_made_late' (CUDA objects ferry's transfer "
          "threads had to make: 0 after stream waits is healthy). The same numbers as metrics_text().")
      .def_property_readonly(
          "metrics_address", [](const PyEngine& e) { return e.get()->metrics_address(); },
          "host:port where Prometheus scrapes this engine's metrics (metrics_listen), or '' when nothing listens.")
      .def(
          "metrics_text", [](const PyEngine& e) { return prometheus_text(e.get()->metrics()); },
          "engine.metrics() in Prometheus' text exposition format.")
      .def("close", &PyEngine::close,
           "Closes every connection (pending transfers fail with Cancelled), stops listening and joins every "
           "thread. Idempotent.")
      .def("__enter__", [](pyb::object self) { return self; })
      .def("__exit__", [](PyEngine& e, pyb::args) { e.close(); })
      .def("__repr__", [](const PyEngine& e) {
        if (e.closed()) return std::string("<ferry.Engine closed>");
        auto x = e.get();
        return "<ferry.Engine id=" + std::to_string(x->id()) + " address=" + x->address() + ">";
      });
}

}  // namespace ferry::py
