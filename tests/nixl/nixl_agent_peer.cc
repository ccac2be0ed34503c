// nixl_agent_peer: a NIXL agent with the FERRY backend in its own process,
// the other end of the plugin's tests (nixl_plugin_test.cc). It registers
// one DRAM buffer and answers one line per command read on stdin:
//
//   md                          md <hex of getLocalMD>
//   addr                        addr <buffer address> <length>
//   load <hex metadata>         ok <agent name>      (loadRemoteMD)
//   fill <seed>                 ok                   (random bytes)
//   hash <offset> <length>      hash <fnv1a>
//   notifs <count> <ms>         notifs <n> [<agent>:<hex message>:<hash of the buffer when it came>]...
//   gennotif <agent> <hex>      ok | err <status>
//   dereg                       ok | err <status>     (deregisterMem of the buffer)
//
// usage: nixl_agent_peer NAME BYTES [KEY=VALUE backend parameters...]
#include <nixl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/pattern.h"
#include "nixl/nixl_test_data.h"

using ferry::test::hex;
using ferry::test::unhex;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: nixl_agent_peer NAME BYTES [KEY=VALUE...]\n");
    return 2;
  }
  const std::string name = argv[1];
  const size_t bytes = std::stoull(argv[2]);
  nixl_b_params_t params;
  for (int i = 3; i < argc; ++i) {
    const std::string kv = argv[i];
    const size_t eq = kv.find('=');
    params[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }

  nixlAgentConfig config(false);
  nixlAgent agent(name, config);
  nixlBackendH* backend = nullptr;
  if (agent.createBackend("FERRY", params, backend) != NIXL_SUCCESS) {
    std::fprintf(stderr, "nixl_agent_peer: createBackend(FERRY) failed\n");
    return 1;
  }
  std::vector<uint8_t> buffer(bytes);
  nixl_reg_dlist_t reg(DRAM_SEG);
  reg.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(buffer.data()), buffer.size(), 0, ""));
  if (agent.registerMem(reg) != NIXL_SUCCESS) {
    std::fprintf(stderr, "nixl_agent_peer: registerMem failed\n");
    return 1;
  }

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    std::ostringstream out;
    if (command == "md") {
      nixl_blob_t md;
      agent.getLocalMD(md);
      out << "md " << hex(md);
    } else if (command == "addr") {
      out << "addr " << reinterpret_cast<uintptr_t>(buffer.data()) << " " << buffer.size();
    } else if (command == "load") {
      std::string text, remote;
      in >> text;
      const nixl_status_t s = agent.loadRemoteMD(unhex(text), remote);
      out << (s == NIXL_SUCCESS ? "ok " + remote : "err " + std::to_string(s));
    } else if (command == "fill") {
      uint64_t seed = 0;
      in >> seed;
      ferry::core::fill_random(buffer.data(), buffer.size(), seed);
      out << "ok";
    } else if (command == "hash") {
      size_t offset = 0, length = 0;
      in >> offset >> length;
      out << "hash " << (offset + length <= buffer.size() ? ferry::core::fnv1a(buffer.data() + offset, length) : 0);
    } else if (command == "notifs") {
      size_t want = 0;
      long ms = 0;
      in >> want >> ms;
      std::vector<std::string> seen;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
      while (seen.size() < want && std::chrono::steady_clock::now() < deadline) {
        nixl_notifs_t notifs;
        agent.getNotifs(notifs);
        // The buffer's hash when the notification is seen: its data must be
        // in place by then.
        const uint64_t h = ferry::core::fnv1a(buffer.data(), buffer.size());
        for (auto& [from, messages] : notifs) {
          for (auto& m : messages) seen.push_back(from + ":" + hex(m) + ":" + std::to_string(h));
        }
        if (notifs.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      out << "notifs " << seen.size();
      for (auto& s : seen) out << " " << s;
    } else if (command == "gennotif") {
      std::string to, text;
      in >> to >> text;
      const nixl_status_t s = agent.genNotif(to, unhex(text));
      out << (s == NIXL_SUCCESS ? "ok" : "err " + std::to_string(s));
    } else if (command == "dereg") {
      const nixl_status_t s = agent.deregisterMem(reg);
      out << (s == NIXL_SUCCESS ? "ok" : "err " + std::to_string(s));
    } else {
      out << "err unknown command " << command;
    }
    std::cout << out.str() << std::endl;
  }
  return 0;
}
