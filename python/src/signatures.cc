// Rewriting pybind11's signature lines into text signatures (see signatures.h).
#include "signatures.h"

#include <cctype>
#include <cstring>
#include <string>
#include <vector>

namespace ferry::py {
namespace {

namespace pyb = pybind11;

// `s` cut at commas outside brackets and quotes.
std::vector<std::string> top_level_split(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  char quote = 0;
  for (char c : s) {
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '(' || c == '[' || c == '{' || c == '<') {
      ++depth;
    } else if (c == ')' || c == ']' || c == '}' || c == '>') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(' ');
  size_t b = s.find_last_not_of(' ');
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// A default inspect can read back (a literal), or "..." for an object's repr.
std::string readable_default(const std::string& d) {
  if (d == "None" || d == "True" || d == "False" || d == "...") return d;
  if (!d.empty() && (std::isdigit(static_cast<unsigned char>(d[0])) || d[0] == '-' || d[0] == '\'' || d[0] == '"')) {
    return d;
  }
  return "...";
}

// "name(self: T, a: handle, b: int | None = None, *, c: float = 5.0) -> R"
// -> "name(self, a, b=None, *, c=5.0)"; empty if `line` is not of that form.
std::string text_signature(const std::string& line, const char* name) {
  size_t n = std::strlen(name);
  if (line.compare(0, n, name) != 0 || line.size() <= n || line[n] != '(') return {};
  // The parameter list ends at the ')' that closes the first '('.
  int depth = 0;
  size_t close = std::string::npos;
  for (size_t i = n; i < line.size(); ++i) {
    if (line[i] == '(') ++depth;
    if (line[i] == ')' && --depth == 0) {
      close = i;
      break;
    }
  }
  if (close == std::string::npos) return {};
  std::string params = line.substr(n + 1, close - n - 1);
  if (params.find("*args") != std::string::npos && params.find("**kwargs") != std::string::npos) return {};
  std::string out = std::string(name) + "(";
  bool first = true;
  for (const std::string& raw : top_level_split(params)) {
    std::string p = trim(raw);
    std::string text;
    if (p.empty() || p[0] == '*') {
      text = p;  // "*" (keyword-only from here), "*args", "**kwargs"
    } else {
      size_t eq = p.find(" = ");
      size_t colon = p.find(':');
      size_t end = std::min(colon, eq);
      text = trim(p.substr(0, end));
      if (eq != std::string::npos) text += "=" + readable_default(trim(p.substr(eq + 3)));
    }
    out += (first ? "" : ", ") + text;
    first = false;
  }
  return out + ")";
}

void rewrite(PyObject* fn) {
  if (fn == nullptr || !PyCFunction_Check(fn)) return;
  PyMethodDef* def = reinterpret_cast<PyCFunctionObject*>(fn)->m_ml;
  if (def == nullptr || def->ml_doc == nullptr || def->ml_name == nullptr) return;
  std::string doc = def->ml_doc;
  if (doc.find("\n--\n\n") != std::string::npos) return;  // done already
  size_t eol = doc.find('\n');
  std::string sig = text_signature(doc.substr(0, eol), def->ml_name);
  if (sig.empty()) return;
  std::string rest = eol == std::string::npos ? std::string() : doc.substr(eol);
  size_t body = rest.find_first_not_of('\n');
  rest = body == std::string::npos ? std::string() : rest.substr(body);
  // The method table lives as long as the module; so does this text.
  def->ml_doc = strdup((sig + "\n--\n\n" + rest).c_str());
}

void rewrite_member(pyb::handle member) {
  PyObject* o = member.ptr();
  if (PyInstanceMethod_Check(o)) {
    rewrite(PyInstanceMethod_GET_FUNCTION(o));
  } else if (pyb::isinstance(member, pyb::module_::import("builtins").attr("staticmethod"))) {
    rewrite(member.attr("__func__").ptr());
  } else {
    rewrite(o);
  }
}

}  // namespace

void publish_text_signatures(pyb::module_& m) {
  for (auto item : m.attr("__dict__").cast<pyb::dict>()) {
    pyb::handle value = item.second;
    if (PyType_Check(value.ptr())) {
      for (auto member : value.attr("__dict__").cast<pyb::dict>()) rewrite_member(member.second);
    } else {
      rewrite(value.ptr());
    }
  }
}

}  // namespace ferry::py
