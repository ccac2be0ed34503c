// The directory tests' servers: a directory server (redis-server or etcd) on
// loopback with a random port and a temporary data directory, started through
// the shared spawner (testing/child_process.h). Every wait has a deadline.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "directory/backend.h"
#include "directory/url.h"
#include "testing/child_process.h"

namespace ferry::test {

// Whether every thread of `pid` is in the stopped state ('T' or 't' in
// /proc/PID/task/TID/stat, after the name's closing parenthesis).
inline bool all_threads_stopped(pid_t pid) {
  std::error_code ec;
  std::filesystem::directory_iterator tasks("/proc/" + std::to_string(pid) + "/task", ec);
  if (ec) return false;
  bool any = false;
  for (const auto& task : tasks) {
    int fd = ::open((task.path() / "stat").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // the thread ended
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
    ::close(fd);
    if (n <= 0) continue;
    std::string stat(buf, static_cast<size_t>(n));
    size_t close_paren = stat.rfind(')');
    if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) return false;
    char state = stat[close_paren + 2];
    if (state != 'T' && state != 't') return false;
    any = true;
  }
  return any;
}

inline uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline std::string find_program(const char* name) {
  for (const char* dir : {"/usr/bin/", "/usr/sbin/", "/usr/local/bin/"}) {
    std::string p = std::string(dir) + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

// A directory server of one kind on 127.0.0.1, in a temporary directory.
class DirectoryServer {
 public:
  enum class Kind { kRedis, kEtcd };

  // The program's path, or "" when it is not installed.
  static std::string program(Kind kind) { return find_program(kind == Kind::kRedis ? "redis-server" : "etcd"); }

  explicit DirectoryServer(Kind kind) : kind_(kind) {
    char tmpl[] = "/tmp/ferry-dir-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl) != nullptr ? tmpl : "/tmp";
    port_ = free_port();
    peer_port_ = free_port();
  }
  ~DirectoryServer() {
    child_.kill_now();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  Kind kind() const { return kind_; }
  uint16_t port() const { return port_; }
  // The URL engines use, with namespace `ns`.
  std::string url(const std::string& ns = "t") const {
    return std::string(kind_ == Kind::kRedis ? "redis" : "etcd") + "://127.0.0.1:" + std::to_string(port_) + "/" + ns;
  }

  // Starts it (again, on the same port; `wipe`: with its data gone) and waits
  // until it answers (false after `within`).
  bool start(bool wipe = false, std::chrono::milliseconds within = std::chrono::seconds(15)) {
    std::error_code ec;
    if (wipe) std::filesystem::remove_all(dir_ + "/data", ec);
    std::filesystem::create_directories(dir_ + "/data", ec);
    std::string prog = program(kind_);
    std::vector<std::string> args;
    if (kind_ == Kind::kRedis) {
      args = {
          prog, "--port", std::to_string(port_), "--bind",           "127.0.0.1", "--save",      "",  "--appendonly",
          "no", "--dir",  dir_ + "/data",        "--protected-mode", "no",        "--daemonize", "no"};
    } else {
      std::string client = "http://127.0.0.1:" + std::to_string(port_);
      std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
      // Short election timings: etcd's shortest lease is 1.5 election timeouts.
      args = {prog,
              "--name",
              "t",
              "--data-dir",
              dir_ + "/data",
              "--listen-client-urls",
              client,
              "--advertise-client-urls",
              client,
              "--listen-peer-urls",
              peer,
              "--initial-advertise-peer-urls",
              peer,
              "--initial-cluster",
              "t=" + peer,
              "--heartbeat-interval",
              "10",
              "--election-timeout",
              "100"};
    }
    child_ = testing::ChildProcess(args, {.log = dir_ + "/server.log"});
    if (!child_.started()) return false;
    auto url = directory::parse_directory_url(this->url());
    auto backend = directory::make_backend(url.value());
    auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = backend->get("t/ping", 1024, std::chrono::steady_clock::now() + std::chrono::milliseconds(500));
      if (r.ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  void kill() { child_.kill_now(); }
  void stop_signal(int sig) { child_.signal(sig); }
  // SIGSTOP, returning once every thread of the server has stopped (within
  // 2 s): a thread running on another CPU, or in a system call, takes the
  // signal a moment after kill() returned, and may answer a request meanwhile.
  bool freeze() {
    child_.signal(SIGSTOP);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < deadline) {
      if (all_threads_stopped(child_.pid())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

 private:
  Kind kind_;
  std::string dir_;
  uint16_t port_ = 0, peer_port_ = 0;
  testing::ChildProcess child_;
};

}  // namespace ferry::test
