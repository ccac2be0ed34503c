// PeerProcess: ferry_test_peer as a real second process, through the shared
// spawner (testing/child_process.h): started, its ready line read within a
// deadline, and stopped politely or with a signal.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "testing/child_process.h"

namespace ferry::test {

class PeerProcess : public testing::ChildProcess {
 public:
  // Starts the peer with `args`, extra environment `env` ("K=V"), and waits up
  // to `ready_within` for its first line of output (line()).
  PeerProcess(std::vector<std::string> args, std::vector<std::string> env = {},
              std::chrono::milliseconds ready_within = std::chrono::seconds(20))
      : ChildProcess(start_ready(with_program(std::move(args)), ready_within, {.env = std::move(env)})) {}

  // "ADDR host:port" -> "host:port".
  std::string address() const { return line().rfind("ADDR ", 0) == 0 ? line().substr(5) : std::string(); }

 private:
  static std::vector<std::string> with_program(std::vector<std::string> args) {
    args.insert(args.begin(), FERRY_TEST_PEER);
    return args;
  }
};

}  // namespace ferry::test
