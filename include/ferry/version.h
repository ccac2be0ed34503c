// What this build of ferry is and what it can do: its version, the wire
// protocol versions it speaks, and what was compiled in. A run-time query, so
// that programs ask instead of guessing from how they were built;
// `ferry --version` and Python's ferry.version_info() print it.
//
// Example:
//   ferry::BuildInfo b = ferry::build_info();
//   if (!b.has_directory("etcd")) fprintf(stderr, "this build refuses etcd:// directories\n");
//   puts(ferry::describe(b).c_str());
//
// Thread-safe; nothing here blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

struct BuildInfo {
  std::string version;  // the release, "0.1.0"
  // The wire protocol versions this build speaks: the highest (what it offers
  // first) and the lowest it accepts from a peer. Two engines talk when their
  // ranges overlap, at the highest version both speak.
  uint16_t protocol_version = 0;
  uint16_t min_protocol_version = 0;
  // GPU memory support. The CUDA driver is loaded when GPU memory is first
  // registered; a host without one serves host memory.
  bool cuda = false;
  // The NIXL backend plugin (libplugin_FERRY.so) was built with this library.
  bool nixl_plugin = false;
  // The directory servers this build's clients speak: "redis", "etcd". A
  // URL of a kind not listed is refused with a message that says so.
  std::vector<std::string> directories;

  bool has_directory(std::string_view kind) const;
};

// This build's facts.
BuildInfo build_info();

// The lines `ferry --version` prints, one fact a line:
//   ferry 0.1.0
//   wire protocol 5 (accepts peers speaking 5..5)
//   cuda: yes (the driver is loaded at run time)
//   nixl plugin: yes
//   directories: redis, etcd
std::string describe(const BuildInfo& info);

}  // namespace ferry
