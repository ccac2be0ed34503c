// One intended change to a host file: the unit that `ferry tune apply` backs
// up, writes, reads back and, on failure or `reset`, restores.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::tune {

// How a value read back is compared with the value written: kernel files
// reformat what they are given ("8-9" may read back as "8-9\n", a tab-separated
// sysctl keeps its words but not our blanks).
enum class CompareAs : uint8_t {
  kCpuList,  // as CPU sets: "8,9" equals "8-9\n"
  kWords,    // as blank-separated words: "4096 131072 1" equals "4096\t131072\t1\n"
};

struct FileChange {
  std::string path;   // inside the root: "/proc/irq/45/smp_affinity_list"
  std::string value;  // without newline: "8"
  std::string what;   // for people: "IRQ 45 (eth1 rx queue 3)"
  CompareAs compare = CompareAs::kWords;
};

// Whether `read_back` (a file's content) holds `value` under `how`.
bool same_value(std::string_view read_back, std::string_view value, CompareAs how);

}  // namespace ferry::tune
