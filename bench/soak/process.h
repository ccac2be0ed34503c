// Child processes of the supervisor: started with their stdin and stdout on
// pipes (commands in, event lines out) and their stderr appended to a log
// file, optionally inside a network namespace (`ip netns exec NS`).
//
// Thread-compatible; the supervisor guards its children with one mutex.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ferry/status.h"

namespace ferry::soak {

class Child {
 public:
  // Starts argv[0] (searched in PATH) with `argv`; every stdout line goes to
  // `on_line` from a reader thread of its own.
  static Result<std::unique_ptr<Child>> start(const std::vector<std::string>& argv, const std::string& log_path,
                                              std::function<void(const std::string&)> on_line);
  ~Child();  // kills the process if still running, then reaps it and joins the reader

  pid_t pid() const { return pid_; }
  // Writes a command line to its stdin; false if it is gone.
  bool command(const std::string& line);
  void close_stdin();
  void signal(int sig) const;
  // Reaps the process if it has exited: true and its wait status then.
  bool poll_exit(int* wait_status);
  bool exited() const { return exited_; }
  int wait_status() const { return status_; }

 private:
  Child() = default;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::thread reader_;
};

// Runs a command to its end (at most `timeout_ms`), output to `log_path`.
// Returns its exit code, or -1 if it could not start or ran too long.
int run_command(const std::vector<std::string>& argv, const std::string& log_path, int timeout_ms);

// "exit 3", "killed by SIGKILL".
std::string describe_wait_status(int status);

}  // namespace ferry::soak
