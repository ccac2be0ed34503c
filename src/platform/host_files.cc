// Reading and writing /proc and /sys files; errno to Status.
#include "platform/host_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "platform/system_error.h"

namespace ferry::platform {
namespace fs = std::filesystem;

std::string under_root(std::string_view root, std::string_view path) {
  std::string r(root);
  while (!r.empty() && r.back() == '/') r.pop_back();
  std::string p(path);
  if (p.empty() || p.front() != '/') p = "/" + p;
  return r + p;
}

Status errno_status(int err, std::string_view action, const std::string& path) {
  std::string text = errno_message(std::string(action) + " " + path, err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Status(Code::kNotFound, text);
    case EACCES:
    case EPERM:
    case EROFS:
      return Status(Code::kPermissionDenied, text + " (changing it needs root)");
    case EINVAL:
    case ERANGE:
    case EOVERFLOW:
      return Status(Code::kInvalidArgument, text + " (the kernel refused the value)");
    default:
      return Status(Code::kUnavailable, text);
  }
}

Result<std::string> read_text_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "open", path);
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return errno_status(err, "read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Result<std::string> read_trimmed(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::string s, read_text_file(path));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

Status write_text_file(const std::string& path, std::string_view data) {
  // No O_CREAT: a kernel file that is missing means a wrong IRQ or setting,
  // and creating a plain file in its place would hide that.
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "open for writing", path);
  ssize_t n;
  do {
    n = ::write(fd, data.data(), data.size());
  } while (n < 0 && errno == EINTR);
  int err = errno;
  if (n < 0) {
    ::close(fd);
    return errno_status(err, "write \"" + std::string(data.substr(0, data.find('\n'))) + "\" to", path);
  }
  if (::close(fd) != 0) return errno_status(errno, "close", path);
  if (static_cast<size_t>(n) != data.size()) {
    return Status(Code::kUnavailable, "write to " + path + ": short write (" + std::to_string(n) + " of " +
                                          std::to_string(data.size()) + " bytes)");
  }
  return Status::Ok();
}

Status write_file_atomically(const std::string& path, std::string_view data) {
  std::error_code ec;
  fs::path p(path);
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) return errno_status(ec.value(), "create folder", p.parent_path().string());
  }
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, "create", tmp);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(tmp.c_str());
      return errno_status(err, "write", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errno_status(err, "sync", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errno_status(err, "rename to", path);
  }
  return Status::Ok();
}

Result<std::vector<std::string>> list_dir(const std::string& path) {
  std::error_code ec;
  fs::directory_iterator it(path, ec);
  if (ec) return errno_status(ec.value(), "list", path);
  std::vector<std::string> names;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return errno_status(ec.value(), "list", path);
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::string> link_target_name(const std::string& path) {
  std::error_code ec;
  fs::path target = fs::read_symlink(path, ec);
  if (ec) return errno_status(ec.value(), "read link", path);
  return target.filename().string();
}

std::string RootedHostFiles::resolve(std::string_view path) const { return under_root(root_, path); }

Result<std::string> RootedHostFiles::read(std::string_view path) { return read_text_file(resolve(path)); }

Status RootedHostFiles::write(std::string_view path, std::string_view data) {
  return write_text_file(resolve(path), data);
}

}  // namespace ferry::platform
