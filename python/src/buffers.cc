// Buffer resolution: ints, tuples, the buffer protocol, torch tensors,
// __cuda_array_interface__ and DLPack, all without copies.
#include "buffers.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <string>

namespace ferry::py {
namespace {

[[noreturn]] void value_error(const std::string& what, const std::string& why) {
  throw pyb::value_error("argument '" + what + "': " + why);
}

uint64_t to_u64(pyb::handle h, const std::string& what, const char* field) {
  if (PyBool_Check(h.ptr()) || !PyLong_Check(h.ptr())) {
    throw pyb::type_error("argument '" + what + "': " + field + " must be an int, not " +
                          std::string(pyb::str(pyb::type::handle_of(h).attr("__name__"))));
  }
  int overflow = 0;
  long long sign_probe = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow < 0 || (overflow == 0 && sign_probe < 0)) value_error(what, std::string(field) + " is negative");
  unsigned long long v = PyLong_AsUnsignedLongLong(h.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    value_error(what, std::string(field) + " does not fit in 64 bits");
  }
  return v;
}

// Applies the caller's size to an object of `nbytes` bytes.
size_t pick_size(std::optional<uint64_t> size, size_t nbytes, const std::string& what) {
  if (!size) return nbytes;
  if (*size > nbytes) {
    value_error(what, "size " + std::to_string(*size) + " exceeds the object's " + std::to_string(nbytes) + " bytes");
  }
  return static_cast<size_t>(*size);
}

std::string type_name(pyb::handle obj) { return std::string(pyb::str(pyb::type::handle_of(obj).attr("__name__"))); }

const char* kContiguousHint = "; pass a contiguous copy (numpy.ascontiguousarray(x) or tensor.contiguous())";

// True when `strides` (in bytes) describe a dense C- or Fortran-order block.
bool dense(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t itemsize) {
  for (int64_t n : shape)
    if (n == 0) return true;
  auto check = [&](bool c_order) {
    int64_t expect = itemsize;
    for (size_t k = 0; k < shape.size(); ++k) {
      size_t i = c_order ? shape.size() - 1 - k : k;
      if (shape[i] != 1 && strides[i] != expect) return false;
      expect *= shape[i];
    }
    return true;
  };
  return check(true) || check(false);
}

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

BufferArg from_buffer_protocol(pyb::handle obj, std::optional<uint64_t> size, Access access, const std::string& what) {
  // A memoryview holds the export (and so the memory) for as long as it lives.
  PyObject* mv = PyMemoryView_FromObject(obj.ptr());
  if (mv == nullptr) throw pyb::error_already_set();
  pyb::object keep = pyb::reinterpret_steal<pyb::object>(mv);
  Py_buffer* view = PyMemoryView_GET_BUFFER(mv);
  if (!PyBuffer_IsContiguous(view, 'A')) {
    std::vector<int64_t> shape(view->shape, view->shape + view->ndim);
    std::vector<int64_t> strides(view->strides, view->strides + view->ndim);
    value_error(what, "memory is not contiguous (shape " + shape_text(shape) + ", strides " + shape_text(strides) +
                          ")" + kContiguousHint);
  }
  if (access == Access::kWrite && view->readonly) {
    value_error(what, "buffer is read-only; a destination must be writable (bytearray, a writable NumPy array, ...)");
  }
  return BufferArg{view->buf, pick_size(size, static_cast<size_t>(view->len), what), std::move(keep),
                   view->readonly ? type_name(obj) : std::string(), std::nullopt};
}

// The ordinal of a torch.device (.index) or a CuPy device (.id); -1 when it
// names none.
int device_index(pyb::handle device) {
  for (const char* name : {"index", "id"}) {
    if (!pyb::hasattr(device, name)) continue;
    pyb::object v = device.attr(name);
    if (PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr())) return v.cast<int>();
  }
  return -1;
}

BufferArg from_tensor(pyb::handle obj, std::optional<uint64_t> size, const std::string& what,
                      const StreamChoice& order) {
  if (!obj.attr("is_contiguous")().cast<bool>()) {
    auto shape = pyb::tuple(obj.attr("shape")).cast<std::vector<int64_t>>();
    auto strides = pyb::tuple(obj.attr("stride")()).cast<std::vector<int64_t>>();
    value_error(what, "tensor is not contiguous (shape " + shape_text(shape) + ", strides " + shape_text(strides) +
                          " elements)" + kContiguousHint);
  }
  auto ptr = obj.attr("data_ptr")().cast<uint64_t>();
  auto nbytes = obj.attr("numel")().cast<uint64_t>() * obj.attr("element_size")().cast<uint64_t>();
  BufferArg b{reinterpret_cast<void*>(ptr), pick_size(size, nbytes, what), pyb::reinterpret_borrow<pyb::object>(obj),
              {}, std::nullopt};
  if (pyb::hasattr(obj, "is_cuda") && obj.attr("is_cuda").cast<bool>()) {
    b.device = device_index(obj.attr("device"));
    if (order.kind == StreamChoice::Kind::kAuto) {
      // What torch queued for this tensor is on its device's current stream
      // (0 for the default stream: of that device, not the current one).
      pyb::object cuda = pyb::module_::import("torch").attr("cuda");
      b.stream = cuda.attr("current_stream")(obj.attr("device")).attr("cuda_stream").cast<uintptr_t>();
    }
  }
  return b;
}

BufferArg from_cuda_array_interface(pyb::handle obj, std::optional<uint64_t> size, Access access,
                                    const std::string& what, const StreamChoice& order) {
  pyb::dict cai = obj.attr("__cuda_array_interface__");
  pyb::tuple data = cai["data"];
  auto ptr = data[0].cast<uint64_t>();
  bool readonly = data[1].cast<bool>();
  auto shape = pyb::tuple(cai["shape"]).cast<std::vector<int64_t>>();
  std::string typestr = cai["typestr"].cast<std::string>();
  int64_t itemsize = typestr.size() > 2 ? std::stoll(typestr.substr(2)) : 1;
  int64_t count = 1;
  for (int64_t n : shape) count *= n;
  if (cai.contains("strides") && !cai["strides"].is_none()) {
    auto strides = pyb::tuple(cai["strides"]).cast<std::vector<int64_t>>();
    if (!dense(shape, strides, itemsize)) {
      value_error(what, "device array is not contiguous (shape " + shape_text(shape) + ", strides " +
                            shape_text(strides) + ")" + kContiguousHint);
    }
  }
  if (access == Access::kWrite && readonly) value_error(what, "device array is read-only");
  BufferArg b{reinterpret_cast<void*>(ptr), pick_size(size, static_cast<size_t>(count * itemsize), what),
              pyb::reinterpret_borrow<pyb::object>(obj), readonly ? type_name(obj) : std::string(), std::nullopt};
  if (pyb::hasattr(obj, "device")) b.device = device_index(obj.attr("device"));  // CuPy: .device.id
  // Version 3: the stream the producer's work is on (None: nothing to wait
  // for; 1 and 2 the legacy and per-thread default streams).
  if (order.kind == StreamChoice::Kind::kAuto && cai.contains("stream") && !cai["stream"].is_none()) {
    b.stream = to_u64(cai["stream"], what, "__cuda_array_interface__ stream");
    if (*b.stream == 0) value_error(what, "__cuda_array_interface__ names stream 0, which the interface forbids");
  }
  return b;
}

// The DLPack ABI (dlpack.h v0.x), declared here to need no header.
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

constexpr int32_t kDLCUDA = 2;
constexpr uintptr_t kLegacyStream = 1;

BufferArg from_dlpack(pyb::handle obj, std::optional<uint64_t> size, const std::string& what,
                      const StreamChoice& order) {
  // A CUDA producer is told which stream ferry follows and orders its own
  // work before it (-1: ferry follows none).
  bool on_gpu = pyb::hasattr(obj, "__dlpack_device__") &&
                pyb::tuple(obj.attr("__dlpack_device__")())[0].cast<int32_t>() == kDLCUDA;
  std::optional<uintptr_t> stream;
  pyb::object capsule;
  if (!on_gpu) {
    capsule = obj.attr("__dlpack__")();
  } else if (order.kind == StreamChoice::Kind::kNone) {
    capsule = obj.attr("__dlpack__")(pyb::arg("stream") = -1);
  } else {
    stream = order.kind == StreamChoice::Kind::kGiven ? order.stream : kLegacyStream;
    // 0 is not a DLPack stream: the legacy default stream is 1 there.
    capsule = obj.attr("__dlpack__")(pyb::arg("stream") = *stream == 0 ? kLegacyStream : *stream);
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw pyb::error_already_set();
  // Consume it: the producer's capsule no longer frees the tensor; ours does.
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  pyb::capsule owner(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter != nullptr) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  int64_t itemsize = (static_cast<int64_t>(t.dtype.bits) * t.dtype.lanes + 7) / 8;
  int64_t count = 1;
  for (int64_t n : shape) count *= n;
  if (t.strides != nullptr) {
    std::vector<int64_t> strides;
    for (int i = 0; i < t.ndim; ++i) strides.push_back(t.strides[i] * itemsize);
    if (!dense(shape, strides, itemsize)) {
      value_error(what, "DLPack tensor is not contiguous (shape " + shape_text(shape) + ")" + kContiguousHint);
    }
  }
  void* base = static_cast<char*>(t.data) + t.byte_offset;
  BufferArg b{base, pick_size(size, static_cast<size_t>(count * itemsize), what), std::move(owner), {}, std::nullopt};
  b.stream = stream;
  if (t.device.device_type == kDLCUDA) b.device = t.device.device_id;
  return b;
}

bool is_tensor_like(pyb::handle obj) {
  return pyb::hasattr(obj, "data_ptr") && pyb::hasattr(obj, "is_contiguous") && pyb::hasattr(obj, "element_size") &&
         pyb::hasattr(obj, "numel");
}

BufferArg resolve_unordered(pyb::handle obj, std::optional<uint64_t> size, Access access, const std::string& what,
                            const StreamChoice& order) {
  if (PyLong_Check(obj.ptr()) && !PyBool_Check(obj.ptr())) {
    if (!size) {
      throw pyb::type_error("argument '" + what + "' is an address (int): pass its size in bytes as well");
    }
    return BufferArg{
        reinterpret_cast<void*>(to_u64(obj, what, "address")), static_cast<size_t>(*size), pyb::none(), {}, std::nullopt};
  }
  if (PyTuple_Check(obj.ptr()) && PyTuple_GET_SIZE(obj.ptr()) == 2) {
    pyb::tuple t = pyb::reinterpret_borrow<pyb::tuple>(obj);
    uint64_t address = to_u64(t[0], what, "address");
    uint64_t n = to_u64(t[1], what, "size");
    if (size && *size > n) value_error(what, "size " + std::to_string(*size) + " exceeds " + std::to_string(n));
    return BufferArg{reinterpret_cast<void*>(address), static_cast<size_t>(size ? *size : n), pyb::none(), {}, std::nullopt};
  }
  if (PyObject_CheckBuffer(obj.ptr())) return from_buffer_protocol(obj, size, access, what);
  if (is_tensor_like(obj)) return from_tensor(obj, size, what, order);
  if (pyb::hasattr(obj, "__cuda_array_interface__")) return from_cuda_array_interface(obj, size, access, what, order);
  if (pyb::hasattr(obj, "__dlpack__")) return from_dlpack(obj, size, what, order);
  throw pyb::type_error("argument '" + what + "': expected an address (int) with a size, an (address, size) tuple, " +
                        "a buffer (bytes, bytearray, NumPy array, ...) or a tensor, not " +
                        std::string(pyb::str(pyb::type::handle_of(obj).attr("__name__"))));
}

}  // namespace

StreamChoice stream_choice(pyb::handle stream) {
  StreamChoice c;
  if (stream.is_none()) {
    c.kind = StreamChoice::Kind::kNone;
    return c;
  }
  if (PyUnicode_Check(stream.ptr())) {
    if (stream.cast<std::string>() == "auto") return c;
    throw pyb::type_error("argument 'stream': \"" + stream.cast<std::string>() +
                          "\" is not a stream; pass \"auto\" (the default), None, a cudaStream_t (int) or a stream "
                          "object (torch.cuda.Stream, cupy.cuda.Stream)");
  }
  pyb::object handle = pyb::reinterpret_borrow<pyb::object>(stream);
  if (pyb::hasattr(stream, "cuda_stream")) {
    handle = stream.attr("cuda_stream");  // torch.cuda.Stream, ExternalStream
    if (pyb::hasattr(stream, "device")) c.device = device_index(stream.attr("device"));
  } else if (pyb::hasattr(stream, "ptr")) {
    handle = stream.attr("ptr");  // cupy.cuda.Stream
    if (pyb::hasattr(stream, "device_id")) {
      pyb::object id = stream.attr("device_id");
      if (PyLong_Check(id.ptr())) c.device = id.cast<int>();
    }
  }
  c.kind = StreamChoice::Kind::kGiven;
  c.stream = to_u64(handle, "stream", "a stream handle");
  return c;
}

std::vector<CudaStreamRef> streams_of(const std::vector<BufferArg>& bufs) {
  std::vector<CudaStreamRef> out;
  for (const BufferArg& b : bufs) {
    if (!b.stream) continue;
    CudaStreamRef s{reinterpret_cast<void*>(*b.stream), b.device};
    auto same = [&](const CudaStreamRef& o) { return o.stream == s.stream && o.device == s.device; };
    if (std::find_if(out.begin(), out.end(), same) == out.end()) out.push_back(s);
  }
  return out;
}

BufferArg resolve_buffer(pyb::handle obj, std::optional<uint64_t> size, Access access, const std::string& what,
                         const StreamChoice& order) {
  BufferArg b = resolve_unordered(obj, size, access, what, order);
  if (order.kind == StreamChoice::Kind::kGiven) {
    b.stream = order.stream;
    if (order.device >= 0) b.device = order.device;  // the stream's device, where it says
  }
  if (order.kind == StreamChoice::Kind::kNone) b.stream.reset();
  return b;
}

std::vector<BufferArg> resolve_buffers(pyb::handle seq, Access access, const char* what, const StreamChoice& order) {
  if (PyUnicode_Check(seq.ptr()) || PyBytes_Check(seq.ptr()) || !PySequence_Check(seq.ptr())) {
    throw pyb::type_error(std::string("argument '") + what + "' must be a list of buffers or (address, size) tuples");
  }
  pyb::sequence s = pyb::reinterpret_borrow<pyb::sequence>(seq);
  std::vector<BufferArg> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    out.push_back(
        resolve_buffer(s[i], std::nullopt, access, std::string(what) + "[" + std::to_string(i) + "]", order));
  }
  return out;
}

}  // namespace ferry::py
