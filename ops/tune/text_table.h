// TextTable: the plain-text tables of `ferry tune plan` and its kin. Column
// widths come from the widest cell, so a long value never runs into the next
// column (fixed widths once printed "no cpufreq (VM or firmware)performance").
#pragma once

#include <string>
#include <vector>

namespace ferry::tune {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Every row on its own line, cells left-aligned, at least kGap spaces
  // between columns; the last cell of a row is not padded.
  std::string render() const;

  static constexpr size_t kGap = 2;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace ferry::tune
