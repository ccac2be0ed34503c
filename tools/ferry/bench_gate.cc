// FileGate: rounds of files in a shared directory.
#include "ferry/bench_gate.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace ferry::cli {

Result<FileGate> FileGate::parse(const std::string& spec) {
  size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
    return Status(Code::kInvalidArgument, "--gate takes DIR:N, got '" + spec + "'");
  }
  FileGate g;
  g.dir_ = spec.substr(0, colon);
  std::string n = spec.substr(colon + 1);
  if (n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos || std::stoi(n) < 1) {
    return Status(Code::kInvalidArgument, "--gate: N must be a count from 1 to 9999, got '" + n + "'");
  }
  g.count_ = std::stoi(n);
  struct stat st {};
  if (::stat(g.dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status(Code::kInvalidArgument, "--gate: " + g.dir_ + " is not a directory");
  }
  return g;
}

namespace {

int arrived(const std::string& dir, const std::string& prefix) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (struct dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ++n;
  }
  ::closedir(d);
  return n;
}

}  // namespace

Status FileGate::pass(Deadline deadline) {
  std::string prefix = std::to_string(++round_) + ".";
  std::string mine = dir_ + "/" + prefix + std::to_string(::getpid());
  int fd = ::open(mine.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return Status(Code::kUnavailable, "--gate: cannot create " + mine + ": " + std::strerror(errno));
  ::close(fd);
  for (;;) {
    int n = arrived(dir_, prefix);
    if (n < 0) return Status(Code::kUnavailable, "--gate: cannot read " + dir_ + ": " + std::strerror(errno));
    if (n >= count_) return Status();
    if (Clock::now() >= deadline) {
      return Status(Code::kDeadlineExceeded, "--gate: " + std::to_string(n) + " of " + std::to_string(count_) +
                                                 " processes reached round " + std::to_string(round_));
    }
    // Polled: processes share no primitive but the directory, and a round
    // waits at most for the slowest process's warm-up.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace ferry::cli
