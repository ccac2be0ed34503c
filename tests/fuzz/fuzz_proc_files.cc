// Feeds arbitrary text to the parsers of the /proc files `ferry tune` and
// `ferry diag` read (/proc/interrupts, /proc/stat, an IRQ's
// smp_affinity_list) and of the files they read back from a user: a tune
// backup (`ferry tune reset`), a plan (`ferry tune verify --plan`), a diag
// snapshot (`ferry diag diff`), and the names a user types (IRQ kinds and
// modes, IPv4 addresses). The kernel's files are trusted only as far as
// their format; the user's not at all. Whatever parses must survive its own
// writer: format, parse again, same result.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "diag/diff.h"
#include "diag/snapshot.h"
#include "diag/snapshot_json.h"
#include "diag/snapshot_markdown.h"
#include "platform/interfaces.h"
#include "platform/irq.h"
#include "tune/apply.h"
#include "tune/plan.h"
#include "tune/plan_json.h"

namespace {

using namespace ferry;

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto t = platform::parse_interrupts(text, "interrupts"); t.ok()) {
    require(!t->cpus.empty());
    for (const platform::InterruptLine& l : t->lines) {
      require(l.counts.size() == t->cpus.size());
      require(l.irq < 0 || t->find(l.irq) != nullptr);
      platform::IrqClass c = platform::classify_irq_name(l.name);
      require(!c.basis.empty());
      require(platform::parse_irq_kind(platform::irq_kind_name(c.kind)).ok());
    }
    // Attributed to NICs of a host that shares names with many drivers.
    platform::Topology topo;
    for (const char* name : {"eth0", "eth1", "ens5", "mlx5_0"}) {
      platform::NicInfo n;
      n.name = name;
      n.pci_address = "0000:0c:00.0";
      n.device_path = "/sys/devices/pci0000:00/0000:0c:00.0/virtio2";
      topo.nics.push_back(n);
    }
    for (const platform::NicIrq& i : platform::find_nic_irqs("/nonexistent", topo, *t)) {
      require(t->find(i.irq) != nullptr && !i.basis.empty());
    }
  }
  (void)platform::classify_irq_name(text);
  (void)platform::parse_irq_kind(text);
  (void)tune::parse_irq_mode(text);
  uint32_t ip = 0;
  (void)platform::parse_ipv4(text, ip);

  if (auto st = diag::parse_proc_stat(text, "stat"); st.ok()) {
    for (const auto& [cpu, times] : *st) (void)times.total();
  }

  if (auto b = tune::parse_backup(text, "backup"); b.ok()) {
    auto again = tune::parse_backup(tune::format_backup(*b), "backup");
    require(again.ok() && again->entries == b->entries);
  }

  if (auto p = tune::plan_from_json(text, "plan"); p.ok()) {
    (void)tune::render_plan_text(*p);
    (void)tune::plan_changes(*p, true);
    std::string json = tune::plan_to_json(*p);
    auto again = tune::plan_from_json(json, "plan");
    require(again.ok() && tune::plan_to_json(*again) == json);
  }

  if (auto s = diag::snapshot_from_json(text, "snapshot"); s.ok()) {
    (void)diag::snapshot_to_markdown(*s);
    std::string json = diag::snapshot_to_json(*s);
    auto again = diag::snapshot_from_json(json, "snapshot");
    require(again.ok() && diag::snapshot_to_json(*again) == json);
    if (auto d = diag::diff_snapshots(*s, *again); d.ok()) (void)diag::render_diff_markdown(*d);
  }
  return 0;
}
