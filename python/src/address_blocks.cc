// _address_blocks: raw addresses to block rows, for ferry.mooncake. Mooncake's
// API names memory by address; a batch of hundreds of blocks is resolved here
// against both sides' segment tables in one pass (a binary search per
// address), where NumPy would take several passes and conversions of Python
// lists that cost more than the transfer's own posting.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"

namespace ferry::py {
namespace {

using U64Array = pyb::array_t<uint64_t, pyb::array::c_style | pyb::array::forcecast>;

// Reads a list or tuple of non-negative ints that fit in 64 bits.
std::vector<uint64_t> unsigned_list(pyb::handle seq, const char* what) {
  PyObject* fast = PySequence_Fast(seq.ptr(), what);
  if (fast == nullptr) throw pyb::error_already_set();
  pyb::object hold = pyb::reinterpret_steal<pyb::object>(fast);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  std::vector<uint64_t> out(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    unsigned long long v = PyLong_Check(items[i]) ? PyLong_AsUnsignedLongLong(items[i]) : static_cast<unsigned long long>(-1);
    if (v == static_cast<unsigned long long>(-1) && (PyErr_Occurred() != nullptr || !PyLong_Check(items[i]))) {
      PyErr_Clear();
      throw pyb::type_error(std::string(what) + "[" + std::to_string(i) + "]: expected an int in 0..2**64-1");
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

// The segment of [address, +length) in a table sorted by base, or -1.
int64_t segment_of(const uint64_t* bases, const uint64_t* ends, size_t count, uint64_t address, uint64_t length) {
  const uint64_t* after = std::upper_bound(bases, bases + count, address);
  if (after == bases) return -1;
  size_t i = static_cast<size_t>(after - bases) - 1;
  if (address >= ends[i] || length > ends[i] - address) return -1;
  return static_cast<int64_t>(i);
}

}  // namespace

void bind_address_blocks(pyb::module_& m) {
  m.def(
      "_address_blocks",
      [](const U64Array& local_bases, const U64Array& local_ends, const U64Array& remote_bases,
         const U64Array& remote_ends, pyb::handle buffers, pyb::handle peer_addresses, pyb::handle lengths) {
        if (local_bases.size() != local_ends.size() || remote_bases.size() != remote_ends.size()) {
          throw pyb::value_error("_address_blocks: a table's bases and ends differ in length");
        }
        std::vector<uint64_t> local = unsigned_list(buffers, "buffers");
        std::vector<uint64_t> remote = unsigned_list(peer_addresses, "peer_buffer_addresses");
        std::vector<uint64_t> size = unsigned_list(lengths, "lengths");
        if (local.size() != remote.size() || local.size() != size.size()) {
          throw pyb::value_error(std::to_string(local.size()) + " buffers, " + std::to_string(remote.size()) +
                                 " peer addresses and " + std::to_string(size.size()) + " lengths");
        }
        size_t rows = static_cast<size_t>(std::count_if(size.begin(), size.end(), [](uint64_t s) { return s != 0; }));
        U64Array blocks({rows, size_t{5}});
        uint64_t* out = blocks.mutable_data();
        const uint64_t* lb = local_bases.data();
        const uint64_t* le = local_ends.data();
        const uint64_t* rb = remote_bases.data();
        const uint64_t* re = remote_ends.data();
        size_t nl = static_cast<size_t>(local_bases.size());
        size_t nr = static_cast<size_t>(remote_bases.size());
        for (size_t i = 0; i < size.size(); ++i) {
          if (size[i] == 0) continue;
          int64_t l = segment_of(lb, le, nl, local[i], size[i]);
          if (l < 0) return std::make_tuple(pyb::object(pyb::none()), std::string("local"), static_cast<int64_t>(i));
          int64_t r = segment_of(rb, re, nr, remote[i], size[i]);
          if (r < 0) return std::make_tuple(pyb::object(pyb::none()), std::string("remote"), static_cast<int64_t>(i));
          out[0] = static_cast<uint64_t>(l);
          out[1] = static_cast<uint64_t>(r);
          out[2] = local[i] - lb[l];
          out[3] = remote[i] - rb[r];
          out[4] = size[i];
          out += 5;
        }
        return std::make_tuple(pyb::object(std::move(blocks)), std::string(), int64_t{-1});
      },
      pyb::arg("local_bases"), pyb::arg("local_ends"), pyb::arg("remote_bases"), pyb::arg("remote_ends"),
      pyb::arg("buffers"), pyb::arg("peer_addresses"), pyb::arg("lengths"),
      "For ferry.mooncake: (blocks, side, index). blocks: an (n, 5) uint64 array of (local segment, remote "
      "segment, local offset, remote offset, length) rows, one per entry of non-zero length, each entry inside one "
      "segment of each sorted table (bases, ends); or None with side 'local' or 'remote' and the index of the "
      "first entry that is not.");
}

}  // namespace ferry::py
