// Prometheus text format: `name{label="value",...} value [timestamp]`, one a
// line; `#` comments. Label values escape `\\`, `\"` and `\n`.
#include "top/metrics_text.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "platform/text.h"

namespace ferry::top {
namespace {

bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }
bool label_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool label_char(char c) { return label_start(c) || (c >= '0' && c <= '9'); }

Status bad(size_t line_no, const std::string& why) {
  return Status(Code::kDataLoss, "metrics text, line " + std::to_string(line_no) + ": " + why);
}

// A float as the format writes it: decimal or exponent notation, +Inf,
// -Inf, NaN. Nothing else (no hex floats, no "infinity").
bool parse_value(std::string_view s, double& out) {
  if (s == "+Inf" || s == "Inf") {
    out = std::numeric_limits<double>::infinity();
    return true;
  }
  if (s == "-Inf") {
    out = -std::numeric_limits<double>::infinity();
    return true;
  }
  if (s == "NaN") {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return false;
  }
  std::string copy(s);
  char* end = nullptr;
  out = std::strtod(copy.c_str(), &end);
  return end == copy.c_str() + copy.size() && std::isfinite(out);
}

// Parses one sample line (no newline) into `s`; an error says why.
Status parse_line(std::string_view line, size_t line_no, Sample& s) {
  size_t i = 0;
  if (!name_start(line[i])) return bad(line_no, "a metric name must start with a letter, '_' or ':'");
  while (i < line.size() && name_char(line[i])) ++i;
  s.name.assign(line.substr(0, i));
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      size_t start = i;
      if (i >= line.size() || !label_start(line[i])) return bad(line_no, "a label name expected in '{...}'");
      while (i < line.size() && label_char(line[i])) ++i;
      std::string key(line.substr(start, i - start));
      if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        return bad(line_no, "label '" + key + "' needs =\"value\"");
      }
      i += 2;
      std::string value;
      for (;;) {
        if (i >= line.size()) return bad(line_no, "label '" + key + "': its value never ends");
        char c = line[i++];
        if (c == '"') break;
        if (c == '\\') {
          if (i >= line.size()) return bad(line_no, "label '" + key + "': a '\\' ends the line");
          char e = line[i++];
          if (e == 'n') {
            value += '\n';
          } else if (e == '\\' || e == '"') {
            value += e;
          } else {
            return bad(line_no, "label '" + key + "': unknown escape '\\" + std::string(1, e) + "'");
          }
          continue;
        }
        value += c;
      }
      s.labels.emplace_back(std::move(key), std::move(value));
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') continue;
      return bad(line_no, "',' or '}' expected after a label");
    }
  }
  if (i >= line.size() || (line[i] != ' ' && line[i] != '\t')) return bad(line_no, "a space and a value expected");
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  size_t start = i;
  while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
  if (!parse_value(line.substr(start, i - start), s.value)) {
    return bad(line_no, "'" + std::string(line.substr(start, std::min<size_t>(i - start, 32))) + "' is not a value");
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  if (i < line.size()) {
    // A timestamp: an integer (milliseconds), then nothing.
    size_t t = i;
    if (line[i] == '-') ++i;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
    if (i == t || i < line.size()) return bad(line_no, "only a timestamp may follow the value");
  }
  return Status();
}

}  // namespace

std::string_view Sample::label(std::string_view key) const {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return {};
}

Result<std::vector<Sample>> parse_metrics_text(std::string_view text) {
  std::vector<Sample> out;
  size_t line_no = 0;
  for (std::string_view line : platform::split_lines(text)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > kMaxLineBytes) return bad(line_no, "longer than " + std::to_string(kMaxLineBytes) + " bytes");
    if (line.find_first_not_of(" \t") == std::string_view::npos || line[0] == '#') continue;
    if (out.size() == kMaxSamples) return bad(line_no, "more than " + std::to_string(kMaxSamples) + " samples");
    Sample s;
    Status st = parse_line(line, line_no, s);
    if (!st.ok()) return st;
    out.push_back(std::move(s));
  }
  return out;
}

std::string format_sample(const Sample& s) {
  std::string out = s.name;
  if (!s.labels.empty()) {
    out += '{';
    for (size_t i = 0; i < s.labels.size(); ++i) {
      if (i > 0) out += ',';
      out += s.labels[i].first + "=\"";
      for (char c : s.labels[i].second) {
        if (c == '\n') {
          out += "\\n";
        } else {
          if (c == '\\' || c == '"') out += '\\';
          out += c;
        }
      }
      out += '"';
    }
    out += '}';
  }
  char buf[40];
  if (std::isnan(s.value)) {
    std::snprintf(buf, sizeof(buf), "NaN");
  } else if (std::isinf(s.value)) {
    std::snprintf(buf, sizeof(buf), "%s", s.value > 0 ? "+Inf" : "-Inf");
  } else {
    std::snprintf(buf, sizeof(buf), "%.17g", s.value);
  }
  return out + " " + buf;
}

}  // namespace ferry::top
