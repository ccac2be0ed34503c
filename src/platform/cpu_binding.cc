// CPU lists and NCCL-format binding strings: parsing and formatting.
#include "platform/cpu_binding.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

namespace ferry::platform {
namespace {

// A cursor over text being parsed. Every error message carries the source, the
// 1-based position and what was found there, so a user can fix the string
// without reading our grammar.
class Cursor {
 public:
  Cursor(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  bool done() const { return pos_ >= text_.size(); }
  char peek() const { return done() ? '\0' : text_[pos_]; }
  size_t pos() const { return pos_; }
  void advance() { ++pos_; }
  void skip_blanks() {
    while (!done() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }
  bool consume(char c) {
    if (peek() != c || done()) return false;
    ++pos_;
    return true;
  }

  Status error_at(size_t pos, std::string_view expected) const {
    std::string found = pos >= text_.size() ? std::string("end of text") : "'" + std::string(1, text_[pos]) + "'";
    return Status(Code::kInvalidArgument, std::string(what_) + ": position " + std::to_string(pos + 1) + ": " +
                                              std::string(expected) + ", found " + found + " in \"" +
                                              std::string(text_) + "\"");
  }
  Status error_here(std::string_view expected) const { return error_at(pos_, expected); }
  Status error_span(size_t pos, std::string_view message) const {
    return Status(Code::kInvalidArgument, std::string(what_) + ": position " + std::to_string(pos + 1) + ": " +
                                              std::string(message) + " in \"" + std::string(text_) + "\"");
  }

  // A decimal CPU id at the cursor.
  Result<int> cpu_number() {
    size_t start = pos_;
    if (!std::isdigit(static_cast<unsigned char>(peek()))) return error_here("expected a CPU number");
    int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > kMaxCpuId) {
        return error_span(start, "CPU number too large (at most " + std::to_string(kMaxCpuId) + ")");
      }
      ++pos_;
    }
    return static_cast<int>(v);
  }

  // `item (',' item)*` where item is `n` or `a-b`, appended to `out`. Stops at
  // the first character that cannot continue the list.
  Status cpu_items(CpuList& out) {
    while (true) {
      skip_blanks();
      size_t start = pos_;
      FERRY_ASSIGN_OR_RETURN(int lo, cpu_number());
      int hi = lo;
      skip_blanks();
      if (consume('-')) {
        skip_blanks();
        FERRY_ASSIGN_OR_RETURN(hi, cpu_number());
        if (hi < lo) {
          return error_span(
              start, "range " + std::to_string(lo) + "-" + std::to_string(hi) + " is descending (write it low-high)");
        }
      }
      for (int c = lo; c <= hi; ++c) out.push_back(c);
      skip_blanks();
      if (!consume(',')) return Status::Ok();
    }
  }

 private:
  std::string_view text_;
  std::string_view what_;
  size_t pos_ = 0;
};

bool nic_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '@';
}

}  // namespace

bool NaturalLess::operator()(std::string_view a, std::string_view b) const {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    bool da = std::isdigit(static_cast<unsigned char>(a[i])), db = std::isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && a[i2] == '0') ++i2;
      while (j2 < b.size() && b[j2] == '0') ++j2;
      size_t ie = i2, je = j2;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      // Longer digit runs (without leading zeros) are bigger numbers.
      if (ie - i2 != je - j2) return ie - i2 < je - j2;
      int c = a.substr(i2, ie - i2).compare(b.substr(j2, je - j2));
      if (c != 0) return c < 0;
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
  return a < b;  // equal up to leading zeros: fall back to plain order, keeping it strict
}

void normalize_cpu_list(CpuList& cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
}

Result<CpuList> parse_cpu_list(std::string_view text, std::string_view what) {
  Cursor cur(text, what);
  CpuList out;
  cur.skip_blanks();
  if (cur.done()) return out;
  FERRY_RETURN_IF_ERROR(cur.cpu_items(out));
  cur.skip_blanks();
  if (!cur.done()) return cur.error_here("expected ',' or the end of the CPU list");
  normalize_cpu_list(out);
  return out;
}

std::string format_cpu_list(const CpuList& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

Result<NicBindings> parse_bindings(std::string_view text, std::string_view what) {
  Cursor cur(text, what);
  NicBindings out;
  while (true) {
    cur.skip_blanks();
    if (cur.done() && !out.empty()) break;  // a trailing ';'
    size_t name_start = cur.pos();
    std::string nic;
    while (nic_char(cur.peek()) && !cur.done()) {
      nic += cur.peek();
      cur.advance();
    }
    if (nic.empty()) return cur.error_here("expected a NIC name");
    cur.skip_blanks();
    if (!cur.consume(':')) return cur.error_here("expected ':' after NIC name " + nic);
    CpuList cpus;
    FERRY_RETURN_IF_ERROR(cur.cpu_items(cpus));
    normalize_cpu_list(cpus);
    if (out.count(nic) != 0) return cur.error_span(name_start, "NIC " + nic + " is named twice");
    out.emplace(std::move(nic), std::move(cpus));
    cur.skip_blanks();
    if (cur.done()) break;
    if (!cur.consume(';')) return cur.error_here("expected ',' or ';' or the end of the bindings");
  }
  return out;
}

std::string format_bindings(const NicBindings& bindings) {
  std::string out;
  for (const auto& [nic, cpus] : bindings) {
    if (!out.empty()) out += ';';
    out += nic + ":" + format_cpu_list(cpus);
  }
  return out;
}

}  // namespace ferry::platform
