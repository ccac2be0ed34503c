// What this build is: CMake passes the release (FERRY_VERSION) and whether
// the NIXL plugin was built (FERRY_NIXL_PLUGIN) to this file alone; the
// directory clients' switches are the library's own.
#include "ferry/version.h"

#include <algorithm>

#include "wire/frame.h"

#ifndef FERRY_VERSION
#define FERRY_VERSION "unknown"
#endif
#ifndef FERRY_NIXL_PLUGIN
#define FERRY_NIXL_PLUGIN 0
#endif

namespace ferry {

bool BuildInfo::has_directory(std::string_view kind) const {
  return std::find(directories.begin(), directories.end(), kind) != directories.end();
}

BuildInfo build_info() {
  BuildInfo b;
  b.version = FERRY_VERSION;
  b.protocol_version = wire::kProtocolVersion;
  b.min_protocol_version = wire::kMinProtocolVersion;
  b.cuda = true;  // the driver API is loaded with dlopen (gpu/cuda_driver.h), never linked
  b.nixl_plugin = FERRY_NIXL_PLUGIN != 0;
#if FERRY_HAVE_HIREDIS
  b.directories.push_back("redis");
#endif
#if FERRY_HAVE_CURL
  b.directories.push_back("etcd");
#endif
  return b;
}

std::string describe(const BuildInfo& b) {
  std::string out = "ferry " + b.version + "\n";
  out += "wire protocol " + std::to_string(b.protocol_version) + " (accepts peers speaking " +
         std::to_string(b.min_protocol_version) + ".." + std::to_string(b.protocol_version) + ")\n";
  out += std::string("cuda: ") + (b.cuda ? "yes (the driver is loaded at run time)" : "no") + "\n";
  out += std::string("nixl plugin: ") + (b.nixl_plugin ? "yes" : "no (no NIXL install at build time)") + "\n";
  out += "directories: ";
  if (b.directories.empty()) out += "none (built without hiredis and libcurl)";
  for (size_t i = 0; i < b.directories.size(); ++i) out += (i > 0 ? ", " : "") + b.directories[i];
  if (b.directories.size() == 1) {
    out += b.has_directory("redis") ? " (no etcd: built without libcurl)" : " (no redis: built without hiredis)";
  }
  return out + "\n";
}

}  // namespace ferry
