// PeerProcess: starts ferry_test_peer as a real second process, reads the
// line it prints when ready, and stops it (politely, or with a signal).
// Every wait has a deadline.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace ferry::test {

class PeerProcess {
 public:
  // Starts the peer with `args`, extra environment `env` ("K=V"), and waits up
  // to `ready_within` for its first line of output.
  PeerProcess(std::vector<std::string> args, std::vector<std::string> env = {},
              std::chrono::milliseconds ready_within = std::chrono::seconds(20)) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    args.insert(args.begin(), FERRY_TEST_PEER);
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
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    int rc = posix_spawn(&pid_, FERRY_TEST_PEER, &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    if (rc != 0) {
      pid_ = -1;
      ::close(fds[0]);
      return;
    }
    auto deadline = std::chrono::steady_clock::now() + ready_within;
    char c;
    while (std::chrono::steady_clock::now() < deadline) {
      struct pollfd p = {fds[0], POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      if (::read(fds[0], &c, 1) != 1 || c == '\n') break;
      line_ += c;
    }
    ::close(fds[0]);
  }

  ~PeerProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  const std::string& line() const { return line_; }
  // "ADDR host:port" -> "host:port".
  std::string address() const { return line_.rfind("ADDR ", 0) == 0 ? line_.substr(5) : std::string(); }

  void signal(int sig) const { ::kill(pid_, sig); }

  // Waits up to `within` for the process to exit; returns its exit code,
  // 128+signal if killed, or -1 if it is still running.
  int wait_exit(std::chrono::milliseconds within) {
    auto deadline = std::chrono::steady_clock::now() + within;
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
        return -1;
      }
      if (std::chrono::steady_clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string line_;
};

}  // namespace ferry::test
