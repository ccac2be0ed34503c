// Threads, descriptors and resident memory of a process, from /proc.
#include "ferry/bench_process_stats.h"

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ferry::cli {
namespace {

Status proc_error(const std::string& path, int err) {
  Code code = err == ENOENT || err == ESRCH   ? Code::kNotFound
              : err == EACCES || err == EPERM ? Code::kPermissionDenied
                                              : Code::kUnavailable;
  return Status(code, path + ": " + std::strerror(err));
}

// The names in directory `path` other than "." and "..".
Result<std::vector<std::string>> list_dir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return proc_error(path, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

}  // namespace

Result<ProcessStats> sample_process(pid_t pid) {
  const std::string root = "/proc/" + std::to_string(pid);
  ProcessStats s;
  std::ifstream status(root + "/status");
  if (!status) return proc_error(root + "/status", errno != 0 ? errno : ENOENT);
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) s.threads = std::atoi(line.c_str() + 8);
    if (line.rfind("VmRSS:", 0) == 0)
      s.rss_bytes = std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;  // "VmRSS:  1234 kB"
  }
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> fds, list_dir(root + "/fd"));
  s.fds = static_cast<int>(fds.size());
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> tasks, list_dir(root + "/task"));
  for (const std::string& tid : tasks) {
    std::ifstream comm(root + "/task/" + tid + "/comm");  // a thread that ended meanwhile reads empty
    std::string name;
    if (std::getline(comm, name) && name.rfind("ferry-", 0) == 0) ++s.engine_threads;
  }
  return s;
}

Result<uint64_t> process_cpu_ns(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return proc_error(path, errno != 0 ? errno : ENOENT);
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields are counted from the last ')'; utime and stime are fields 14
  // and 15, the 12th and 13th after it.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return Status(Code::kDataLoss, path + ": no ')' after the command name");
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 1; i <= 13 && fields >> field; ++i) {
    if (i == 12) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 13) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  if (!fields) return Status(Code::kDataLoss, path + ": fewer fields than utime and stime");
  const long ticks = ::sysconf(_SC_CLK_TCK);
  return (utime + stime) * 1'000'000'000ULL / static_cast<uint64_t>(ticks > 0 ? ticks : 100);
}

Result<uint64_t> threads_on_cpu_ns(pid_t pid) {
  const std::string root = "/proc/" + std::to_string(pid) + "/task";
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> tasks, list_dir(root));
  uint64_t sum = 0;
  for (const std::string& tid : tasks) {
    std::ifstream in(root + "/" + tid + "/schedstat");  // a thread that ended meanwhile reads nothing
    uint64_t on_cpu = 0;
    if (in >> on_cpu) sum += on_cpu;
  }
  return sum;
}

uint64_t process_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

ProcessStats peak(const ProcessStats& a, const ProcessStats& b) {
  return ProcessStats{std::max(a.threads, b.threads), std::max(a.engine_threads, b.engine_threads),
                      std::max(a.fds, b.fds), std::max(a.rss_bytes, b.rss_bytes)};
}

}  // namespace ferry::cli
