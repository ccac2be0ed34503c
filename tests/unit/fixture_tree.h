// Test helpers for the /proc and /sys fixture trees in tests/fixtures/: where
// they are, a temporary copy to change (the checked-in trees are never
// written), an overlay of one tree onto a copy, and a byte-exact listing of a
// tree to compare before and after.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace ferry::testing {

// tests/fixtures/<name> in the source tree. The build names the folder
// (FERRY_TEST_FIXTURES): __FILE__ may be relative to the build tree, as it is
// when ccache compiles with paths relative to the source root.
inline std::string fixture_dir(const std::string& name) {
  return (std::filesystem::path(FERRY_TEST_FIXTURES) / name).string();
}

// A fresh temporary folder, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ferry-tune-test-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (p != nullptr) path_ = p;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    // Undo chmods a test made, so that removal works when not root.
    for (auto it = std::filesystem::recursive_directory_iterator(path_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_symlink())
        std::filesystem::permissions(it->path(), std::filesystem::perms::owner_all, std::filesystem::perm_options::add,
                                     ec);
    }
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Copies fixture `name` into a new temporary folder (symlinks stay symlinks).
class FixtureCopy {
 public:
  explicit FixtureCopy(const std::string& name) {
    root_ = dir_.path() + "/root";
    std::error_code ec;
    std::filesystem::copy(fixture_dir(name), root_,
                          std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks, ec);
    EXPECT_FALSE(ec) << "copying fixture " << name << ": " << ec.message();
  }
  // The root of the copy (pass as --root).
  const std::string& root() const { return root_; }
  // A path outside the root in the same temporary folder (for backups).
  std::string aside(const std::string& name) const { return dir_.path() + "/" + name; }
  // Copies every file of fixture `name` over this copy.
  void overlay(const std::string& name) {
    std::error_code ec;
    std::filesystem::copy(fixture_dir(name), root_,
                          std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing |
                              std::filesystem::copy_options::copy_symlinks,
                          ec);
    EXPECT_FALSE(ec) << "overlaying fixture " << name << ": " << ec.message();
  }

 private:
  TempDir dir_;
  std::string root_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// Every file (exact bytes) and symlink (its target) under `root`, by relative
// path; folders are implied by their contents.
inline std::map<std::string, std::string> tree_contents(const std::string& root) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::string rel = std::filesystem::relative(it->path(), root).string();
    if (it->is_symlink()) {
      out[rel] = "-> " + std::filesystem::read_symlink(it->path()).string();
    } else if (it->is_regular_file()) {
      out[rel] = read_file(it->path().string());
    } else if (it->is_directory() && std::filesystem::is_empty(it->path())) {
      out[rel] = "(empty folder)";
    }
  }
  return out;
}

// The relative paths whose content differs between two listings.
inline std::string tree_differences(const std::map<std::string, std::string>& a,
                                    const std::map<std::string, std::string>& b) {
  std::string out;
  for (const auto& [p, v] : a) {
    auto it = b.find(p);
    if (it == b.end())
      out += "only before: " + p + "\n";
    else if (it->second != v)
      out += "changed: " + p + "\n";
  }
  for (const auto& [p, v] : b) {
    if (a.count(p) == 0) out += "only after: " + p + "\n";
  }
  return out;
}

}  // namespace ferry::testing
