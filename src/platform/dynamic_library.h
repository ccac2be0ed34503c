// DynamicLibrary: a shared library opened at run time with dlopen, and its
// entry points looked up by name into typed function pointers.
//
// Why this file exists: ferry loads the CUDA driver, NVML and NCCL this way so
// that it builds without their headers and runs on hosts without them. Each
// used to open, look up and report failures by hand; this is the one place
// that does it, and says what was missing in the loader's own words
// ("/usr/lib/x86_64-linux-gnu/libnccl.so.2: undefined symbol: ncclSend").
//
// Example:
//   FERRY_ASSIGN_OR_RETURN(DynamicLibrary lib, DynamicLibrary::open({"libnvidia-ml.so.1"}));
//   int (*init)() = nullptr;
//   FERRY_RETURN_IF_ERROR(lib.lookup("nvmlInit_v2", init));
//
// Thread-safety: thread-compatible. dlopen, dlsym and dlerror are safe to call
// from several threads (dlerror's text is per thread in glibc).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/status.h"

namespace ferry::platform {

class DynamicLibrary {
 public:
  // Opens the first of `candidates` (file names the dynamic loader searches
  // for, or paths) that dlopen accepts, with RTLD_NOW | RTLD_LOCAL. Does not
  // block beyond the loader's own work (the library's constructors run).
  // kUnavailable when none opens; the message is dlerror's text for every
  // candidate tried, joined by "; ".
  static Result<DynamicLibrary> open(const std::vector<std::string>& candidates);
  static Result<DynamicLibrary> open(std::initializer_list<std::string_view> candidates);

  // An empty handle: nothing open, every lookup fails.
  DynamicLibrary() = default;
  // Closes the library (dlclose) unless keep_loaded() was called.
  ~DynamicLibrary();
  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  bool is_open() const { return handle_ != nullptr; }
  // The candidate that opened, as it was given ("libcuda.so.1").
  const std::string& name() const { return name_; }

  // Stores the address of `symbol` in `fn`, or nullptr and kNotFound when
  // the library does not export it; the message is dlerror's text, which
  // names the file loaded and the symbol ("<name> lacks <symbol>" where the
  // loader gives none). `fn` is a pointer to the function's type, declared by
  // the caller with the library's ABI; nothing checks that it matches.
  template <typename Fn>
  Status lookup(const char* symbol, Fn& fn) const {
    static_assert(std::is_pointer_v<Fn> && std::is_function_v<std::remove_pointer_t<Fn>>,
                  "lookup() fills a function pointer");
    void* address = nullptr;
    Status s = find(symbol, &address);
    fn = reinterpret_cast<Fn>(address);
    return s;
  }

  // As lookup(), for an entry point the caller can do without: false (and
  // `fn` nullptr) when it is missing.
  template <typename Fn>
  bool lookup_optional(const char* symbol, Fn& fn) const {
    return lookup(symbol, fn).ok();
  }

  // Leaves the library loaded for the rest of the process: the destructor
  // will not close it. For entry points kept in a table that lives as long
  // as the process (the CUDA driver's), and for libraries that must not be
  // unloaded once initialised.
  void keep_loaded() { keep_loaded_ = true; }

 private:
  DynamicLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  Status find(const char* symbol, void** address) const;
  void close();

  void* handle_ = nullptr;
  std::string name_;
  bool keep_loaded_ = false;
};

}  // namespace ferry::platform
