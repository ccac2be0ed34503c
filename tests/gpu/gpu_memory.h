// Test helpers for GPU memory through the CUDA driver table: allocation
// (plain and through the virtual-memory API with POSIX fd handles), filling
// with a reproducible pattern, and checking it, on any device or on the host.
#pragma once

#include <cstdint>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cuda_driver.h"

namespace ferry::testing {

namespace cu = platform::cu;

inline int gpu_count() {
  const auto& d = platform::cuda();
  int n = 0;
  if (!d.available() || d.device_get_count(&n) != cu::kSuccess) return 0;
  return n;
}

// Byte i of pattern `seed`: never zero, differs between seeds.
inline uint8_t pattern_byte(uint64_t seed, uint64_t i) {
  uint64_t x = (seed * 0x9e3779b97f4a7c15ull) ^ (i * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x % 255 + 1);
}

// Runs fn(begin, end) over [0, n) cut into one slice per CPU (up to 16) once
// n is large: a 1 GiB pattern made or checked byte by byte on one thread
// takes seconds, and the GPU tests do it dozens of times.
template <typename Fn>
void for_each_slice(size_t n, Fn fn) {
  size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  if (n < (8u << 20) || threads == 1) return fn(size_t{0}, n);
  size_t step = (n + threads - 1) / threads;
  std::vector<std::thread> workers;
  for (size_t at = 0; at < n; at += step) workers.emplace_back(fn, at, std::min(n, at + step));
  for (auto& w : workers) w.join();
}

inline std::vector<uint8_t> pattern(uint64_t seed, size_t n) {
  std::vector<uint8_t> v(n);
  for_each_slice(n, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) v[i] = pattern_byte(seed, i);
  });
  return v;
}

struct GpuBuffer {
  uint8_t* ptr = nullptr;
  size_t size = 0;
  int device = -1;
  bool vmm = false;
  uint64_t reserved = 0;  // vmm: reserved VA size
};

inline GpuBuffer gpu_alloc(int device, size_t size) {
  const auto& d = platform::cuda();
  GpuBuffer b;
  b.device = device;
  b.size = size;
  if (!platform::use_device(device).ok()) return b;
  cu::DevicePtr p = 0;
  if (d.mem_alloc(&p, size) == cu::kSuccess) b.ptr = reinterpret_cast<uint8_t*>(p);
  return b;
}

// Memory from cuMemCreate + cuMemMap in `pieces` separate physical
// allocations mapped back to back (like PyTorch's expandable segments).
inline cu::MemAllocationProp vmm_prop(int device) {
  cu::MemAllocationProp prop{};
  prop.type = cu::kAllocationPinned;
  prop.requested_handle_types = cu::kHandleTypePosixFd;
  prop.location = {cu::kLocationDevice, device};
  return prop;
}

// `hint`: the address to reserve at, if it is free (0: anywhere).
inline GpuBuffer gpu_alloc_vmm(int device, size_t piece_size, int pieces, uint64_t hint = 0) {
  const auto& d = platform::cuda();
  GpuBuffer b;
  b.device = device;
  b.vmm = true;
  if (!platform::use_device(device).ok()) return b;
  cu::MemAllocationProp prop = vmm_prop(device);
  size_t gran = 0;
  if (d.mem_get_allocation_granularity(&gran, &prop, 0) != cu::kSuccess) return b;
  piece_size = (piece_size + gran - 1) / gran * gran;
  size_t total = piece_size * static_cast<size_t>(pieces);
  cu::DevicePtr va = 0;
  if (d.mem_address_reserve(&va, total, 0, hint, 0) != cu::kSuccess) return b;
  for (int i = 0; i < pieces; ++i) {
    cu::MemHandle h = 0;
    if (d.mem_create(&h, piece_size, &prop, 0) != cu::kSuccess) return b;
    if (d.mem_map(va + piece_size * i, piece_size, 0, h, 0) != cu::kSuccess) return b;
    d.mem_release(h);
  }
  cu::MemAccessDesc access{{cu::kLocationDevice, device}, cu::kAccessReadWrite};
  if (d.mem_set_access(va, total, &access, 1) != cu::kSuccess) return b;
  b.ptr = reinterpret_cast<uint8_t*>(va);
  b.size = total;
  b.reserved = total;
  return b;
}

// Puts new physical memory behind a one-piece gpu_alloc_vmm buffer, at the
// same address: what an allocator does that frees and allocates again at one
// base.
inline bool gpu_vmm_replace(GpuBuffer& b) {
  const auto& d = platform::cuda();
  if (!b.vmm || !platform::use_device(b.device).ok()) return false;
  auto va = reinterpret_cast<cu::DevicePtr>(b.ptr);
  if (d.mem_unmap(va, b.size) != cu::kSuccess) return false;
  cu::MemAllocationProp prop = vmm_prop(b.device);
  cu::MemHandle h = 0;
  if (d.mem_create(&h, b.size, &prop, 0) != cu::kSuccess) return false;
  bool mapped = d.mem_map(va, b.size, 0, h, 0) == cu::kSuccess;
  d.mem_release(h);
  cu::MemAccessDesc access{{cu::kLocationDevice, b.device}, cu::kAccessReadWrite};
  return mapped && d.mem_set_access(va, b.size, &access, 1) == cu::kSuccess;
}

// Copies host bytes to any address (device or host) and back, synchronously.
inline bool copy_to(void* dst, const void* src, size_t n) {
  const auto& d = platform::cuda();
  // cuMemcpy from pageable memory may return before the bytes land on the
  // device: synchronize, so the next transfer sees them.
  return d.memcpy(reinterpret_cast<cu::DevicePtr>(dst), reinterpret_cast<cu::DevicePtr>(src), n) == cu::kSuccess &&
         d.ctx_synchronize() == cu::kSuccess;
}

inline bool fill(void* at, size_t n, uint64_t seed) {
  auto v = pattern(seed, n);
  return copy_to(at, v.data(), n);
}

// Empty string when [at, at+n) holds pattern `seed`; else where it differs.
inline std::string check(const void* at, size_t n, uint64_t seed) {
  std::vector<uint8_t> got(n);
  if (!copy_to(got.data(), at, n)) return "copy back failed";
  // The first differing byte of each slice; the lowest of them is reported.
  std::vector<size_t> first_bad(std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16) + 1, n);
  std::atomic<size_t> slot{0};
  for_each_slice(n, [&](size_t begin, size_t end) {
    size_t bad = n;
    for (size_t i = begin; i < end && bad == n; ++i) {
      if (got[i] != pattern_byte(seed, i)) bad = i;
    }
    first_bad[slot.fetch_add(1)] = bad;
  });
  size_t i = *std::min_element(first_bad.begin(), first_bad.end());
  if (i == n) return "";
  return "byte " + std::to_string(i) + " of " + std::to_string(n) + " is " + std::to_string(got[i]) + ", expected " +
         std::to_string(pattern_byte(seed, i));
}

inline bool poison(void* at, size_t n) {
  std::vector<uint8_t> z(n, 0);
  return copy_to(at, z.data(), n);
}

}  // namespace ferry::testing
