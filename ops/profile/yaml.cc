// The metadata YAML subset: writer and parser.
#include "profile/yaml.h"

#include <cstdio>

#include "platform/text.h"

namespace ferry::profile {
namespace {

bool plain_key(std::string_view k) {
  if (k.empty()) return false;
  for (char c : k) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.';
    if (!ok) return false;
  }
  return true;
}

// Whether a scalar can be written without quotes and read back unchanged as
// the same string by any YAML reader.
bool plain_scalar(std::string_view s) {
  if (s.empty()) return false;
  static const char* const reserved[] = {"true", "false", "yes", "no", "on",  "off", "null", "True",
                                         "False", "TRUE", "FALSE", "Null", "NULL", "~",  "Yes",  "No"};
  for (const char* r : reserved) {
    if (s == r) return false;
  }
  if (s.front() == ' ' || s.back() == ' ') return false;
  if (std::string_view("-?:,[]{}#&*!|>'\"%@`").find(s.front()) != std::string_view::npos) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') return false;
    if (c == ':' && (i + 1 == s.size() || s[i + 1] == ' ')) return false;
    if (c == '#' && i > 0 && s[i - 1] == ' ') return false;
  }
  return true;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string scalar_text(std::string_view s) { return plain_scalar(s) ? std::string(s) : quote(s); }
std::string key_text(std::string_view k) { return plain_key(k) ? std::string(k) : quote(k); }

void emit(const YamlNode& node, int indent, std::string& out);

// Writes `value` after "key:" or "-" (the caller wrote those, no newline yet).
void emit_value(const YamlNode& value, int indent, std::string& out) {
  switch (value.kind()) {
    case YamlNode::Kind::kScalar:
      out += ' ' + scalar_text(value.text()) + '\n';
      return;
    case YamlNode::Kind::kMap:
      if (value.entries().empty()) {
        out += " {}\n";
        return;
      }
      break;
    case YamlNode::Kind::kList:
      if (value.items().empty()) {
        out += " []\n";
        return;
      }
      break;
  }
  out += '\n';
  emit(value, indent + 2, out);
}

void emit(const YamlNode& node, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (node.kind() == YamlNode::Kind::kMap) {
    for (const auto& [k, v] : node.entries()) {
      out += pad + key_text(k) + ':';
      emit_value(v, indent, out);
    }
  } else if (node.kind() == YamlNode::Kind::kList) {
    for (const YamlNode& item : node.items()) {
      out += pad + '-';
      emit_value(item, indent, out);
    }
  }
}

struct Line {
  int indent;
  std::string text;
  size_t number;
};

class Parser {
 public:
  explicit Parser(std::vector<Line> lines) : lines_(std::move(lines)) {}

  Result<YamlNode> document() {
    if (lines_.empty()) return YamlNode::map();
    FERRY_ASSIGN_OR_RETURN(YamlNode root, block(lines_[0].indent));
    if (pos_ != lines_.size()) return fail(lines_[pos_], "unexpected indentation");
    return root;
  }

 private:
  Status fail(const Line& l, const std::string& why) {
    return Status(Code::kDataLoss, "YAML line " + std::to_string(l.number) + ": " + why);
  }

  static bool is_item(const std::string& t) { return t == "-" || t.rfind("- ", 0) == 0; }

  // A block of lines at exactly `indent`: a list if its first line is an item.
  Result<YamlNode> block(int indent) {
    if (is_item(lines_[pos_].text)) return list(indent);
    return map(indent);
  }

  Result<YamlNode> list(int indent) {
    YamlNode out = YamlNode::list();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && is_item(lines_[pos_].text)) {
      Line& l = lines_[pos_];
      if (l.text == "-") {
        ++pos_;
        FERRY_ASSIGN_OR_RETURN(YamlNode v, nested(indent, l));
        out.push(std::move(v));
        continue;
      }
      // "- rest": the rest is a scalar, or the first line of a map item one
      // level deeper.
      std::string rest = l.text.substr(2);
      if (looks_like_key(rest)) {
        l.indent = indent + 2;
        l.text = rest;
        FERRY_ASSIGN_OR_RETURN(YamlNode v, map(indent + 2));
        out.push(std::move(v));
      } else {
        FERRY_ASSIGN_OR_RETURN(YamlNode v, inline_value(l, rest));
        out.push(std::move(v));
        ++pos_;
      }
    }
    return out;
  }

  // The block under a "key:" or "-" line, or an empty scalar if none.
  Result<YamlNode> nested(int indent, const Line& owner) {
    if (pos_ < lines_.size() && lines_[pos_].indent > indent) return block(lines_[pos_].indent);
    // YAML allows a list under a key at the key's own indentation.
    if (pos_ < lines_.size() && lines_[pos_].indent == indent && is_item(lines_[pos_].text) &&
        !is_item(owner.text) && owner.text != "-") {
      return list(indent);
    }
    return YamlNode::scalar("");
  }

  Result<YamlNode> map(int indent) {
    YamlNode out = YamlNode::map();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && !is_item(lines_[pos_].text)) {
      const Line l = lines_[pos_];
      std::string key;
      size_t after = 0;
      FERRY_RETURN_IF_ERROR(read_key(l, key, after));
      std::string rest = l.text.substr(after);
      ++pos_;
      if (rest.empty()) {
        FERRY_ASSIGN_OR_RETURN(YamlNode v, nested(indent, l));
        out.set(std::move(key), std::move(v));
      } else {
        FERRY_ASSIGN_OR_RETURN(YamlNode v, inline_value(l, rest));
        out.set(std::move(key), std::move(v));
      }
    }
    if (pos_ < lines_.size() && lines_[pos_].indent > indent) return fail(lines_[pos_], "unexpected indentation");
    return out;
  }

  static bool looks_like_key(const std::string& t) {
    if (!t.empty() && t[0] == '"') {
      size_t close = closing_quote(t);
      return close != std::string::npos && t.compare(close + 1, 1, ":") == 0;
    }
    size_t c = t.find(':');
    return c != std::string::npos && (c + 1 == t.size() || t[c + 1] == ' ');
  }

  static size_t closing_quote(const std::string& t) {
    for (size_t i = 1; i < t.size(); ++i) {
      if (t[i] == '\\') {
        ++i;
      } else if (t[i] == '"') {
        return i;
      }
    }
    return std::string::npos;
  }

  // Reads "key:" at the front of l.text; `after` is where the value starts.
  Status read_key(const Line& l, std::string& key, size_t& after) {
    const std::string& t = l.text;
    if (!t.empty() && t[0] == '"') {
      size_t close = closing_quote(t);
      if (close == std::string::npos || t.compare(close + 1, 1, ":") != 0) return fail(l, "expected \"key\":");
      FERRY_ASSIGN_OR_RETURN(key, unquote(l, t.substr(0, close + 1)));
      after = close + 2;
    } else {
      size_t c = t.find(':');
      if (c == std::string::npos || (c + 1 < t.size() && t[c + 1] != ' ')) return fail(l, "expected key: value");
      key = t.substr(0, c);
      after = c + 1;
    }
    while (after < t.size() && t[after] == ' ') ++after;
    return Status();
  }

  Result<YamlNode> inline_value(const Line& l, const std::string& v) {
    if (v == "{}") return YamlNode::map();
    if (v == "[]") return YamlNode::list();
    if (v[0] == '"') {
      FERRY_ASSIGN_OR_RETURN(std::string s, unquote(l, v));
      return YamlNode::scalar(std::move(s));
    }
    if (v[0] == '{' || v[0] == '[' || v[0] == '&' || v[0] == '*' || v[0] == '|' || v[0] == '>' || v[0] == '\'') {
      return fail(l, "outside the supported YAML subset: " + v);
    }
    // A plain scalar ends at " #".
    std::string s = v;
    size_t hash = s.find(" #");
    if (hash != std::string::npos) s.resize(hash);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return YamlNode::scalar(std::move(s));
  }

  Result<std::string> unquote(const Line& l, const std::string& q) {
    if (q.size() < 2 || q.back() != '"' || closing_quote(q) != q.size() - 1) return fail(l, "bad quoted text");
    std::string out;
    for (size_t i = 1; i + 1 < q.size(); ++i) {
      char c = q[i];
      if (c != '\\') {
        out += c;
        continue;
      }
      char e = q[++i];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '/': out += '/'; break;
        case 'x': {
          if (i + 2 >= q.size()) return fail(l, "bad \\x escape");
          unsigned v = 0;
          if (std::sscanf(q.substr(i + 1, 2).c_str(), "%2x", &v) != 1) return fail(l, "bad \\x escape");
          out += static_cast<char>(v);
          i += 2;
          break;
        }
        default:
          return fail(l, std::string("unknown escape \\") + e);
      }
    }
    return out;
  }

  std::vector<Line> lines_;
  size_t pos_ = 0;
};

}  // namespace

YamlNode YamlNode::scalar(std::string text) {
  YamlNode n;
  n.kind_ = Kind::kScalar;
  n.text_ = std::move(text);
  return n;
}

YamlNode YamlNode::map() {
  YamlNode n;
  n.kind_ = Kind::kMap;
  return n;
}

YamlNode YamlNode::list() {
  YamlNode n;
  n.kind_ = Kind::kList;
  return n;
}

YamlNode& YamlNode::set(std::string key, YamlNode value) {
  for (auto& [k, v] : entries_) {
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
  return *this;
}

const YamlNode* YamlNode::find(std::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

YamlNode& YamlNode::push(YamlNode value) {
  items_.push_back(std::move(value));
  return *this;
}

std::string to_yaml(const YamlNode& root, std::string_view comment) {
  std::string out;
  size_t start = 0;
  while (start < comment.size()) {
    size_t end = comment.find('\n', start);
    if (end == std::string_view::npos) end = comment.size();
    out += "# " + std::string(comment.substr(start, end - start)) + '\n';
    start = end + 1;
  }
  if (root.kind() == YamlNode::Kind::kScalar) {
    out += scalar_text(root.text()) + '\n';
  } else if ((root.kind() == YamlNode::Kind::kMap && root.entries().empty())) {
    out += "{}\n";
  } else if (root.kind() == YamlNode::Kind::kList && root.items().empty()) {
    out += "[]\n";
  } else {
    emit(root, 0, out);
  }
  return out;
}

Result<YamlNode> parse_yaml(std::string_view text) {
  std::vector<Line> lines;
  size_t number = 0;
  for (std::string_view raw : platform::split_lines(text)) {
    ++number;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    size_t indent = raw.find_first_not_of(' ');
    if (indent == std::string_view::npos) continue;  // blank
    if (raw[indent] == '\t') {
      return Status(Code::kDataLoss, "YAML line " + std::to_string(number) + ": tab in indentation");
    }
    if (raw[indent] == '#') continue;
    if (indent == 0 && (raw == "---" || raw == "...")) continue;
    std::string t(raw.substr(indent));
    while (!t.empty() && t.back() == ' ') t.pop_back();
    lines.push_back(Line{static_cast<int>(indent), std::move(t), number});
  }
  // A whole document that is one scalar or an empty collection.
  if (lines.size() == 1 && lines[0].text == "{}") return YamlNode::map();
  if (lines.size() == 1 && lines[0].text == "[]") return YamlNode::list();
  return Parser(std::move(lines)).document();
}

}  // namespace ferry::profile
