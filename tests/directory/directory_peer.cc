// ferry_directory_peer: an engine that publishes itself in a directory and
// echoes every message of every connection, one connection at a time.
//
//   ferry_directory_peer URL NAME TTL_MS [TRANSPORT]
//
// Prints "READY <engine id, 16 hex digits> <incarnation>" once published,
// then serves until killed.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ferry/ferry.h"

using namespace std::chrono_literals;

int main(int argc, char** argv) {
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
