// CSV as RFC 4180 writes it: fields separated by commas, a field that holds a
// comma, a double quote, CR, LF or leading/trailing space is quoted, and a
// quote inside a quoted field is doubled. Every CSV of a profile run directory
// goes through here, and so do the parsers that read them back.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry::profile {

// `field` as it must appear in a CSV line.
std::string csv_escape(std::string_view field);
// The fields joined by commas, escaped, with a trailing "\n".
std::string csv_line(const std::vector<std::string>& fields);

// A CSV file: its header and rows, every row as wide as the header.
struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;

  // The index of column `name`, or -1.
  int column(std::string_view name) const;
};

// Parses `text` (first line: the header). kDataLoss, with the line number,
// for an unterminated quote, text after a closing quote, or a row whose
// width differs from the header's. A final line without "\n" is accepted.
Result<CsvTable> parse_csv(std::string_view text);

}  // namespace ferry::profile
