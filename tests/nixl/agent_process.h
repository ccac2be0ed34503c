// AgentProcess: a NIXL agent in a second process (nixl_agent_peer), driven
// by one command line at a time on its stdin; each command's answer is one
// line on its stdout. Every read has a deadline.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace ferry::test {

class AgentProcess {
 public:
  // Starts `program` with `args` and the extra environment `env` ("K=V").
  AgentProcess(const std::string& program, std::vector<std::string> args, std::vector<std::string> env = {}) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    args.insert(args.begin(), program);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
    for (auto& e : env) envs.push_back(e);
    std::vector<char*> envp;
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    const int rc = posix_spawn(&pid_, program.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (rc != 0) pid_ = -1;
  }

  ~AgentProcess() {
    if (to_ >= 0) ::close(to_);
    if (from_ >= 0) ::close(from_);
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  bool started() const { return pid_ > 0; }
  void signal(int sig) const { ::kill(pid_, sig); }

  // SIGSTOP, then waits (up to `within`) until the kernel shows the process
  // stopped: a signal is delivered after kill() returns. False if it never
  // showed.
  bool freeze(std::chrono::milliseconds within = std::chrono::seconds(5)) const {
    ::kill(pid_, SIGSTOP);
    const auto deadline = std::chrono::steady_clock::now() + within;
    const std::string stat = "/proc/" + std::to_string(pid_) + "/stat";
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
    const std::string line = command + "\n";
    if (::write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return std::nullopt;
    return read_line(within);
  }

  std::optional<std::string> read_line(std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    for (;;) {
      const size_t nl = buffered_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffered_.substr(0, nl);
        buffered_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      struct pollfd p = {from_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[65536];
      const ssize_t n = ::read(from_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffered_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int to_ = -1;
  int from_ = -1;
  std::string buffered_;
};

}  // namespace ferry::test
