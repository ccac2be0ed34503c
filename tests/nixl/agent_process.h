// AgentProcess: a NIXL agent in a second process (nixl_agent_peer), started
// through the shared spawner (testing/child_process.h) and driven by one
// command line at a time on its stdin; each command's answer is one line on
// its stdout. Every read has a deadline.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "testing/child_process.h"

namespace ferry::test {

class AgentProcess : public testing::ChildProcess {
 public:
  // Starts `program` with `args` and the extra environment `env` ("K=V").
  AgentProcess(const std::string& program, std::vector<std::string> args, std::vector<std::string> env = {})
      : ChildProcess(with_program(program, std::move(args)),
                     {.env = std::move(env), .pipe_stdin = true, .pipe_stdout = true}) {}

  // SIGSTOP, then waits (up to `within`) until the kernel shows the process
  // stopped: a signal is delivered after kill() returns. False if it never
  // showed.
  bool freeze(std::chrono::milliseconds within = std::chrono::seconds(5)) const {
    signal(SIGSTOP);
    const auto deadline = std::chrono::steady_clock::now() + within;
    const std::string stat = "/proc/" + std::to_string(pid()) + "/stat";
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(stat);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      // "pid (comm) S ...": the state follows the last ')'.
      const size_t close = text.rfind(')');
      if (close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'T') return true;
      ::usleep(1000);
    }
    return false;
  }

  // Sends `command` and returns the answer line, or nullopt when none came
  // by `within` (or the process is gone).
  std::optional<std::string> ask(const std::string& command,
                                 std::chrono::milliseconds within = std::chrono::seconds(30)) {
    if (!write_line(command)) return std::nullopt;
    return read_line(within);
  }

 private:
  static std::vector<std::string> with_program(const std::string& program, std::vector<std::string> args) {
    args.insert(args.begin(), program);
    return args;
  }
};

}  // namespace ferry::test
