// RFC 4180 CSV writing and parsing.
#include "profile/csv.h"

namespace ferry::profile {

std::string csv_escape(std::string_view field) {
  bool quote = field.find_first_of(",\"\r\n") != std::string_view::npos ||
               (!field.empty() && (field.front() == ' ' || field.back() == ' '));
  if (!quote) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += ',';
    out += csv_escape(fields[i]);
  }
  out += '\n';
  return out;
}

int CsvTable::column(std::string_view name) const {
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == name) return static_cast<int>(i);
  }
  return -1;
}

Result<CsvTable> parse_csv(std::string_view text) {
  CsvTable table;
  std::vector<std::string> row;
  std::string field;
  size_t line = 1;
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    return Status(Code::kDataLoss, "CSV line " + std::to_string(line) + ": " + why);
  };
  auto end_row = [&]() -> Status {
    row.push_back(std::move(field));
    field.clear();
    if (table.header.empty()) {
      table.header = std::move(row);
    } else if (row.size() != table.header.size()) {
      return fail(std::to_string(row.size()) + " fields, header has " + std::to_string(table.header.size()));
    } else {
      table.rows.push_back(std::move(row));
    }
    row.clear();
    return Status();
  };
  while (i < text.size()) {
    char c = text[i];
    if (c == '"' && field.empty()) {
      // A quoted field: runs to the next lone quote.
      size_t start_line = line;
      ++i;
      for (;;) {
        if (i >= text.size()) {
          line = start_line;
          return fail("unterminated quoted field");
        }
        if (text[i] == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        if (text[i] == '\n') ++line;
        field += text[i++];
      }
      if (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
        return fail("text after a closing quote");
      }
      continue;
    }
    if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
      ++i;
    } else if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
      ++i;
    } else if (c == '\n') {
      FERRY_RETURN_IF_ERROR(end_row());
      ++line;
      ++i;
    } else {
      field += c;
      ++i;
    }
  }
  if (!field.empty() || !row.empty()) FERRY_RETURN_IF_ERROR(end_row());
  return table;
}

}  // namespace ferry::profile
