// Diagnostic snapshots to and from JSON.
#include "diag/snapshot_json.h"

#include <charconv>
#include <cstdio>

#include "tune/json_fields.h"

namespace ferry::diag {
namespace {

using platform::format_cpu_list;
using tune::Json;
using tune::json_array;
using tune::json_int;
using tune::json_object;
using tune::json_string;

Json per_cpu_json(const PerCpu& m) {
  Json j = Json::object();
  for (const auto& [cpu, n] : m) j[std::to_string(cpu)] = n;
  return j;
}

Result<int> cpu_key(const std::string& key, const std::string& where) {
  int v = 0;
  auto [p, ec] = std::from_chars(key.data(), key.data() + key.size(), v);
  if (ec != std::errc() || p != key.data() + key.size() || key.empty() || v < 0) {
    return Status(Code::kInvalidArgument, where + ": key \"" + key + "\" is not a CPU number");
  }
  return v;
}

Result<uint64_t> count_value(const Json& v, const std::string& where) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    return Status(Code::kInvalidArgument, where + ": expected a count (an integer, 0 or more)");
  }
  return v.get<uint64_t>();
}

Result<PerCpu> per_cpu_from(const Json& obj, const std::string& where) {
  if (!obj.is_object()) return Status(Code::kInvalidArgument, where + ": expected an object of CPU counts");
  PerCpu out;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    FERRY_ASSIGN_OR_RETURN(int cpu, cpu_key(it.key(), where));
    FERRY_ASSIGN_OR_RETURN(uint64_t n, count_value(it.value(), where + "[\"" + it.key() + "\"]"));
    if (n != 0) out[cpu] = n;
  }
  return out;
}

Result<platform::CpuList> cpu_field(const Json& obj, std::string_view key, const std::string& where) {
  FERRY_ASSIGN_OR_RETURN(std::string text, json_string(obj, key, where));
  return platform::parse_cpu_list(text, where + "." + std::string(key));
}

}  // namespace

std::string snapshot_to_json(const Snapshot& s) {
  const platform::Topology& t = s.topology;
  Json j;
  j["version"] = 1;
  j["taken_at"] = s.taken_at;
  j["uptime_s"] = s.uptime_s;
  j["hostname"] = s.hostname;
  j["cpus"] = Json::array();
  for (const platform::CpuInfo& c : t.cpus) {
    j["cpus"].push_back({{"cpu", c.id}, {"node", c.numa_node}, {"siblings", format_cpu_list(c.siblings)}});
  }
  j["numa_nodes"] = Json::array();
  for (const platform::NumaNode& n : t.nodes)
    j["numa_nodes"].push_back({{"node", n.id}, {"cpus", format_cpu_list(n.cpus)}});
  j["nics"] = Json::array();
  for (const platform::NicInfo& n : t.nics) {
    j["nics"].push_back({{"name", n.name},
                         {"driver", n.driver},
                         {"pci", n.pci_address},
                         {"pci_path", n.pci_path},
                         {"numa_node", n.numa_node},
                         {"speed_mbps", n.speed_mbps},
                         {"mtu", n.mtu},
                         {"rx_queues", n.rx_queues},
                         {"tx_queues", n.tx_queues}});
  }
  j["gpus"] = Json::array();
  for (const platform::GpuInfo& g : t.gpus) {
    char cls[16];
    std::snprintf(cls, sizeof(cls), "0x%06x", g.pci_class);
    j["gpus"].push_back({{"pci", g.pci_address}, {"pci_path", g.pci_path}, {"class", cls}, {"numa_node", g.numa_node}});
  }
  j["irqs"] = Json::array();
  for (const IrqSample& i : s.irqs) {
    j["irqs"].push_back({{"irq", i.irq},
                         {"nic", i.nic},
                         {"name", i.name},
                         {"kind", std::string(platform::irq_kind_name(i.kind))},
                         {"queue", i.queue},
                         {"affinity", format_cpu_list(i.affinity)},
                         {"total", i.total},
                         {"counts", per_cpu_json(i.counts)}});
  }
  j["softirqs"] = {{"NET_RX", per_cpu_json(s.net_rx)}, {"NET_TX", per_cpu_json(s.net_tx)}};
  Json times = Json::object();
  for (const auto& [cpu, c] : s.cpu_times) {
    Json one = Json::object();
    for (size_t f = 0; f < kCpuTimeFields.size(); ++f) one[kCpuTimeFields[f]] = c.*kCpuTimeMembers[f];
    times[std::to_string(cpu)] = one;
  }
  j["cpu_times"] = times;
  j["cpu_times_unit"] = "USER_HZ ticks since boot (/proc/stat)";
  Json sys = Json::object();
  for (const auto& [name, value] : s.sysctls) sys[name] = value;
  j["sysctls"] = sys;
  j["notes"] = s.notes;
  return tune::dump_json(j);
}

Result<Snapshot> snapshot_from_json(std::string_view text, std::string_view what) {
  const std::string w(what);
  FERRY_ASSIGN_OR_RETURN(Json j, tune::parse_json(text, what));
  FERRY_ASSIGN_OR_RETURN(int64_t version, json_int(j, "version", w));
  if (version != 1) {
    return Status(Code::kInvalidArgument,
                  w + ": snapshot version " + std::to_string(version) + " (this ferry reads 1)");
  }
  Snapshot s;
  FERRY_ASSIGN_OR_RETURN(s.taken_at, json_string(j, "taken_at", w));
  if (auto up = j.find("uptime_s"); up != j.end() && up->is_number()) s.uptime_s = up->get<double>();
  if (auto h = j.find("hostname"); h != j.end() && h->is_string()) s.hostname = h->get<std::string>();

  FERRY_ASSIGN_OR_RETURN(const Json* cpus, json_array(j, "cpus", w));
  for (size_t k = 0; k < cpus->size(); ++k) {
    std::string at = w + ": cpus[" + std::to_string(k) + "]";
    platform::CpuInfo c;
    FERRY_ASSIGN_OR_RETURN(int64_t id, json_int((*cpus)[k], "cpu", at));
    FERRY_ASSIGN_OR_RETURN(int64_t node, json_int((*cpus)[k], "node", at));
    c.id = static_cast<int>(id);
    c.numa_node = static_cast<int>(node);
    FERRY_ASSIGN_OR_RETURN(c.siblings, cpu_field((*cpus)[k], "siblings", at));
    s.topology.cpus.push_back(std::move(c));
  }
  FERRY_ASSIGN_OR_RETURN(const Json* nodes, json_array(j, "numa_nodes", w));
  for (size_t k = 0; k < nodes->size(); ++k) {
    std::string at = w + ": numa_nodes[" + std::to_string(k) + "]";
    platform::NumaNode n;
    FERRY_ASSIGN_OR_RETURN(int64_t id, json_int((*nodes)[k], "node", at));
    n.id = static_cast<int>(id);
    FERRY_ASSIGN_OR_RETURN(n.cpus, cpu_field((*nodes)[k], "cpus", at));
    s.topology.nodes.push_back(std::move(n));
  }
  FERRY_ASSIGN_OR_RETURN(const Json* nics, json_array(j, "nics", w));
  for (size_t k = 0; k < nics->size(); ++k) {
    const Json& n = (*nics)[k];
    std::string at = w + ": nics[" + std::to_string(k) + "]";
    platform::NicInfo nic;
    FERRY_ASSIGN_OR_RETURN(nic.name, json_string(n, "name", at));
    FERRY_ASSIGN_OR_RETURN(nic.driver, json_string(n, "driver", at));
    FERRY_ASSIGN_OR_RETURN(nic.pci_address, json_string(n, "pci", at));
    FERRY_ASSIGN_OR_RETURN(nic.pci_path, json_string(n, "pci_path", at));
    FERRY_ASSIGN_OR_RETURN(int64_t numa, json_int(n, "numa_node", at));
    FERRY_ASSIGN_OR_RETURN(nic.speed_mbps, json_int(n, "speed_mbps", at));
    FERRY_ASSIGN_OR_RETURN(int64_t mtu, json_int(n, "mtu", at));
    FERRY_ASSIGN_OR_RETURN(int64_t rxq, json_int(n, "rx_queues", at));
    FERRY_ASSIGN_OR_RETURN(int64_t txq, json_int(n, "tx_queues", at));
    nic.numa_node = static_cast<int>(numa);
    nic.mtu = static_cast<int>(mtu);
    nic.rx_queues = static_cast<int>(rxq);
    nic.tx_queues = static_cast<int>(txq);
    s.topology.nics.push_back(std::move(nic));
  }
  FERRY_ASSIGN_OR_RETURN(const Json* gpus, json_array(j, "gpus", w));
  for (size_t k = 0; k < gpus->size(); ++k) {
    std::string at = w + ": gpus[" + std::to_string(k) + "]";
    platform::GpuInfo g;
    FERRY_ASSIGN_OR_RETURN(g.pci_address, json_string((*gpus)[k], "pci", at));
    FERRY_ASSIGN_OR_RETURN(g.pci_path, json_string((*gpus)[k], "pci_path", at));
    FERRY_ASSIGN_OR_RETURN(std::string cls, json_string((*gpus)[k], "class", at));
    g.pci_class = static_cast<uint32_t>(std::strtoul(cls.c_str(), nullptr, 16));
    FERRY_ASSIGN_OR_RETURN(int64_t numa, json_int((*gpus)[k], "numa_node", at));
    g.numa_node = static_cast<int>(numa);
    s.topology.gpus.push_back(std::move(g));
  }
  FERRY_ASSIGN_OR_RETURN(const Json* irqs, json_array(j, "irqs", w));
  for (size_t k = 0; k < irqs->size(); ++k) {
    const Json& i = (*irqs)[k];
    std::string at = w + ": irqs[" + std::to_string(k) + "]";
    IrqSample x;
    FERRY_ASSIGN_OR_RETURN(int64_t irq, json_int(i, "irq", at));
    x.irq = static_cast<int>(irq);
    FERRY_ASSIGN_OR_RETURN(x.nic, json_string(i, "nic", at));
    FERRY_ASSIGN_OR_RETURN(x.name, json_string(i, "name", at));
    FERRY_ASSIGN_OR_RETURN(std::string kind, json_string(i, "kind", at));
    auto k2 = platform::parse_irq_kind(kind);
    if (!k2.ok()) return k2.status().with_context(at + ".kind");
    x.kind = *k2;
    FERRY_ASSIGN_OR_RETURN(int64_t queue, json_int(i, "queue", at));
    x.queue = static_cast<int>(queue);
    FERRY_ASSIGN_OR_RETURN(x.affinity, cpu_field(i, "affinity", at));
    FERRY_ASSIGN_OR_RETURN(const Json* counts, json_object(i, "counts", at));
    FERRY_ASSIGN_OR_RETURN(x.counts, per_cpu_from(*counts, at + ".counts"));
    for (const auto& [cpu, n] : x.counts) x.total += n;
    s.irqs.push_back(std::move(x));
  }
  FERRY_ASSIGN_OR_RETURN(const Json* soft, json_object(j, "softirqs", w));
  FERRY_ASSIGN_OR_RETURN(const Json* rx, json_object(*soft, "NET_RX", w + ": softirqs"));
  FERRY_ASSIGN_OR_RETURN(const Json* tx, json_object(*soft, "NET_TX", w + ": softirqs"));
  FERRY_ASSIGN_OR_RETURN(s.net_rx, per_cpu_from(*rx, w + ": softirqs.NET_RX"));
  FERRY_ASSIGN_OR_RETURN(s.net_tx, per_cpu_from(*tx, w + ": softirqs.NET_TX"));
  FERRY_ASSIGN_OR_RETURN(const Json* times, json_object(j, "cpu_times", w));
  for (auto it = times->begin(); it != times->end(); ++it) {
    std::string at = w + ": cpu_times[\"" + it.key() + "\"]";
    FERRY_ASSIGN_OR_RETURN(int cpu, cpu_key(it.key(), at));
    CpuTimes& c = s.cpu_times[cpu];
    const Json& v = it.value();
    if (v.is_object()) {
      for (size_t f = 0; f < kCpuTimeFields.size(); ++f) {
        auto field = v.find(kCpuTimeFields[f]);
        if (field == v.end()) return Status(Code::kInvalidArgument, at + ": no \"" + kCpuTimeFields[f] + "\"");
        FERRY_ASSIGN_OR_RETURN(c.*kCpuTimeMembers[f], count_value(*field, at + "." + kCpuTimeFields[f]));
      }
    } else if (v.is_array() && v.size() == kCpuTimeFields.size()) {
      // Snapshots written before the fields were named: the same order.
      for (size_t f = 0; f < kCpuTimeFields.size(); ++f) {
        FERRY_ASSIGN_OR_RETURN(c.*kCpuTimeMembers[f], count_value(v[f], at + "[" + std::to_string(f) + "]"));
      }
    } else {
      return Status(Code::kInvalidArgument, at + ": expected an object of tick counts (user, nice, system, idle, "
                                                 "iowait, irq, softirq, steal)");
    }
  }
  FERRY_ASSIGN_OR_RETURN(const Json* sys, json_object(j, "sysctls", w));
  for (auto it = sys->begin(); it != sys->end(); ++it) {
    if (!it.value().is_string()) {
      return Status(Code::kInvalidArgument, w + ": sysctls." + it.key() + ": expected a string");
    }
    s.sysctls.emplace_back(it.key(), it.value().get<std::string>());
  }
  if (auto n = j.find("notes"); n != j.end() && n->is_array()) {
    for (const Json& x : *n) {
      if (x.is_string()) s.notes.push_back(x.get<std::string>());
    }
  }
  return s;
}

}  // namespace ferry::diag
