// The --local target as a child that never outlives the bench (see the header).
#include "ferry/bench_local_target.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "ferry/bench_session.h"

extern char** environ;

namespace ferry::cli {
namespace {

using namespace std::chrono_literals;

// The running target's pid (0: none). A static, because the exit paths that
// must end it (atexit, signal handlers) can reach nothing else; whoever
// exchanges it for 0 first ends and reaps the child.
std::atomic<pid_t> g_target{0};
std::atomic<bool> g_target_once{false};

// Ends the target at once and reaps it. Async-signal-safe.
void kill_target_now() {
  pid_t pid = g_target.exchange(0);
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// SIGPIPE (stdout closed under `| head`), SIGTERM, SIGHUP: the target goes
// first, then the bench dies of the same signal, as it would have.
void on_fatal_signal(int sig) {
  int saved = errno;
  kill_target_now();
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // delivered when this handler returns
  errno = saved;
}

// Once per process: exit() (every die(), every return of the command) and
// the signals above end the target first. A signal the bench was told to
// ignore (nohup, a shell that ignores SIGPIPE) stays ignored.
void guard_exits() {
  static bool done = false;
  if (done) return;
  done = true;
  std::atexit(kill_target_now);
  for (int sig : {SIGPIPE, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = &on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

[[noreturn]] void fail(const std::string& why) {
  kill_target_now();
  die("start the local target", Status(Code::kUnavailable, why));
}

}  // namespace

std::vector<std::string> start_local_targets(const std::vector<std::string>& flags, bool once, size_t count) {
  guard_exits();
  std::vector<std::string> args = {"ferry", "bench", "--listen", "127.0.0.1:0"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail(std::string("pipe: ") + std::strerror(errno));
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    fail(std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    // The child, until exec: async-signal-safe calls only (the bench may
    // have threads). The kernel kills the target when the bench dies; a bench
    // that died before prctl took effect left it to another parent already.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    // The address goes to the pipe: the target's first line on stdout.
    if (fds[1] == STDOUT_FILENO) {
      ::fcntl(STDOUT_FILENO, F_SETFD, 0);
    } else if (::dup2(fds[1], STDOUT_FILENO) < 0) {
      ::_exit(127);
    }
    ::execve("/proc/self/exe", argv.data(), environ);
    ::_exit(127);
  }
  g_target.store(pid);
  g_target_once.store(once);
  ::close(fds[1]);

  // Its first `count` lines, "ferry bench target listening on ADDR", within 30 s.
  std::vector<std::string> addresses;
  std::string line;
  auto give_up = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
    if (left <= 0ms) {
      ::close(fds[0]);
      fail("it did not report its address within 30 s");
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;  // EINTR or the deadline: checked above
    char c = 0;
    ssize_t got = ::read(fds[0], &c, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // it exited (its error is on stderr)
    if (c != '\n') {
      line += c;
      continue;
    }
    auto at = line.rfind(' ');
    if (at == std::string::npos) break;
    addresses.push_back(line.substr(at + 1));
    line.clear();
    if (addresses.size() == count) break;
  }
  ::close(fds[0]);
  if (addresses.size() < count) fail("it exited without reporting its address (its own error, if any, is above)");
  return addresses;
}

std::string start_local_target(const std::vector<std::string>& flags, bool once) {
  return start_local_targets(flags, once, 1)[0];
}

pid_t local_target_pid() { return g_target.load(); }

void stop_local_target() {
  pid_t pid = g_target.load();
  if (pid <= 0) return;
  if (g_target_once.load()) {
    // After its one session it exits by itself; it gets 2 s to do so. Seen
    // exited but not reaped, so that its pid cannot be reused meanwhile.
    for (int i = 0; i < 40; ++i) {
      siginfo_t info{};
      if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) break;
      std::this_thread::sleep_for(50ms);
    }
  }
  kill_target_now();
}

}  // namespace ferry::cli
