// Reading and writing the small text files of /proc and /sys, and the seam
// through which `ferry tune` changes them.
//
// Kernel files want one read() and one write() each (a value split across two
// writes is two values), and their errors mean specific things: EACCES/EPERM
// is "run as root", EINVAL is "the kernel refused this value", EIO on an IRQ
// is "this interrupt's affinity is managed by the kernel". These helpers keep
// that in one place and turn errno into a Status that names the file.
//
// HostFiles is the seam (in the manner of leveldb's Env): tune's apply and
// reset change the host only through it, so tests inject a failure at any
// write and check that nothing is left half-applied.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry::platform {

// Joins a root and an absolute path inside it: ("/tmp/fx", "/sys/x") ->
// "/tmp/fx/sys/x"; ("", "/sys/x") and ("/", "/sys/x") -> "/sys/x".
std::string under_root(std::string_view root, std::string_view path);

// Reads a whole file. kNotFound when missing, kPermissionDenied when not
// readable, kUnavailable for other errors (EIO, EISDIR), naming `path`.
Result<std::string> read_text_file(const std::string& path);

// The file's content without trailing blanks and newlines ("1500\n" -> "1500").
Result<std::string> read_trimmed(const std::string& path);

// Writes `data` with a single write() after truncating, as kernel files need.
// kNotFound when the file (or its folder) is missing, kPermissionDenied on
// EACCES/EPERM/EROFS, kInvalidArgument when the kernel refuses the value
// (EINVAL, ERANGE), kUnavailable otherwise (EIO, EISDIR, short write).
Status write_text_file(const std::string& path, std::string_view data);

// Writes `data` to `path` through a temporary file in the same folder and a
// rename, so a reader never sees half a file; creates missing parent folders.
// For ferry's own files (backups, snapshots), not for kernel files.
Status write_file_atomically(const std::string& path, std::string_view data);

// Names in a folder (no "." or ".."), sorted. kNotFound when missing.
Result<std::vector<std::string>> list_dir(const std::string& path);

// The last component of the target of symlink `path` ("../../gve" -> "gve").
// kNotFound when `path` is not a symlink.
Result<std::string> link_target_name(const std::string& path);

// Status text for an errno value and a path: "open /x/y: Permission denied",
// with a code chosen from the error (kNotFound for ENOENT, kPermissionDenied
// for EACCES, ...). For errors that are not about a file: system_error.h.
Status errno_status(int err, std::string_view action, const std::string& path);

// The files of one host (or of a fixture tree) addressed by absolute paths
// inside it ("/proc/irq/45/smp_affinity_list"). Implementations decide where
// that lives. Thread-compatible.
class HostFiles {
 public:
  virtual ~HostFiles() = default;
  // The full path on this machine: root + path.
  virtual std::string resolve(std::string_view path) const = 0;
  // Reads the file; codes as read_text_file.
  virtual Result<std::string> read(std::string_view path) = 0;
  // Writes the file; codes as write_text_file.
  virtual Status write(std::string_view path, std::string_view data) = 0;
};

// HostFiles over the real filesystem under `root` ("" or "/" = this host).
class RootedHostFiles : public HostFiles {
 public:
  explicit RootedHostFiles(std::string root) : root_(std::move(root)) {}
  std::string resolve(std::string_view path) const override;
  Result<std::string> read(std::string_view path) override;
  Status write(std::string_view path, std::string_view data) override;

 private:
  std::string root_;
};

}  // namespace ferry::platform
