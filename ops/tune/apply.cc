// Applying file changes with a backup, read-back and rollback; resetting.
#include "tune/apply.h"

#include <unistd.h>

#include <cerrno>
#include <set>

#include "platform/text.h"

namespace ferry::tune {
namespace {

constexpr std::string_view kHeader = "# ferry tune backup v1";

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Result<std::string> unescape(std::string_view s, const std::string& where) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) return Status(Code::kInvalidArgument, where + ": '\\' at the end of the line");
    switch (s[i]) {
      case '\\':
        out += '\\';
        break;
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      default:
        return Status(Code::kInvalidArgument, where + ": unknown escape '\\" + std::string(1, s[i]) + "'");
    }
  }
  return out;
}

// Puts the backup file back as it was before this apply: its old text, or
// no file. Returns what went wrong, for the error message.
std::string restore_backup_file(const std::string& path, bool existed, const std::string& old_text) {
  if (existed) {
    Status s = platform::write_file_atomically(path, old_text);
    return s.ok() ? "" : "; restoring the backup file failed: " + s.message();
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return "; removing the new backup file failed: " + platform::errno_status(errno, "unlink", path).message();
  }
  return "";
}

}  // namespace

const std::string* Backup::find(const std::string& path) const {
  for (const auto& [p, v] : entries) {
    if (p == path) return &v;
  }
  return nullptr;
}

std::string format_backup(const Backup& backup) {
  std::string out = std::string(kHeader) + "\n";
  for (const auto& [path, value] : backup.entries) out += escape(path) + "\t" + escape(value) + "\n";
  return out;
}

Result<Backup> parse_backup(std::string_view text, std::string_view what) {
  Backup b;
  size_t line_no = 0;
  std::set<std::string> seen;
  for (std::string_view line : platform::split_lines(text)) {
    ++line_no;
    std::string where = std::string(what) + ": line " + std::to_string(line_no);
    if (line_no == 1) {
      if (line != kHeader) {
        return Status(Code::kInvalidArgument,
                      where + ": expected \"" + std::string(kHeader) + "\"; not a ferry backup");
      }
      continue;
    }
    if (line.empty()) continue;
    size_t tab = line.find('\t');
    if (tab == std::string_view::npos) return Status(Code::kInvalidArgument, where + ": expected path<TAB>value");
    FERRY_ASSIGN_OR_RETURN(std::string path, unescape(line.substr(0, tab), where));
    FERRY_ASSIGN_OR_RETURN(std::string value, unescape(line.substr(tab + 1), where));
    if (path.empty() || path.front() != '/') {
      return Status(Code::kInvalidArgument, where + ": path \"" + path + "\" is not absolute");
    }
    if (!seen.insert(path).second) return Status(Code::kInvalidArgument, where + ": " + path + " appears twice");
    b.entries.emplace_back(std::move(path), std::move(value));
  }
  if (line_no == 0) return Status(Code::kInvalidArgument, std::string(what) + ": empty; not a ferry backup");
  return b;
}

Result<Backup> load_backup(const std::string& path) {
  auto text = platform::read_text_file(path);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) {
      return Status(Code::kNotFound, "no backup at " + path + " (nothing was applied, or it was already reset)");
    }
    return text.status();
  }
  return parse_backup(*text, path);
}

std::string default_backup_path(std::string_view root) {
  return platform::under_root(root, "/var/lib/ferry/tune-backup.txt");
}

Result<ApplyReport> apply_changes(platform::HostFiles& files, const std::vector<FileChange>& changes,
                                  const std::string& backup_path, bool dry_run) {
  ApplyReport report;
  // 1. Read everything first: a missing file stops us before any write.
  std::set<std::string> paths;
  for (const FileChange& c : changes) {
    if (!paths.insert(c.path).second) {
      return Status(Code::kInvalidArgument, c.what + ": " + c.path + " is changed twice in one plan");
    }
    auto before = files.read(c.path);
    if (!before.ok()) return before.status().with_context(c.what + ": cannot read current value");
    ApplyStep step;
    step.change = c;
    step.before = std::move(before).value();
    step.needed = !same_value(step.before, c.value, c.compare);
    if (!step.needed) ++report.unchanged;
    report.steps.push_back(std::move(step));
  }
  if (dry_run || report.unchanged == static_cast<int>(report.steps.size())) return report;

  // 2. Save the originals; an existing backup keeps its (older) originals.
  bool existed = false;
  std::string old_text;
  Backup backup;
  if (auto text = platform::read_text_file(backup_path); text.ok()) {
    existed = true;
    old_text = *text;
    FERRY_ASSIGN_OR_RETURN(backup, parse_backup(old_text, backup_path));
  } else if (text.status().code() != Code::kNotFound) {
    return text.status().with_context("reading the existing backup");
  }
  for (const ApplyStep& s : report.steps) {
    if (s.needed && backup.find(s.change.path) == nullptr) backup.entries.emplace_back(s.change.path, s.before);
  }
  FERRY_RETURN_IF_ERROR(platform::write_file_atomically(backup_path, format_backup(backup))
                            .with_context("saving the backup before any change; nothing was changed"));

  // 3. Write and read back, one at a time; on failure undo in reverse order.
  for (size_t i = 0; i < report.steps.size(); ++i) {
    const ApplyStep& s = report.steps[i];
    if (!s.needed) continue;
    Status st = files.write(s.change.path, s.change.value + "\n");
    // A kernel file takes a value in one write() or not at all: when the
    // write failed, this file is unchanged and needs no undo.
    const bool wrote = st.ok();
    if (st.ok()) {
      auto back = files.read(s.change.path);
      if (!back.ok()) {
        st = back.status().with_context("reading back");
      } else if (!same_value(*back, s.change.value, s.change.compare)) {
        std::string got = *back;
        while (!got.empty() && got.back() == '\n') got.pop_back();
        st = Status(Code::kDataLoss, "wrote \"" + s.change.value + "\" to " + files.resolve(s.change.path) +
                                         " but read back \"" + got + "\"");
      }
    }
    if (st.ok()) {
      ++report.written;
      continue;
    }
    // Undo step i (when its value went in but read back wrong) down to 0.
    std::string undo_errors;
    int undone = 0;
    for (size_t j = wrote ? i + 1 : i; j-- > 0;) {
      const ApplyStep& u = report.steps[j];
      if (!u.needed) continue;
      Status w = files.write(u.change.path, u.before);
      auto back = w.ok() ? files.read(u.change.path) : Result<std::string>(w);
      if (!back.ok()) {
        undo_errors += "; restoring " + u.change.what + " failed: " + back.status().message();
      } else if (*back != u.before && !same_value(*back, u.before, u.change.compare)) {
        undo_errors += "; restoring " + u.change.what + " read back a different value";
      } else if (j < i) {
        ++undone;
      }
    }
    std::string message = "apply stopped at " + s.change.what + ": " + st.message();
    if (undo_errors.empty()) {
      message += "; restored the " + std::to_string(undone) + " value(s) written before it, nothing is left changed";
      message += restore_backup_file(backup_path, existed, old_text);
    } else {
      message += undo_errors + "; the backup at " + backup_path + " still holds every original (run ferry tune reset)";
    }
    return Status(st.code(), message);
  }
  return report;
}

Result<ResetReport> reset_from_backup(platform::HostFiles& files, const std::string& backup_path) {
  FERRY_ASSIGN_OR_RETURN(Backup backup, load_backup(backup_path));
  ResetReport report;
  Status first;
  int failures = 0;
  for (const auto& [path, original] : backup.entries) {
    auto now = files.read(path);
    if (now.ok() && *now == original) {
      ++report.unchanged;
      continue;
    }
    Status st = files.write(path, original);
    if (st.ok()) {
      auto back = files.read(path);
      if (!back.ok()) {
        st = back.status().with_context("reading back");
      } else if (*back != original && !same_value(*back, original, CompareAs::kWords)) {
        st = Status(Code::kDataLoss, "restored " + files.resolve(path) + " but it reads back differently");
      }
    }
    if (!st.ok()) {
      if (first.ok()) first = st;
      ++failures;
      continue;
    }
    ++report.restored;
    report.paths.push_back(path);
  }
  if (!first.ok()) {
    std::string more = failures > 1 ? " (and " + std::to_string(failures - 1) + " more)" : "";
    return Status(first.code(), "reset: " + first.message() + more + "; the backup at " + backup_path +
                                    " is kept, fix the cause and run reset again");
  }
  if (::unlink(backup_path.c_str()) != 0) {
    return platform::errno_status(errno, "reset done, but removing the backup", backup_path);
  }
  return report;
}

}  // namespace ferry::tune
