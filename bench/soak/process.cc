// Starting, watching and stopping the supervisor's children (see process.h).
#include "soak/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "soak/report_line.h"

extern char** environ;

namespace ferry::soak {

namespace {

Result<pid_t> spawn(const std::vector<std::string>& argv, int in_fd, int out_fd, int err_fd) {
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (in_fd >= 0) posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  if (err_fd >= 0) posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return Status(Code::kUnavailable, "cannot start " + argv[0] + ": " + ::strerror(rc));
  return pid;
}

}  // namespace

Result<std::unique_ptr<Child>> Child::start(const std::vector<std::string>& argv, const std::string& log_path,
                                            std::function<void(const std::string&)> on_line) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return Status(Code::kResourceExhausted, "pipe");
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return Status(Code::kResourceExhausted, "pipe");
  }
  int err = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  auto pid = spawn(argv, in[0], out[1], err);
  ::close(in[0]);
  ::close(out[1]);
  if (err >= 0) ::close(err);
  if (!pid.ok()) {
    ::close(in[1]);
    ::close(out[0]);
    return pid.status();
  }
  std::unique_ptr<Child> c(new Child());
  c->pid_ = pid.value();
  c->stdin_fd_ = in[1];
  int fd = out[0];
  c->reader_ = std::thread([fd, on_line = std::move(on_line)] {
    name_this_thread("soak-reader");
    std::string buf;
    char chunk[4096];
    // Blocks until the child writes or exits (EOF): the pipe's write end
    // lives only in the child.
    for (;;) {
      ssize_t n = ::read(fd, chunk, sizeof(chunk));
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        on_line(buf.substr(0, nl));
        buf.erase(0, nl + 1);
      }
    }
    ::close(fd);
  });
  return c;
}

Child::~Child() {
  if (!exited_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
    exited_ = true;
  }
  close_stdin();
  if (reader_.joinable()) reader_.join();
}

bool Child::command(const std::string& line) {
  if (stdin_fd_ < 0) return false;
  std::string s = line + "\n";
  // A stopped child's pipe may be full; never block the supervisor on it.
  int flags = ::fcntl(stdin_fd_, F_GETFL);
  ::fcntl(stdin_fd_, F_SETFL, flags | O_NONBLOCK);
  bool ok = ::write(stdin_fd_, s.data(), s.size()) == static_cast<ssize_t>(s.size());
  ::fcntl(stdin_fd_, F_SETFL, flags);
  return ok;
}

void Child::close_stdin() {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  stdin_fd_ = -1;
}

void Child::signal(int sig) const {
  if (!exited_) ::kill(pid_, sig);
}

bool Child::poll_exit(int* wait_status) {
  if (exited_) {
    *wait_status = status_;
    return true;
  }
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r != pid_) return false;
  exited_ = true;
  status_ = st;
  *wait_status = st;
  return true;
}

int run_command(const std::vector<std::string>& argv, const std::string& log_path, int timeout_ms) {
  int err = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  auto pid = spawn(argv, -1, err, err);
  if (err >= 0) ::close(err);
  if (!pid.ok()) return -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int st = 0;
    if (::waitpid(pid.value(), &st, WNOHANG) == pid.value()) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid.value(), SIGKILL);
      ::waitpid(pid.value(), &st, 0);
      return -1;
    }
    // `ip` ends within milliseconds; polling at 20 ms keeps the timeout simple.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string describe_wait_status(int st) {
  if (WIFEXITED(st)) return "exit " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("killed by SIG") + ::sigabbrev_np(WTERMSIG(st));
  return "status " + std::to_string(st);
}

}  // namespace ferry::soak
