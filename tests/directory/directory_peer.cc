// ferry_directory_peer: an engine that publishes itself in a directory and
// echoes every message of every connection, one connection at a time.
//
//   ferry_directory_peer URL NAME TTL_MS [TRANSPORT]
//
// Prints "READY <engine id, 16 hex digits> <incarnation>" once published,
// then serves until killed.
//
//   ferry_directory_peer --list URL
//
// Lists the directory once, in a process of its own so that the test can
// tell what the listing made it hold: prints "LISTED <entries> <malformed>"
// or "FAILED <code> <message>", then " hwm_kib <peak resident KiB before>
// <after>" on the same line (VmHWM of /proc/self/status).
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ferry/ferry.h"

using namespace std::chrono_literals;

namespace {

// This process's peak resident memory so far, in KiB (0 if unknown).
long peak_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

int list_once(const char* url) {
  long before = peak_kib();
  auto dir = ferry::Directory::open(url);
  if (!dir.ok()) {
    std::printf("FAILED %s\n", dir.status().to_string().c_str());
    return 1;
  }
  auto l = dir.value()->list(ferry::after(60s));
  std::string what = l.ok() ? "LISTED " + std::to_string(l->entries.size()) + " " + std::to_string(l->malformed.size())
                            : "FAILED " + l.status().to_string();
  long after = peak_kib();
  std::printf("%s hwm_kib %ld %ld\n", what.c_str(), before, after);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--list") == 0) return list_once(argv[2]);
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: ferry_directory_peer URL NAME TTL_MS [TRANSPORT]\n");
    return 2;
  }
  ferry::Options o;
  o.directory = argv[1];
  o.name = argv[2];
  o.directory_ttl = std::chrono::milliseconds(std::atoll(argv[3]));
  o.transport = ferry::parse_transport(argc == 5 ? argv[4] : "tcp").value();
  auto engine = ferry::Engine::create(o);
  if (!engine.ok()) {
    std::fprintf(stderr, "directory_peer: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  auto& e = *engine.value();
  std::vector<uint8_t> buf(64 << 20);
  auto region = e.reg(buf.data(), buf.size());
  if (!region.ok()) return 1;
  std::printf("READY %016" PRIx64 " %" PRIu64 "\n", e.id(), e.incarnation());
  std::fflush(stdout);
  for (;;) {
    auto c = e.accept(ferry::after(120s));
    if (!c.ok()) return c.status().code() == ferry::Code::kDeadlineExceeded ? 0 : 1;
    for (;;) {
      auto n = c.value()->recv(buf.data(), buf.size(), ferry::after(120s));
      if (!n.ok()) break;
      if (!c.value()->send(buf.data(), n.value(), ferry::after(60s)).ok()) break;
    }
  }
}
