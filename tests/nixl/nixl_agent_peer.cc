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
//   reset <name>                ok | err <what>       (a new agent of that name, with a new
//                                                    engine, and the buffer registered with it)
//
// usage: nixl_agent_peer NAME BYTES [memory=vram] [KEY=VALUE backend parameters...]
// memory=vram puts the buffer in GPU 0's memory (VRAM_SEG); "addr" then
// gives a device address, and fill, hash and notifs go through host copies.
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
#include "gpu/gpu_memory.h"
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
  bool vram = false;
  for (int i = 3; i < argc; ++i) {
    const std::string kv = argv[i];
    if (kv == "memory=vram") {
      vram = true;
      continue;
    }
    const size_t eq = kv.find('=');
    params[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }

  // `buffer` is the memory itself, or (VRAM) its host image for fill and hash.
  std::vector<uint8_t> buffer(bytes);
  ferry::testing::GpuBuffer gpu;
  if (vram) {
    gpu = ferry::testing::gpu_alloc(0, bytes);
    if (gpu.ptr == nullptr) {
      std::fprintf(stderr, "nixl_agent_peer: no GPU memory\n");
      return 1;
    }
  }
  uint8_t* const memory = vram ? gpu.ptr : buffer.data();
  // The host view of the memory, fresh.
  auto host_view = [&]() -> const std::vector<uint8_t>& {
    if (vram && !ferry::testing::copy_to(buffer.data(), gpu.ptr, bytes)) std::fill(buffer.begin(), buffer.end(), 0);
    return buffer;
  };
  nixl_reg_dlist_t reg(vram ? VRAM_SEG : DRAM_SEG);
  reg.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(memory), bytes, 0, ""));
  // An agent of `agent_name` with the FERRY backend and the buffer registered.
  auto start = [&](const std::string& agent_name) -> std::unique_ptr<nixlAgent> {
    auto made = std::make_unique<nixlAgent>(agent_name, nixlAgentConfig(false));
    nixlBackendH* backend = nullptr;
    if (made->createBackend("FERRY", params, backend) != NIXL_SUCCESS) {
      std::fprintf(stderr, "nixl_agent_peer: createBackend(FERRY) failed\n");
      return nullptr;
    }
    if (made->registerMem(reg) != NIXL_SUCCESS) {
      std::fprintf(stderr, "nixl_agent_peer: registerMem failed\n");
      return nullptr;
    }
    return made;
  };
  std::unique_ptr<nixlAgent> holder = start(name);
  if (!holder) return 1;

  std::string line;
  while (std::getline(std::cin, line)) {
    nixlAgent& agent = *holder;
    std::istringstream in(line);
    std::string command;
    in >> command;
    std::ostringstream out;
    if (command == "md") {
      nixl_blob_t md;
      agent.getLocalMD(md);
      out << "md " << hex(md);
    } else if (command == "addr") {
      out << "addr " << reinterpret_cast<uintptr_t>(memory) << " " << bytes;
    } else if (command == "load") {
      std::string text, remote;
      in >> text;
      const nixl_status_t s = agent.loadRemoteMD(unhex(text), remote);
      out << (s == NIXL_SUCCESS ? "ok " + remote : "err " + std::to_string(s));
    } else if (command == "fill") {
      uint64_t seed = 0;
      in >> seed;
      ferry::core::fill_random(buffer.data(), buffer.size(), seed);
      out << (!vram || ferry::testing::copy_to(gpu.ptr, buffer.data(), bytes) ? "ok" : "err copy to the GPU");
    } else if (command == "hash") {
      size_t offset = 0, length = 0;
      in >> offset >> length;
      out << "hash " << (offset + length <= bytes ? ferry::core::fnv1a(host_view().data() + offset, length) : 0);
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
        const uint64_t h = notifs.empty() ? 0 : ferry::core::fnv1a(host_view().data(), bytes);
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
    } else if (command == "rereg") {  // the same memory registered again (after dereg)
      const nixl_status_t s = agent.registerMem(reg);
      out << (s == NIXL_SUCCESS ? "ok" : "err " + std::to_string(s));
    } else if (command == "reset") {
      std::string new_name;
      in >> new_name;
      // The old agent deregisters and goes first: one registration of the
      // buffer at a time.
      (void)holder->deregisterMem(reg);
      holder.reset();
      holder = start(new_name);
      if (!holder) return 1;
      out << "ok";
    } else {
      out << "err unknown command " << command;
    }
    std::cout << out.str() << std::endl;
  }
  return 0;
}
