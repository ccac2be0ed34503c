// Feeds arbitrary text to the CPU-list and binding-string parsers: the
// engine reads FERRY_TX_BINDINGS / FERRY_RX_BINDINGS and NCCL's binding
// variables from its environment, `ferry tune` and `ferry diag` read CPU
// lists from sysfs and from files a user edits. What a parser accepts must
// be well-formed (sorted, no duplicates, ids in range, NIC names of the
// allowed characters), and format then parse must give it back unchanged.
// Binding strings are also checked against a small host, and resolved into
// the CPUs of the engine's workers there, every one of which must exist.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/worker_cpus.h"
#include "platform/binding_plan.h"
#include "platform/cpu_binding.h"
#include "platform/interfaces.h"

namespace {

using namespace ferry::platform;

void require(bool ok) {
  if (!ok) std::abort();
}

void check_list(const CpuList& l) {
  for (size_t i = 0; i < l.size(); ++i) {
    require(l[i] >= 0 && l[i] <= kMaxCpuId);
    if (i > 0) require(l[i - 1] < l[i]);
  }
}

// Two NUMA nodes of two SMT cores each, one NIC on each node.
const Topology& small_host() {
  static const Topology t = [] {
    Topology h;
    h.cpus = {{0, 0, {0, 4}}, {1, 0, {1, 5}}, {2, 1, {2, 6}}, {3, 1, {3, 7}},
              {4, 0, {0, 4}}, {5, 0, {1, 5}}, {6, 1, {2, 6}}, {7, 1, {3, 7}}};
    h.nodes = {{0, {0, 1, 4, 5}}, {1, {2, 3, 6, 7}}};
    NicInfo a, b;
    a.name = "eth1";
    a.numa_node = 0;
    b.name = "eth2";
    b.numa_node = 1;
    h.nics = {a, b};
    return h;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto l = parse_cpu_list(text, "fuzz"); l.ok()) {
    check_list(*l);
    auto again = parse_cpu_list(format_cpu_list(*l), "fuzz");
    require(again.ok() && *again == *l);
    CpuList copy = *l;
    normalize_cpu_list(copy);
    require(copy == *l);
  }
  if (auto b = parse_bindings(text, "fuzz"); b.ok()) {
    require(!b->empty());
    for (const auto& [nic, cpus] : *b) {
      require(!nic.empty());
      for (char c : nic)
        require(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '@');
      check_list(cpus);
    }
    auto again = parse_bindings(format_bindings(*b), "fuzz");
    require(again.ok() && *again == *b);
    (void)check_bindings(*b, small_host(), "fuzz");
  }
  size_t half = size / 2;
  std::string_view x = text.substr(0, half), y = text.substr(half);
  // As the engine pins its workers: the two halves as TX and RX bindings.
  ferry::Options o;
  o.tx_bindings = std::string(x);
  o.rx_bindings = std::string(y);
  std::vector<Interface> nics(2);
  nics[0].name = "eth1";
  nics[1].name = "eth2";
  if (auto w = ferry::core::resolve_worker_cpus(o, nics, small_host()); w.ok()) {
    for (const NicBindings* b : {&w->tx, &w->rx}) {
      for (const auto& [nic, cpus] : *b) {
        for (int c : cpus) require(small_host().find_cpu(c) != nullptr);
      }
    }
  }
  // NaturalLess must be a strict weak order on any two names.
  NaturalLess less;
  require(!less(x, x) && !(less(x, y) && less(y, x)));
  return 0;
}
