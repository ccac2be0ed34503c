// ChildProcess (child_process.h): posix_spawn with pipes, and the waits on
// the program, each bounded by its caller's deadline.
#include "testing/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <utility>

extern char** environ;

namespace ferry::testing {

using Clock = std::chrono::steady_clock;

ChildProcess::ChildProcess(std::vector<std::string> argv, ChildOptions options) {
  // O_CLOEXEC: the program keeps only the ends dup2'd onto its 0 and 1, so
  // it sees stdin end when we close ours, and no other child holds a copy.
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  if (options.pipe_stdin && ::pipe2(in, O_CLOEXEC) != 0) return;
  if (options.pipe_stdout && ::pipe2(out, O_CLOEXEC) != 0) {
    if (options.pipe_stdin) {
      ::close(in[0]);
      ::close(in[1]);
    }
    return;
  }
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
  for (auto& e : options.env) envs.push_back(e);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!options.log.empty()) {
    posix_spawn_file_actions_addopen(&fa, 2, options.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (!options.pipe_stdout) posix_spawn_file_actions_adddup2(&fa, 2, 1);
  }
  if (options.pipe_stdin) posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  if (options.pipe_stdout) posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  const int rc = argv.empty() ? EINVAL : posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (options.pipe_stdin) ::close(in[0]);
  if (options.pipe_stdout) ::close(out[1]);
  to_ = in[1];
  from_ = out[0];
  if (rc != 0) {
    pid_ = -1;
    close_pipes();
  }
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      reaped_(std::exchange(other.reaped_, false)),
      to_(std::exchange(other.to_, -1)),
      from_(std::exchange(other.from_, -1)),
      buffered_(std::move(other.buffered_)),
      line_(std::move(other.line_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    close_pipes();
    kill_now();
    pid_ = std::exchange(other.pid_, -1);
    reaped_ = std::exchange(other.reaped_, false);
    to_ = std::exchange(other.to_, -1);
    from_ = std::exchange(other.from_, -1);
    buffered_ = std::move(other.buffered_);
    line_ = std::move(other.line_);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  close_pipes();
  kill_now();
}

ChildProcess ChildProcess::start_ready(std::vector<std::string> argv, std::chrono::milliseconds ready_within,
                                       ChildOptions options) {
  options.pipe_stdout = true;
  ChildProcess child(std::move(argv), std::move(options));
  if (child.started()) child.wait_ready(ready_within);
  return child;
}

const std::string& ChildProcess::wait_ready(std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  size_t nl;
  while ((nl = buffered_.find('\n')) == std::string::npos && read_more(deadline)) {
  }
  line_ = buffered_.substr(0, nl);
  buffered_.clear();
  if (from_ >= 0) ::close(from_);
  from_ = -1;
  return line_;
}

bool ChildProcess::write_line(const std::string& text) {
  if (to_ < 0) return false;
  const std::string line = text + "\n";
  return ::write(to_, line.data(), line.size()) == static_cast<ssize_t>(line.size());
}

std::optional<std::string> ChildProcess::read_line(std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  for (;;) {
    const size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    if (!read_more(deadline)) return std::nullopt;
  }
}

bool ChildProcess::read_more(Clock::time_point deadline) {
  if (from_ < 0) return false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    struct pollfd p = {from_, POLLIN, 0};
    // Woken early by a signal (or an odd revents): the deadline is checked again.
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[65536];
    const ssize_t n = ::read(from_, chunk, sizeof chunk);
    if (n <= 0) return false;
    buffered_.append(chunk, static_cast<size_t>(n));
    return true;
  }
}

void ChildProcess::signal(int sig) const {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

void ChildProcess::kill_now() {
  if (pid_ <= 0 || reaped_) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  reaped_ = true;
}

int ChildProcess::wait_exit(std::chrono::milliseconds within) {
  if (pid_ <= 0 || reaped_) return -1;
  const auto deadline = Clock::now() + within;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void ChildProcess::close_pipes() {
  if (to_ >= 0) ::close(to_);
  if (from_ >= 0) ::close(from_);
  to_ = from_ = -1;
}

}  // namespace ferry::testing
