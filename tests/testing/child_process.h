// ChildProcess: a helper program the tests run as a real second process (a
// test peer, a directory server, a NIXL agent), written once for every test
// folder: it starts the program, reads its "ready" line or talks to it a line
// at a time, and stops it. Every wait takes a deadline, so a helper that hangs
// fails its test instead of hanging the test binary.
//
// Example:
//   auto peer = testing::ChildProcess::start_ready({"/path/to/peer", "--listen", "127.0.0.1:0"});
//   ASSERT_EQ(peer.line().rfind("ADDR ", 0), 0u) << peer.line();
//   ...
//   EXPECT_EQ(peer.wait_exit(10s), 0);
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ferry::testing {

// How the program starts, besides its arguments.
struct ChildOptions {
  // Added to this process's environment ("K=V", later ones win).
  std::vector<std::string> env = {};
  // Appended to (created 0644 if missing): the program's stderr, and its
  // stdout too unless stdout is piped. Empty: both are this process's.
  std::string log = {};
  // A pipe into the program's stdin (write_line) and out of its stdout
  // (read_line, wait_ready).
  bool pipe_stdin = false;
  bool pipe_stdout = false;
};

// A program started by posix_spawn. Not thread-safe: one thread drives it.
// Movable, not copyable; the destructor closes the pipes, then kills
// (SIGKILL) and reaps the program unless wait_exit() already reaped it.
class ChildProcess {
 public:
  ChildProcess() = default;
  // Starts argv[0] (a path, not searched in PATH) with `argv`. Does not block
  // on the program. started() says whether it started.
  explicit ChildProcess(std::vector<std::string> argv, ChildOptions options = {});
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  // Starts `argv` with its stdout piped and waits (wait_ready) up to
  // `ready_within` for the first line it prints; line() holds it.
  static ChildProcess start_ready(std::vector<std::string> argv,
                                  std::chrono::milliseconds ready_within = std::chrono::seconds(20),
                                  ChildOptions options = {});

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // Reads stdout up to its first newline, its end or `within`, whichever
  // comes first, then closes it (a later write by the program gets EPIPE or
  // SIGPIPE). Returns the line without its newline, or what came before the
  // end or the deadline ("" if nothing); line() keeps it. Blocks.
  const std::string& wait_ready(std::chrono::milliseconds within);
  // The line wait_ready() read.
  const std::string& line() const { return line_; }

  // Writes `text` and a newline to stdin. False if it did not all go at once.
  bool write_line(const std::string& text);
  // The next line of stdout (without its newline), or nullopt once `within`
  // passed or stdout ended first. Blocks.
  std::optional<std::string> read_line(std::chrono::milliseconds within);

  // Sends `sig` (nothing once reaped or if it never started).
  void signal(int sig) const;
  // SIGKILL, and reaps it. Blocks until it is gone.
  void kill_now();
  // Waits up to `within` for it to exit, and reaps it: its exit code,
  // 128 + the signal that killed it, or -1 if it still runs (or never ran).
  int wait_exit(std::chrono::milliseconds within);

 private:
  // Reads what stdout has into buffered_, waiting until `deadline` for a
  // first byte. False at the deadline, at its end or on an error.
  bool read_more(std::chrono::steady_clock::time_point deadline);
  void close_pipes();

  pid_t pid_ = -1;
  bool reaped_ = false;
  int to_ = -1;    // its stdin
  int from_ = -1;  // its stdout
  std::string buffered_;
  std::string line_;
};

}  // namespace ferry::testing
