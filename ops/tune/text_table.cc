// Column widths from the content, then one line per row.
#include "tune/text_table.h"

#include <algorithm>

namespace ferry::tune {

std::string TextTable::render() const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) out.append(width[i] - row[i].size() + kGap, ' ');
    }
    out += '\n';
  }
  return out;
}

}  // namespace ferry::tune
