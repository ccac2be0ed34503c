// What this process holds of the kernel's (threads, descriptors, mappings of
// a named file), for tests that check that something which failed gave it
// all back.
#pragma once

#include <dirent.h>

#include <fstream>
#include <functional>
#include <string>
#include <string_view>

namespace ferry::testing {

// Threads of this process.
inline size_t thread_count() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoul(line.substr(8));
  }
  return 0;
}

// Threads of this process whose name (as the kernel keeps it: 15
// characters) `matches`.
inline size_t threads_named(const std::function<bool(const std::string&)>& matches) {
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return 0;
  size_t n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name) && matches(name)) ++n;
  }
  ::closedir(d);
  return n;
}

// Open descriptors of this process (the one that lists them not counted).
inline size_t open_descriptors() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  size_t n = 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n - 1;
}

// Mappings of this process whose file name contains `name` (a memfd shows as
// "/memfd:<its name> (deleted)").
inline size_t mappings_of(std::string_view name) {
  std::ifstream in("/proc/self/maps");
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) n += line.find(name) != std::string::npos;
  return n;
}

}  // namespace ferry::testing
