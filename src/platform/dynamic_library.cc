// Opening shared libraries and looking up their entry points (dlopen, dlsym).
#include "platform/dynamic_library.h"

#include <dlfcn.h>

namespace ferry::platform {
namespace {

// dlerror's text, or `otherwise` when the loader has none to give.
std::string loader_error(const char* otherwise) {
  const char* e = ::dlerror();
  return e != nullptr ? std::string(e) : std::string(otherwise);
}

}  // namespace

Result<DynamicLibrary> DynamicLibrary::open(const std::vector<std::string>& candidates) {
  std::string tried;
  for (const std::string& name : candidates) {
    void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return DynamicLibrary(handle, name);
    if (!tried.empty()) tried += "; ";
    tried += loader_error((name + ": cannot be loaded").c_str());
  }
  if (tried.empty()) tried = "no library to load";
  return Status(Code::kUnavailable, tried);
}

Result<DynamicLibrary> DynamicLibrary::open(std::initializer_list<std::string_view> candidates) {
  return open(std::vector<std::string>(candidates.begin(), candidates.end()));
}

DynamicLibrary::~DynamicLibrary() { close(); }

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      name_(std::move(other.name_)),
      keep_loaded_(std::exchange(other.keep_loaded_, false)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    close();
    handle_ = std::exchange(other.handle_, nullptr);
    name_ = std::move(other.name_);
    keep_loaded_ = std::exchange(other.keep_loaded_, false);
  }
  return *this;
}

void DynamicLibrary::close() {
  if (handle_ != nullptr && !keep_loaded_) ::dlclose(handle_);
  handle_ = nullptr;
}

Status DynamicLibrary::find(const char* symbol, void** address) const {
  *address = nullptr;
  if (handle_ == nullptr) {
    return Status(Code::kNotFound, std::string("no library open to look up ") + symbol + " in");
  }
  ::dlerror();  // clears an earlier error, so that the one read below is this lookup's
  *address = ::dlsym(handle_, symbol);
  if (*address != nullptr) return Status();
  // glibc's text names the file that was loaded and the symbol:
  // "/usr/lib/x86_64-linux-gnu/libnccl.so.2: undefined symbol: ncclSend".
  return Status(Code::kNotFound, loader_error((name_ + " lacks " + symbol).c_str()));
}

}  // namespace ferry::platform
