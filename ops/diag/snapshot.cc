// Taking a diagnostic snapshot of the host.
#include "diag/snapshot.h"

#include <charconv>
#include <ctime>

#include "platform/host_files.h"
#include "platform/text.h"
#include "tune/host_settings.h"

namespace ferry::diag {
namespace {

using platform::under_root;

PerCpu per_cpu(const std::vector<int>& cpus, const std::vector<uint64_t>& counts) {
  PerCpu out;
  for (size_t k = 0; k < cpus.size() && k < counts.size(); ++k) {
    if (counts[k] != 0) out[cpus[k]] = counts[k];
  }
  return out;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

Result<std::map<int, CpuTimes>> parse_proc_stat(std::string_view text, std::string_view what) {
  std::map<int, CpuTimes> out;
  size_t line_no = 0;
  for (std::string_view line : platform::split_lines(text)) {
    ++line_no;
    if (line.size() < 4 || line.substr(0, 3) != "cpu" || line[3] == ' ') continue;  // not a cpuN line
    std::vector<std::string_view> w = platform::split_words(line);
    uint64_t id = 0;
    std::vector<uint64_t> v;
    for (size_t k = 1; k < w.size(); ++k) {
      uint64_t x = 0;
      if (!platform::parse_u64(w[k], x)) break;
      v.push_back(x);
    }
    if (!platform::parse_u64(w[0].substr(3), id) || v.size() < 4) {
      return Status(Code::kInvalidArgument, std::string(what) + ": line " + std::to_string(line_no) +
                                                ": expected \"cpuN user nice system idle ...\"");
    }
    v.resize(8, 0);
    out[static_cast<int>(id)] = CpuTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
  }
  return out;
}

Result<Snapshot> take_snapshot(std::string_view root) {
  Snapshot s;
  s.taken_at = utc_now();
  FERRY_ASSIGN_OR_RETURN(s.topology, platform::read_topology(root));

  if (auto up = platform::read_trimmed(under_root(root, "/proc/uptime")); up.ok()) {
    std::vector<std::string_view> w = platform::split_words(*up);
    if (!w.empty()) {
      std::string first(w[0]);
      char* end = nullptr;
      double v = std::strtod(first.c_str(), &end);
      if (end != nullptr && *end == '\0') s.uptime_s = v;
    }
  }
  if (auto h = platform::read_trimmed(under_root(root, "/proc/sys/kernel/hostname")); h.ok()) s.hostname = *h;

  std::string ipath = under_root(root, "/proc/interrupts");
  FERRY_ASSIGN_OR_RETURN(std::string itext, platform::read_text_file(ipath));
  FERRY_ASSIGN_OR_RETURN(platform::InterruptTable table, platform::parse_interrupts(itext, ipath));
  for (const platform::NicIrq& i : platform::find_nic_irqs(root, s.topology, table)) {
    IrqSample x;
    x.irq = i.irq;
    x.nic = i.nic;
    x.name = i.name;
    x.kind = i.kind;
    x.queue = i.queue;
    if (auto aff = platform::read_irq_affinity(root, i.irq); aff.ok()) {
      x.affinity = *aff;
    } else {
      s.notes.push_back(aff.status().message());
    }
    const platform::InterruptLine* line = table.find(i.irq);
    x.counts = per_cpu(table.cpus, line->counts);
    for (const auto& [cpu, n] : x.counts) x.total += n;
    s.irqs.push_back(std::move(x));
  }

  std::string spath = under_root(root, "/proc/softirqs");
  if (auto stext = platform::read_text_file(spath); stext.ok()) {
    FERRY_ASSIGN_OR_RETURN(platform::InterruptTable soft, platform::parse_interrupts(*stext, spath));
    for (const platform::InterruptLine& l : soft.lines) {
      if (l.id == "NET_RX") s.net_rx = per_cpu(soft.cpus, l.counts);
      if (l.id == "NET_TX") s.net_tx = per_cpu(soft.cpus, l.counts);
    }
  } else {
    s.notes.push_back("no softirq counts: " + stext.status().message());
  }

  std::string stat_path = under_root(root, "/proc/stat");
  if (auto st = platform::read_text_file(stat_path); st.ok()) {
    FERRY_ASSIGN_OR_RETURN(s.cpu_times, parse_proc_stat(*st, stat_path));
  } else {
    s.notes.push_back("no CPU times: " + st.status().message());
  }

  for (const tune::SysctlFile& f : tune::recorded_sysctls()) {
    auto v = platform::read_trimmed(under_root(root, f.path));
    std::string value;  // tcp_rmem's tabs become single spaces
    if (v.ok()) {
      for (std::string_view w : platform::split_words(*v)) value += (value.empty() ? "" : " ") + std::string(w);
    }
    s.sysctls.emplace_back(std::string(f.name), value);
  }
  if (s.topology.nics.empty()) s.notes.push_back("no physical NICs found");
  return s;
}

}  // namespace ferry::diag
