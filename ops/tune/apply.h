// Carrying out a tuning plan safely, and undoing it: `ferry tune apply` and
// `ferry tune reset`.
//
// apply_changes reads every file first (a missing IRQ stops it before any
// write), saves the original bytes of each file it will change to the backup
// file, then writes one value at a time and reads it back. If a write or a
// read-back fails, everything written so far is restored from the original
// bytes and the backup file returns to its earlier state: nothing is left
// half-applied. A backup that already exists (an earlier apply) keeps its
// originals, so the backup always holds the state from before ferry.
//
// reset_from_backup writes every original back, byte for byte, checks each,
// and deletes the backup file when all succeeded.
//
// Backup file format (text, one entry per line, escaped with \\, \n, \t):
//   # ferry tune backup v1
//   /proc/irq/45/smp_affinity_list<TAB>0-207\n
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ferry/status.h"
#include "platform/host_files.h"
#include "tune/file_change.h"

namespace ferry::tune {

// Original contents by path inside the root, in the order they were saved.
struct Backup {
  std::vector<std::pair<std::string, std::string>> entries;
  // The saved original of `path`, or nullptr.
  const std::string* find(const std::string& path) const;
};

std::string format_backup(const Backup& backup);
// kInvalidArgument (naming `what` and the line) for a malformed backup.
Result<Backup> parse_backup(std::string_view text, std::string_view what);
// kNotFound when `path` does not exist.
Result<Backup> load_backup(const std::string& path);

struct ApplyStep {
  FileChange change;
  std::string before;  // the file's content before (exact bytes)
  bool needed = true;  // false: already holds the value
};

struct ApplyReport {
  std::vector<ApplyStep> steps;  // every change, in order
  int written = 0;               // files changed (0 on a dry run)
  int unchanged = 0;             // already right
};

// Applies `changes` through `files`, with the backup at `backup_path` (a path
// on this machine, not inside the root). With `dry_run`, reads and compares
// only: nothing is written, the backup included. Blocks on file I/O.
// Errors, each naming the file and the change: kNotFound (a file to change is
// missing: no write happened), kPermissionDenied (not root), kInvalidArgument
// (the kernel refused a value), kDataLoss (a value read back differs),
// kUnavailable (other I/O). On any error after the first write, what was
// written is restored; the message says so, or which restores failed.
Result<ApplyReport> apply_changes(platform::HostFiles& files, const std::vector<FileChange>& changes,
                                  const std::string& backup_path, bool dry_run);

struct ResetReport {
  int restored = 0;   // files written back
  int unchanged = 0;  // already held their original
  std::vector<std::string> paths;
};

// Restores every file in the backup at `backup_path`, checking each byte for
// byte, then removes the backup. kNotFound when there is no backup; on
// failures it restores what it can, keeps the backup, and returns the first
// error with a count of the others.
Result<ResetReport> reset_from_backup(platform::HostFiles& files, const std::string& backup_path);

// Where apply keeps its backup by default: <root>/var/lib/ferry/tune-backup.txt.
std::string default_backup_path(std::string_view root);

}  // namespace ferry::tune
