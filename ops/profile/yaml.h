// The small YAML subset of a run's metadata_rank_N.yml: block maps with plain
// keys, block lists, and scalars, plain or double-quoted. The writer quotes
// every scalar that plain YAML would read differently (":", "#", quotes,
// leading or trailing space, newlines, empty text, words like "true" or
// "null"), so that PyYAML and this parser read back the same strings.
//
// Example:
//   YamlNode m = YamlNode::map();
//   m.set("gpu", YamlNode::scalar("NVIDIA H200"));
//   std::string text = to_yaml(m);        // gpu: NVIDIA H200
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/status.h"

namespace ferry::profile {

class YamlNode {
 public:
  enum class Kind { kScalar, kMap, kList };

  static YamlNode scalar(std::string text);
  static YamlNode map();
  static YamlNode list();

  Kind kind() const { return kind_; }
  // REQUIRES: kind() == kScalar.
  const std::string& text() const { return text_; }
  // Maps: entries in insertion order. set() replaces an existing key.
  YamlNode& set(std::string key, YamlNode value);
  // The value at `key`, or nullptr (also for non-maps).
  const YamlNode* find(std::string_view key) const;
  const std::vector<std::pair<std::string, YamlNode>>& entries() const { return entries_; }
  // Lists.
  YamlNode& push(YamlNode value);
  const std::vector<YamlNode>& items() const { return items_; }

  friend bool operator==(const YamlNode&, const YamlNode&) = default;

 private:
  Kind kind_ = Kind::kScalar;
  std::string text_;
  std::vector<std::pair<std::string, YamlNode>> entries_;
  std::vector<YamlNode> items_;
};

// The document for `root` (a map or list), two spaces per level, "\n" ended.
// `comment`, if not empty, becomes "# ..." lines at the top.
std::string to_yaml(const YamlNode& root, std::string_view comment = {});

// Reads what to_yaml writes. kDataLoss with the line number for anything
// outside the subset (tabs, flow collections other than {} and [], anchors,
// bad indentation, a bad escape).
Result<YamlNode> parse_yaml(std::string_view text);

}  // namespace ferry::profile
