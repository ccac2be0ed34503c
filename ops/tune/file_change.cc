// Comparing a value read back from a kernel file with the value written.
#include "tune/file_change.h"

#include <vector>

#include "platform/cpu_binding.h"
#include "platform/text.h"

namespace ferry::tune {

bool same_value(std::string_view read_back, std::string_view value, CompareAs how) {
  if (how == CompareAs::kCpuList) {
    auto a = platform::parse_cpu_list(read_back, "read back");
    auto b = platform::parse_cpu_list(value, "written");
    return a.ok() && b.ok() && a.value() == b.value();
  }
  return platform::split_words(read_back) == platform::split_words(value);
}

}  // namespace ferry::tune
