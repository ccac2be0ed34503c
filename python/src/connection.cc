// Connection: every operation, asynchronous (returns a Transfer) and blocking
// (posts, then waits in slices with the GIL released).
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "arguments.h"
#include "bindings.h"
#include "buffers.h"
#include "errors.h"
#include "transfer.h"
#include "waker.h"

namespace ferry::py {
namespace {

std::vector<pyb::object> owners(const std::vector<BufferArg>& bufs) {
  std::vector<pyb::object> keep;
  for (const BufferArg& b : bufs)
    if (!b.keep.is_none()) keep.push_back(b.keep);
  return keep;
}

std::string text(pyb::handle message, const char* what) {
  if (PyBytes_Check(message.ptr())) return std::string(pyb::reinterpret_borrow<pyb::bytes>(message));
  if (PyUnicode_Check(message.ptr())) return message.cast<std::string>();  // UTF-8
  if (PyByteArray_Check(message.ptr())) {
    return std::string(PyByteArray_AsString(message.ptr()), static_cast<size_t>(PyByteArray_Size(message.ptr())));
  }
  throw pyb::type_error(std::string("argument '") + what + "' must be bytes or str");
}

// An operation ready to post: the buffers it uses and how to post it.
struct Posted {
  Transfer transfer;
  std::vector<pyb::object> keep;
};

// `fn(to)` posts on `to`: the connection, or its view ordered after the
// CUDA streams the buffers name (Connection::after_streams).
template <typename PostFn>
Posted post(Connection& conn, const std::vector<BufferArg>& bufs, PostFn&& fn) {
  sweep_graveyard();
  Posted p{Transfer(), owners(bufs)};
  std::vector<CudaStreamRef> streams = streams_of(bufs);
  {
    pyb::gil_scoped_release nogil;  // posting may write a small message to a socket
    if (streams.empty()) {
      p.transfer = fn(conn);
    } else {
      StreamOrdered ordered = conn.after_streams(streams);
      p.transfer = fn(ordered);
    }
  }
  return p;
}

std::unique_ptr<PyTransfer> async(Posted&& p) {
  return std::make_unique<PyTransfer>(std::move(p.transfer), std::move(p.keep));
}

// Blocking form: waits as the C++ blocking call does (`rule`), raises the
// failure, returns the bytes moved. The deadline is computed before posting,
// so a bad timeout posts nothing.
size_t finish(Posted&& p, Deadline deadline, PastDeadline rule) {
  Status s = wait_transfer(p.transfer, deadline, rule, p.keep);
  throw_if_error(s);
  return p.transfer.bytes();
}

// One-sided items: (local, remote, remote_offset[, size]).
struct Item {
  BufferArg local;
  RemoteDescriptor remote;
  uint64_t offset = 0;
};

std::vector<Item> resolve_items(pyb::handle seq, Access access, const char* what, const StreamChoice& order) {
  if (!PySequence_Check(seq.ptr())) throw pyb::type_error(std::string("argument '") + what + "' must be a list");
  pyb::sequence s = pyb::reinterpret_borrow<pyb::sequence>(seq);
  std::vector<Item> out;
  for (size_t i = 0; i < s.size(); ++i) {
    std::string name = std::string(what) + "[" + std::to_string(i) + "]";
    pyb::object e = s[i];
    if (!PyTuple_Check(e.ptr()) || PyTuple_GET_SIZE(e.ptr()) < 2 || PyTuple_GET_SIZE(e.ptr()) > 4) {
      throw pyb::type_error("argument '" + name + "' must be a tuple (local, remote, remote_offset[, size])");
    }
    pyb::tuple t = pyb::reinterpret_borrow<pyb::tuple>(e);
    Item item;
    std::optional<uint64_t> size = t.size() == 4 ? optional_count_from(t[3], name + ".size") : std::nullopt;
    item.local = resolve_buffer(t[0], size, access, name + ".local", order);
    item.remote = remote_from(t[1], name + ".remote");
    item.offset = t.size() >= 3 ? count_from(t[2], name + ".remote_offset") : 0;
    out.push_back(std::move(item));
  }
  return out;
}

std::vector<BufferArg> locals_of(const std::vector<Item>& items) {
  std::vector<BufferArg> out;
  for (const Item& i : items) out.push_back(i.local);
  return out;
}

// ---- the operations, shared by the async and blocking forms -----------------

Posted post_send(PyConnection& c, pyb::handle data, const Size& size, const StreamChoice& order) {
  std::vector<BufferArg> b{resolve_buffer(data, size.value, Access::kRead, "data", order)};
  return post(*c.conn, b, [&](auto& to) { return to.send_async(b[0].data, b[0].size); });
}

Posted post_sendv(PyConnection& c, pyb::handle parts, const StreamChoice& order) {
  std::vector<BufferArg> b = resolve_buffers(parts, Access::kRead, "parts", order);
  std::vector<ConstBuffer> v;
  for (const BufferArg& x : b) v.push_back(ConstBuffer{x.data, x.size});
  return post(*c.conn, b, [&](auto& to) { return to.sendv_async(v); });
}

Posted post_recv(PyConnection& c, pyb::handle data, const Size& size, const StreamChoice& order) {
  std::vector<BufferArg> b{resolve_buffer(data, size.value, Access::kWrite, "data", order)};
  check_destination(c.engine, b[0], "data");
  return post(*c.conn, b, [&](auto& to) { return to.recv_async(b[0].data, b[0].size); });
}

Posted post_recvv(PyConnection& c, pyb::handle parts, const StreamChoice& order) {
  std::vector<BufferArg> b = resolve_buffers(parts, Access::kWrite, "parts", order);
  for (size_t i = 0; i < b.size(); ++i) check_destination(c.engine, b[i], "parts[" + std::to_string(i) + "]");
  std::vector<MutableBuffer> v;
  for (const BufferArg& x : b) v.push_back(MutableBuffer{x.data, x.size});
  return post(*c.conn, b, [&](auto& to) { return to.recvv_async(v); });
}

Posted post_write(PyConnection& c, pyb::handle local, const Remote& remote, const Offset& offset,
                  pyb::handle notification, const Size& size, const StreamChoice& order) {
  std::vector<BufferArg> b{resolve_buffer(local, size.value, Access::kRead, "local", order)};
  std::string note = notification.is_none() ? std::string() : text(notification, "notification");
  return post(*c.conn, b,
              [&](auto& to) { return to.write_async(b[0].data, b[0].size, remote.value, offset.value, note); });
}

Posted post_writev(PyConnection& c, pyb::handle items, pyb::handle notification, const StreamChoice& order) {
  std::vector<Item> it = resolve_items(items, Access::kRead, "items", order);
  std::vector<WriteItem> v;
  for (const Item& i : it) v.push_back(WriteItem{i.local.data, i.local.size, i.remote, i.offset});
  std::string note = notification.is_none() ? std::string() : text(notification, "notification");
  return post(*c.conn, locals_of(it), [&](auto& to) { return to.writev_async(v, note); });
}

// Blocks: a sequence of (local_pool, remote_pool, local_offset,
// remote_offset, size), or a 2-D array of unsigned 64-bit integers with
// five columns in that order (NumPy's uint64, C order).
std::vector<Block> blocks_from(pyb::handle blocks) {
  std::vector<Block> out;
  pyb::buffer_info view;
  if (pyb::isinstance<pyb::buffer>(blocks)) {
    view = pyb::reinterpret_borrow<pyb::buffer>(blocks).request();
    if (view.ndim != 2 || view.shape[1] != 5 || view.itemsize != 8 || (view.format != "Q" && view.format != "L" &&
                                                                         view.format != "<Q" && view.format != "=Q")) {
      throw pyb::type_error("blocks: an array of blocks must be 2-D uint64 with 5 columns (local_pool, remote_pool, "
                            "local_offset, remote_offset, size), not ndim " + std::to_string(view.ndim) +
                            " format '" + view.format + "'");
    }
    if (view.strides[1] != 8 || view.strides[0] != 40) {
      throw pyb::type_error("blocks: the array of blocks must be C-contiguous");
    }
    const auto* v = static_cast<const uint64_t*>(view.ptr);
    for (pyb::ssize_t i = 0; i < view.shape[0]; ++i, v += 5) {
      if (v[0] > UINT32_MAX || v[1] > UINT32_MAX) throw pyb::value_error("blocks: row " + std::to_string(i) + ": pool index too large");
      out.push_back({static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[1]), v[2], v[3], v[4]});
    }
    return out;
  }
  size_t i = 0;
  for (pyb::handle row : pyb::reinterpret_borrow<pyb::iterable>(blocks)) {
    auto t = pyb::reinterpret_borrow<pyb::sequence>(row);
    if (pyb::len(t) != 5) {
      throw pyb::type_error("blocks[" + std::to_string(i) + "]: a block is (local_pool, remote_pool, local_offset, "
                            "remote_offset, size)");
    }
    uint64_t f[5];
    for (size_t k = 0; k < 5; ++k) {
      long long v = t[k].cast<long long>();
      if (v < 0) throw pyb::value_error("blocks[" + std::to_string(i) + "]: negative field");
      f[k] = static_cast<uint64_t>(v);
    }
    if (f[0] > UINT32_MAX || f[1] > UINT32_MAX) throw pyb::value_error("blocks[" + std::to_string(i) + "]: pool index too large");
    out.push_back({static_cast<uint32_t>(f[0]), static_cast<uint32_t>(f[1]), f[2], f[3], f[4]});
    ++i;
  }
  return out;
}

// The pools are registered regions, not buffers: only an explicit stream
// orders a block write.
Posted post_write_blocks(PyConnection& c, pyb::object pools, pyb::handle blocks, pyb::handle notification,
                         const StreamChoice& order) {
  const BlockPools& prepared = pools.cast<const BlockPools&>();
  std::vector<Block> v = blocks_from(blocks);
  std::string note = notification.is_none() ? std::string() : text(notification, "notification");
  BufferArg marker;
  if (order.kind == StreamChoice::Kind::kGiven) {
    marker.stream = order.stream;
    marker.device = order.device;
  }
  Posted p = post(*c.conn, {marker}, [&](auto& to) { return to.write_blocks_async(prepared, v, note); });
  p.keep = {pools};
  return p;
}

Posted post_read(PyConnection& c, pyb::handle local, const Remote& remote, const Offset& offset,
                 const Size& size, const StreamChoice& order) {
  std::vector<BufferArg> b{resolve_buffer(local, size.value, Access::kWrite, "local", order)};
  check_destination(c.engine, b[0], "local");
  return post(*c.conn, b, [&](auto& to) { return to.read_async(b[0].data, b[0].size, remote.value, offset.value); });
}

Posted post_readv(PyConnection& c, pyb::handle items, const StreamChoice& order) {
  std::vector<Item> it = resolve_items(items, Access::kWrite, "items", order);
  for (size_t i = 0; i < it.size(); ++i) {
    check_destination(c.engine, it[i].local, "items[" + std::to_string(i) + "].local");
  }
  std::vector<ReadItem> v;
  for (const Item& i : it) v.push_back(ReadItem{i.local.data, i.local.size, i.remote, i.offset});
  return post(*c.conn, locals_of(it), [&](auto& to) { return to.readv_async(v); });
}

Posted post_notify(PyConnection& c, pyb::handle message) {
  std::string m = text(message, "message");
  sweep_graveyard();
  auto conn = c.conn;
  Posted p{Transfer(), {}};
  {
    pyb::gil_scoped_release nogil;
    p.transfer = conn->notify_async(m);
  }
  return p;
}

// The next value `wait(connection, deadline)` gives (wait_notification or
// wait_note), waited for in slices that let Ctrl-C through.
template <typename T, typename Wait>
T next_notification(PyConnection& c, const Timeout& timeout, Wait wait) {
  Deadline deadline = timeout.deadline;
  auto conn = c.conn;
  Result<T> r = Status(Code::kDeadlineExceeded, "no notification by the deadline");
  bool done = wait_in_slices(deadline, [&](Deadline d) {
    r = wait(*conn, d);
    return r.ok() || r.status().code() != Code::kDeadlineExceeded;
  });
  if (!done) {
    throw StatusError(Status(Code::kDeadlineExceeded, "no notification from connection " + std::to_string(conn->id()) +
                                                          " to " + conn->peer_address() + " by the deadline"));
  }
  return value_or_throw(std::move(r));
}

pyb::bytes wait_notification(PyConnection& c, const Timeout& timeout) {
  return pyb::bytes(next_notification<std::string>(
      c, timeout, [](Connection& conn, Deadline d) { return conn.wait_notification(d); }));
}

ferry::Note wait_note(PyConnection& c, const Timeout& timeout) {
  return next_notification<ferry::Note>(c, timeout,
                                        [](Connection& conn, Deadline d) { return conn.wait_note(d); });
}

const char* kTimeoutDoc =
    " Blocks until then or for `timeout` seconds (None: no deadline), with the GIL released; Ctrl-C raises "
    "KeyboardInterrupt. Raises the failure as a ferry.FerryError subclass (PeerLost, NotFound, OutOfRange, "
    "BufferTooSmall, ...), DeadlineExceeded at the deadline, TypeError or ValueError for a bad argument.";

// What a blocking call does past its deadline (Transfer::wait_or_cancel's rules).
const char* kFinishDoc =
    " Past the deadline, one that has not started moving data is cancelled (DeadlineExceeded); one that has is "
    "stopped over TCP (a receive first gets half of peer_timeout to finish; DeadlineExceeded once none of it lands "
    "any more) or, on the local transport, runs to its end and its own result is returned: the buffers are free "
    "once the call returns.";
const char* kLeaveDoc =
    " At the deadline raises DeadlineExceeded and the operation goes on: the message will still be delivered "
    "(once posted it is not withdrawn, so sending it again delivers it twice), and its buffers stay in use until "
    "it ends.";

// What every *_async call shares.
#define ASYNC_DOC                                                                                              \
  " Does not block. A bad argument raises TypeError or ValueError at once; the transfer's own failure is "    \
  "raised by its wait()."

}  // namespace

void bind_connection(pyb::module_& m) {
  using pyb::arg;
  auto none = pyb::none();
  pyb::class_<PyConnection> c(
      m, "Connection",
      "A bidirectional link to one peer engine; both sides may send, receive, read and write. Thread-safe. "
      "Every local buffer must lie inside memory registered with the local engine (NotFound otherwise, "
      "OutOfRange if it runs past the region). A buffer is a NumPy array, any buffer-protocol object, a torch "
      "tensor (CPU or CUDA), an object with __cuda_array_interface__ or __dlpack__, an (address, size) tuple, "
      "or an address (int) with size=. Buffers must be contiguous; the Transfer keeps them alive.\n\n"
      "CUDA stream order: a transfer of a torch CUDA tensor runs after the work queued on "
      "torch.cuda.current_stream(its device) when the call is made (a source is read after its producer "
      "kernels, a destination written after a fill queued before the receive); an object with "
      "__cuda_array_interface__ follows the stream it names, a CUDA DLPack producer the legacy default stream. "
      "The call never waits for the GPU: the transfer is held until the stream gets there. stream= overrides "
      "it (a torch/CuPy stream or a cudaStream_t), stream=None turns it off. Work queued after the call is "
      "not ordered after the transfer: wait for it (a blocking call returns once the bytes are in place), or "
      "queue stream_wait(transfer, stream).");
  std::string t = kTimeoutDoc;
  std::string finish_t = t + kFinishDoc, leave_t = t + kLeaveDoc;

  // two-sided
  c.def(
      "send_async", [](PyConnection& c, pyb::handle data, const Size& size, pyb::handle stream) {
        return async(post_send(c, data, size, stream_choice(stream)));
      },
      arg("data"), arg("size") = none, pyb::kw_only(), arg("stream") = "auto",
      "Sends `size` bytes of `data` (default: all of it) as one message; finishes when the peer's matching "
      "receive holds them. Returns a Transfer." ASYNC_DOC);
  c.def(
      "send",
      [](PyConnection& c, pyb::handle data, const Size& size, const Timeout& timeout, pyb::handle stream) {
        Deadline deadline = timeout.deadline;
        finish(post_send(c, data, size, stream_choice(stream)), deadline, PastDeadline::kLeave);
      },
      arg("data"), arg("size") = none, pyb::kw_only(), arg("timeout") = none, arg("stream") = "auto",
      ("Blocking send_async: returns once the peer holds the message." + leave_t).c_str());
  c.def(
      "sendv_async",
      [](PyConnection& c, pyb::handle parts, pyb::handle stream) {
        return async(post_sendv(c, parts, stream_choice(stream)));
      },
      arg("parts"), pyb::kw_only(), arg("stream") = "auto",
      "Sends the concatenation of `parts` (a list of buffers) as one message. Returns a Transfer." ASYNC_DOC);
  c.def(
      "sendv",
      [](PyConnection& c, pyb::handle parts, const Timeout& timeout, pyb::handle stream) {
        Deadline deadline = timeout.deadline;
        finish(post_sendv(c, parts, stream_choice(stream)), deadline, PastDeadline::kLeave);
      },
      arg("parts"), pyb::kw_only(), arg("timeout") = none, arg("stream") = "auto", ("Blocking sendv_async." + leave_t).c_str());
  c.def(
      "recv_async", [](PyConnection& c, pyb::handle data, const Size& size, pyb::handle stream) {
        return async(post_recv(c, data, size, stream_choice(stream)));
      },
      arg("data"), arg("size") = none, pyb::kw_only(), arg("stream") = "auto",
      "Receives the next message into `data` (at most `size` bytes; default all of it; must be writable). "
      "Transfer.bytes is the message size. A message larger than the buffer fails both sides with "
      "BufferTooSmall and the message is dropped (probe() first to learn its size). Returns a Transfer." ASYNC_DOC);
  c.def(
      "recv",
      [](PyConnection& c, pyb::handle data, const Size& size, const Timeout& timeout, pyb::handle stream) {
        Deadline deadline = timeout.deadline;
        return finish(post_recv(c, data, size, stream_choice(stream)), deadline, PastDeadline::kCancelOrFinish);
      },
      arg("data"), arg("size") = none, pyb::kw_only(), arg("timeout") = none, arg("stream") = "auto",
      ("Blocking recv_async; returns the message size." + finish_t)
          .c_str());
  c.def(
      "recvv_async",
      [](PyConnection& c, pyb::handle parts, pyb::handle stream) {
        return async(post_recvv(c, parts, stream_choice(stream)));
      },
      arg("parts"), pyb::kw_only(), arg("stream") = "auto",
      "Receives the next message scattered over `parts`, in order. Returns a Transfer." ASYNC_DOC);
  c.def(
      "recvv",
      [](PyConnection& c, pyb::handle parts, const Timeout& timeout, pyb::handle stream) {
        Deadline deadline = timeout.deadline;
        return finish(post_recvv(c, parts, stream_choice(stream)), deadline, PastDeadline::kCancelOrFinish);
      },
      arg("parts"), pyb::kw_only(), arg("timeout") = none, arg("stream") = "auto",
      ("Blocking recvv_async; returns the message size." + finish_t).c_str());

  c.def(
      "probe",
      [](PyConnection& c, const Timeout& timeout) -> uint64_t {
        auto conn = c.conn;
        Result<uint64_t> r = Status(Code::kDeadlineExceeded, "probe: no message by the deadline");
        bool done = wait_in_slices(timeout.deadline, [&](Deadline d) {
          r = conn->probe(d);
          return r.ok() || r.status().code() != Code::kDeadlineExceeded;
        });
        if (!done) {
          throw StatusError(Status(Code::kDeadlineExceeded, "probe: no message from connection " +
                                                                std::to_string(conn->id()) + " to " +
                                                                conn->peer_address() + " by the deadline"));
        }
        return value_or_throw(std::move(r));
      },
      pyb::kw_only(), arg("timeout") = none,
      ("Waits until a message that no posted receive took has arrived and returns its size, without taking "
       "it: the next recv gets it. Size the buffer with it: a recv into a buffer too small fails both ends "
       "with BufferTooSmall and the message is gone. A receive posted meanwhile takes the message first." +
       t)
          .c_str());

  // one-sided
  c.def(
      "write_async",
      [](PyConnection& c, pyb::handle local, const Remote& remote, const Offset& offset, pyb::handle note,
         const Size& size, pyb::handle stream) {
        return async(post_write(c, local, remote, offset, note, size, stream_choice(stream)));
      },
      arg("local"), arg("remote"), arg("remote_offset") = 0, arg("notification") = none, pyb::kw_only(),
      arg("size") = none, arg("stream") = "auto",
      "Writes `local` into the peer's exported memory `remote` at `remote_offset`. A notification (bytes or "
      "str, at most 60 KiB) reaches the peer after the data is in place. Returns a Transfer." ASYNC_DOC);
  c.def(
      "write",
      [](PyConnection& c, pyb::handle local, const Remote& remote, const Offset& offset, pyb::handle note,
         const Size& size, const Timeout& timeout, pyb::handle stream) {
        Deadline deadline = timeout.deadline;
        finish(post_write(c, local, remote, offset, note, size, stream_choice(stream)), deadline,
               PastDeadline::kCancelOrFinish);
      },
      arg("local"), arg("remote"), arg("remote_offset") = 0, arg("notification") = none, pyb::kw_only(),
      arg("size") = none, arg("timeout") = none, arg("stream") = "auto",
      ("Blocking write_async: returns once the bytes are in the peer's memory." + finish_t).c_str());
  c.def(
      "writev_async",
      [](PyConnection& c, pyb::handle items, pyb::handle note, pyb::handle stream) {
        return async(post_writev(c, items, note, stream_choice(stream)));
      },
      arg("items"), arg("notification") = none, pyb::kw_only(), arg("stream") = "auto",
      "Writes every (local, remote, remote_offset[, size]) item; the notification follows once all are in place. "
      "Returns a Transfer." ASYNC_DOC);
  c.def(
      "writev",
      [](PyConnection& c, pyb::handle items, pyb::handle note, const Timeout& timeout, pyb::handle stream) {
        Deadline deadline = timeout.deadline;
        finish(post_writev(c, items, note, stream_choice(stream)), deadline, PastDeadline::kCancelOrFinish);
      },
      arg("items"), arg("notification") = none, pyb::kw_only(), arg("timeout") = none, arg("stream") = "auto",
      ("Blocking writev_async." + finish_t).c_str());
  pyb::class_<BlockPools>(m, "BlockPools",
                          "Local regions and the peer's exports checked once (Connection.prepare_blocks), for "
                          "write_blocks on that connection.")
      .def_property_readonly("local_pools", &BlockPools::local_pools)
      .def_property_readonly("remote_pools", &BlockPools::remote_pools);
  c.def(
      "prepare_blocks",
      [](PyConnection& c, const std::vector<Region>& local, pyb::sequence remote) {
        std::vector<RemoteDescriptor> r;
        for (size_t i = 0; i < pyb::len(remote); ++i) r.push_back(remote_from(remote[i], "remote[" + std::to_string(i) + "]"));
        Result<BlockPools> p = c.conn->prepare_blocks(local, r);
        throw_if_error(p.status());
        return std::move(p).value();
      },
      arg("local"), arg("remote"),
      "Checks `local` (Regions of this engine, from Engine.reg) and `remote` (the peer's RemoteDescriptors or "
      "their bytes) once, for write_blocks: a KV cache's pools.");
  c.def(
      "write_blocks_async",
      [](PyConnection& c, pyb::object pools, pyb::handle blocks, pyb::handle note, pyb::handle stream) {
        return async(post_write_blocks(c, std::move(pools), blocks, note, stream_choice(stream)));
      },
      arg("pools"), arg("blocks"), arg("notification") = none, pyb::kw_only(), arg("stream") = none,
      "Writes `blocks` between prepared pools as one operation: (local_pool, remote_pool, local_offset, "
      "remote_offset, size) tuples, or a (n, 5) uint64 NumPy array; the notification follows once every block "
      "is in place. Returns a Transfer." ASYNC_DOC);
  c.def(
      "write_blocks",
      [](PyConnection& c, pyb::object pools, pyb::handle blocks, pyb::handle note, const Timeout& timeout,
         pyb::handle stream) {
        Deadline deadline = timeout.deadline;
        finish(post_write_blocks(c, std::move(pools), blocks, note, stream_choice(stream)), deadline,
               PastDeadline::kCancelOrFinish);
      },
      arg("pools"), arg("blocks"), arg("notification") = none, pyb::kw_only(), arg("timeout") = none,
      arg("stream") = none,
      ("Blocking write_blocks_async." + finish_t).c_str());
  c.def(
      "read_async",
      [](PyConnection& c, pyb::handle local, const Remote& remote, const Offset& offset, const Size& size,
         pyb::handle stream) { return async(post_read(c, local, remote, offset, size, stream_choice(stream))); },
      arg("local"), arg("remote"), arg("remote_offset") = 0, pyb::kw_only(), arg("size") = none,
      arg("stream") = "auto",
      "Reads the peer's exported memory `remote` at `remote_offset` into `local` (writable). Returns a Transfer." ASYNC_DOC);
  c.def(
      "read",
      [](PyConnection& c, pyb::handle local, const Remote& remote, const Offset& offset, const Size& size,
         const Timeout& timeout, pyb::handle stream) {
        Deadline deadline = timeout.deadline;
        finish(post_read(c, local, remote, offset, size, stream_choice(stream)), deadline,
               PastDeadline::kCancelOrFinish);
      },
      arg("local"), arg("remote"), arg("remote_offset") = 0, pyb::kw_only(), arg("size") = none, arg("timeout") = none,
      arg("stream") = "auto",
      ("Blocking read_async." + finish_t).c_str());
  c.def(
      "readv_async",
      [](PyConnection& c, pyb::handle items, pyb::handle stream) {
        return async(post_readv(c, items, stream_choice(stream)));
      },
      arg("items"), pyb::kw_only(), arg("stream") = "auto",
      "Reads every (local, remote, remote_offset[, size]) item. Returns a Transfer." ASYNC_DOC);
  c.def(
      "readv",
      [](PyConnection& c, pyb::handle items, const Timeout& timeout, pyb::handle stream) {
        Deadline deadline = timeout.deadline;
        finish(post_readv(c, items, stream_choice(stream)), deadline, PastDeadline::kCancelOrFinish);
      },
      arg("items"), pyb::kw_only(), arg("timeout") = none, arg("stream") = "auto", ("Blocking readv_async." + finish_t).c_str());

  // notifications
  c.def(
      "notify_async", [](PyConnection& c, pyb::handle message) { return async(post_notify(c, message)); },
      arg("message"), "Sends a standalone notification (bytes or str); finishes when the peer has queued it. Returns a "
      "Transfer." ASYNC_DOC);
  c.def(
      "notify",
      [](PyConnection& c, pyb::handle message, const Timeout& timeout) {
        Deadline deadline = timeout.deadline;
        finish(post_notify(c, message), deadline, PastDeadline::kLeave);
      },
      arg("message"), pyb::kw_only(), arg("timeout") = none, ("Blocking notify_async." + leave_t).c_str());
  c.def("wait_notification", &wait_notification, arg("timeout") = none,
        ("Returns the next notification from this peer (bytes), in the order they were sent. Raises "
         "DeadlineExceeded, or the connection's failure." +
         t)
            .c_str());
  c.def(
      "poll_notification",
      [](PyConnection& c) -> pyb::object {
        auto n = c.conn->poll_notification();
        if (!n) return pyb::none();
        return pyb::bytes(*n);
      },
      "Non-blocking: the next notification (bytes), or None.");

  c.def("wait_note", &wait_note, arg("timeout") = none,
        ("As wait_notification, and also the notifications of writes aimed here that failed or were cancelled: "
         "returns a ferry.Note (message, delivered), in the order the writes were posted. delivered False: no "
         "byte of that write lands here any more, its blocks may be reused. Raises DeadlineExceeded, or the "
         "connection's failure." +
         t)
            .c_str());
  c.def(
      "poll_note",
      [](PyConnection& c) -> pyb::object {
        auto n = c.conn->poll_note();
        if (!n) return pyb::none();
        return pyb::cast(std::move(*n));
      },
      "Non-blocking: the next ferry.Note, or None.");
  c.def(
      "_set_notification_waker",
      [](PyConnection& c, std::shared_ptr<Waker> waker) {
        if (waker) {
          c.conn->set_notification_listener([waker] { waker->signal(); });
        } else {
          c.conn->set_notification_listener(nullptr);
        }
      },
      arg("waker"),
      "Signals the ferry._Waker (None: stops) when a notification is queued or the connection ends (ferry.aio).");

  // lifecycle
  c.def(
      "close",
      [](PyConnection& c) {
        auto conn = c.conn;
        pyb::gil_scoped_release nogil;
        conn->close();
      },
      "Fails pending transfers with Cancelled, tells the peer, and joins the connection's threads. Idempotent.");
  c.def(
      "health", [](PyConnection& c) { return c.conn->health(); },
      "ferry.Status: OK while usable; afterwards the reason (PEER_LOST, CANCELLED, ...).");
  c.def_property_readonly(
      "id", [](PyConnection& c) { return c.conn->id(); }, "Engine-unique id of this connection.");
  c.def_property_readonly(
      "peer_engine_id", [](PyConnection& c) { return c.conn->peer_engine_id(); }, "The peer engine's id.");
  c.def_property_readonly(
      "peer_address", [](PyConnection& c) { return text_to_python(c.conn->peer_address()); },
      "'ip:port' of the peer's end of the control stream.");
  c.def_property_readonly(
      "transport_name", [](PyConnection& c) { return std::string(c.conn->transport_name()); }, "'tcp' or 'local'.");
  c.def_property_readonly(
      "engine", [](PyConnection& c) { return c.engine; }, "The local Engine.");
  c.def(
      "stream_wait",
      [](PyConnection& c, const PyTransfer& transfer, pyb::handle stream) {
        StreamChoice order = stream_choice(stream);
        if (order.kind != StreamChoice::Kind::kGiven) {
          throw pyb::type_error("argument 'stream': a cudaStream_t (int) or a stream object, not \"auto\" or None");
        }
        throw_if_error(c.conn->stream_wait(transfer.transfer(), CudaStreamRef{reinterpret_cast<void*>(order.stream),
                                                                             order.device}));
      },
      arg("transfer"), arg("stream"),
      "Makes CUDA `stream` (torch.cuda.Stream, cupy.cuda.Stream or a cudaStream_t) wait, on the GPU, until "
      "`transfer` finishes, successfully or not (check transfer.wait() before trusting the bytes): a kernel that "
      "consumes a receive can be queued without waiting on the host (a kernel never launched before waits on the "
      "host while the stream waits: CUDA loads kernels lazily). Keep the buffers alive until the transfer "
      "finishes. Raises Unimplemented without a CUDA driver with stream memory operations.");
  c.def_readonly_static("MAX_NOTIFICATION", &Connection::kMaxNotification);
  c.def("__enter__", [](pyb::object self) { return self; });
  c.def("__exit__", [](PyConnection& c, pyb::args) {
    auto conn = c.conn;
    pyb::gil_scoped_release nogil;
    conn->close();
  });
  c.def("__repr__", [](PyConnection& c) {
    return text_to_python("<ferry.Connection id=" + std::to_string(c.conn->id()) + " peer=" + c.conn->peer_address() +
                          " " + c.conn->health().to_string() + ">");
  });
}

}  // namespace ferry::py
