// Comparing a value read back from a kernel file with the value written.
#include "tune/file_change.h"

#include <vector>

#include "platform/cpu_binding.h"

namespace ferry::tune {
namespace {

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\n' && s[j] != '\r') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

bool same_value(std::string_view read_back, std::string_view value, CompareAs how) {
  if (how == CompareAs::kCpuList) {
    auto a = platform::parse_cpu_list(read_back, "read back");
    auto b = platform::parse_cpu_list(value, "written");
    return a.ok() && b.ok() && a.value() == b.value();
  }
  return words(read_back) == words(value);
}

}  // namespace ferry::tune
