// Tuning plans to and from JSON.
#include "tune/plan_json.h"

#include "tune/json_fields.h"

namespace ferry::tune {
namespace {

using platform::format_cpu_list;

Result<platform::CpuList> cpu_field(const Json& obj, std::string_view key, const std::string& where) {
  FERRY_ASSIGN_OR_RETURN(std::string text, json_string(obj, key, where));
  return platform::parse_cpu_list(text, where + "." + std::string(key));
}

Result<std::string> string_or_empty(const Json& obj, std::string_view key, const std::string& where) {
  if (obj.is_object() && !obj.contains(std::string(key))) return std::string();
  return json_string(obj, key, where);
}

// The only files a plan read from disk may change: a plan is input, and apply
// runs as root.
bool tunable_path(const std::string& p) {
  auto starts = [&](std::string_view prefix) { return p.compare(0, prefix.size(), prefix) == 0; };
  auto ends = [&](std::string_view suffix) {
    return p.size() >= suffix.size() && p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (p.find("..") != std::string::npos) return false;
  return starts("/proc/sys/net/") || p == "/proc/sys/kernel/numa_balancing" ||
         (starts("/sys/devices/system/cpu/cpu") && ends("/cpufreq/scaling_governor"));
}

}  // namespace

std::string plan_to_json(const TunePlan& plan) {
  const platform::Topology& t = plan.topology;
  Json j;
  j["version"] = 1;
  j["irq_mode"] = std::string(irq_mode_name(plan.irq_mode));
  j["tx_bindings"] = plan.tx_bindings();
  j["rx_bindings"] = plan.rx_bindings();
  j["env"] = {{"FERRY_TX_BINDINGS", plan.tx_bindings()},
              {"FERRY_RX_BINDINGS", plan.rx_bindings()},
              {"NCCL_GPUDIRECTTCPX_TX_BINDINGS", plan.tx_bindings()},
              {"NCCL_GPUDIRECTTCPX_RX_BINDINGS", plan.rx_bindings()}};
  Json host;
  host["cpus"] = t.cpus.size();
  host["numa_nodes"] = Json::array();
  for (const platform::NumaNode& n : t.nodes) {
    host["numa_nodes"].push_back({{"node", n.id}, {"cpus", format_cpu_list(n.cpus)}});
  }
  host["gpus"] = Json::array();
  for (const platform::GpuInfo& g : t.gpus) {
    host["gpus"].push_back({{"pci", g.pci_address}, {"numa_node", g.numa_node}});
  }
  j["host"] = host;
  j["nodes"] = Json::array();
  for (const platform::NodeSets& s : plan.bindings.nodes) {
    j["nodes"].push_back({{"node", s.node},
                          {"cores", s.cores},
                          {"system", format_cpu_list(s.system)},
                          {"tx", format_cpu_list(s.tx)},
                          {"rx", format_cpu_list(s.rx)},
                          {"app", format_cpu_list(s.app)},
                          {"shared", s.shared}});
  }
  j["nics"] = Json::array();
  for (const std::string& name : plan.bindings.nic_order) {
    Json n = {{"name", name},
              {"node", plan.bindings.nic_node.at(name)},
              {"tx", format_cpu_list(plan.bindings.tx.at(name))},
              {"rx", format_cpu_list(plan.bindings.rx.at(name))}};
    if (const platform::NicInfo* info = t.find_nic(name)) {
      n["numa_node"] = info->numa_node;
      n["driver"] = info->driver;
      n["pci"] = info->pci_address;
      n["speed_mbps"] = info->speed_mbps;
      n["mtu"] = info->mtu;
      n["rx_queues"] = info->rx_queues;
      n["tx_queues"] = info->tx_queues;
    }
    j["nics"].push_back(std::move(n));
  }
  j["irqs"] = Json::array();
  for (const IrqPlan& p : plan.irqs) {
    Json i = {{"irq", p.irq},
              {"nic", p.nic},
              {"name", p.name},
              {"kind", std::string(platform::irq_kind_name(p.kind))},
              {"queue", p.queue},
              {"basis", p.basis},
              {"current", format_cpu_list(p.current)},
              {"planned", format_cpu_list(p.planned)},
              {"reason", p.reason}};
    if (!p.current_error.empty()) i["current_error"] = p.current_error;
    j["irqs"].push_back(std::move(i));
  }
  j["settings"] = Json::array();
  for (const HostSetting& s : plan.settings) {
    Json changes = Json::array();
    for (const FileChange& c : s.changes) changes.push_back({{"path", c.path}, {"value", c.value}, {"what", c.what}});
    j["settings"].push_back({{"name", s.name},
                             {"state", std::string(setting_state_name(s.state))},
                             {"current", s.current},
                             {"recommended", s.recommended},
                             {"why", s.why},
                             {"changes", changes}});
  }
  j["notes"] = plan.notes;
  return dump_json(j);
}

Result<TunePlan> plan_from_json(std::string_view text, std::string_view what) {
  const std::string w(what);
  FERRY_ASSIGN_OR_RETURN(Json j, parse_json(text, what));
  FERRY_ASSIGN_OR_RETURN(int64_t version, json_int(j, "version", w));
  if (version != 1) {
    return Status(Code::kInvalidArgument, w + ": plan version " + std::to_string(version) + " (this ferry reads 1)");
  }
  TunePlan plan;
  FERRY_ASSIGN_OR_RETURN(std::string mode, json_string(j, "irq_mode", w));
  FERRY_ASSIGN_OR_RETURN(plan.irq_mode, parse_irq_mode(mode));
  FERRY_ASSIGN_OR_RETURN(std::string tx, json_string(j, "tx_bindings", w));
  FERRY_ASSIGN_OR_RETURN(std::string rx, json_string(j, "rx_bindings", w));
  if (!tx.empty()) {
    FERRY_ASSIGN_OR_RETURN(plan.bindings.tx, platform::parse_bindings(tx, w + ".tx_bindings"));
  }
  if (!rx.empty()) {
    FERRY_ASSIGN_OR_RETURN(plan.bindings.rx, platform::parse_bindings(rx, w + ".rx_bindings"));
  }

  FERRY_ASSIGN_OR_RETURN(const Json* nodes, json_array(j, "nodes", w));
  for (size_t k = 0; k < nodes->size(); ++k) {
    const Json& n = (*nodes)[k];
    std::string at = w + ": nodes[" + std::to_string(k) + "]";
    platform::NodeSets s;
    FERRY_ASSIGN_OR_RETURN(int64_t id, json_int(n, "node", at));
    FERRY_ASSIGN_OR_RETURN(int64_t cores, json_int(n, "cores", at));
    s.node = static_cast<int>(id);
    s.cores = static_cast<int>(cores);
    FERRY_ASSIGN_OR_RETURN(s.system, cpu_field(n, "system", at));
    FERRY_ASSIGN_OR_RETURN(s.tx, cpu_field(n, "tx", at));
    FERRY_ASSIGN_OR_RETURN(s.rx, cpu_field(n, "rx", at));
    FERRY_ASSIGN_OR_RETURN(s.app, cpu_field(n, "app", at));
    FERRY_ASSIGN_OR_RETURN(s.shared, json_bool(n, "shared", at));
    plan.bindings.nodes.push_back(std::move(s));
  }
  FERRY_ASSIGN_OR_RETURN(const Json* nics, json_array(j, "nics", w));
  for (size_t k = 0; k < nics->size(); ++k) {
    std::string at = w + ": nics[" + std::to_string(k) + "]";
    FERRY_ASSIGN_OR_RETURN(std::string name, json_string((*nics)[k], "name", at));
    FERRY_ASSIGN_OR_RETURN(int64_t node, json_int((*nics)[k], "node", at));
    // Every NIC the plan lists has its bindings, once (the writer relies on it).
    if (plan.bindings.tx.count(name) == 0 || plan.bindings.rx.count(name) == 0) {
      return Status(Code::kInvalidArgument, at + ": NIC \"" + name + "\" has no entry in tx_bindings and rx_bindings");
    }
    if (plan.bindings.nic_node.count(name) != 0) {
      return Status(Code::kInvalidArgument, at + ": NIC \"" + name + "\" is listed twice");
    }
    plan.bindings.nic_order.push_back(name);
    plan.bindings.nic_node[name] = static_cast<int>(node);
  }
  FERRY_ASSIGN_OR_RETURN(const Json* irqs, json_array(j, "irqs", w));
  for (size_t k = 0; k < irqs->size(); ++k) {
    const Json& i = (*irqs)[k];
    std::string at = w + ": irqs[" + std::to_string(k) + "]";
    IrqPlan p;
    FERRY_ASSIGN_OR_RETURN(int64_t irq, json_int(i, "irq", at));
    if (irq < 0 || irq > (1 << 24))
      return Status(Code::kInvalidArgument, at + ".irq: " + std::to_string(irq) + " is not an IRQ number");
    p.irq = static_cast<int>(irq);
    FERRY_ASSIGN_OR_RETURN(p.nic, json_string(i, "nic", at));
    FERRY_ASSIGN_OR_RETURN(p.name, string_or_empty(i, "name", at));
    FERRY_ASSIGN_OR_RETURN(std::string kind, json_string(i, "kind", at));
    auto k2 = platform::parse_irq_kind(kind);
    if (!k2.ok()) return k2.status().with_context(at + ".kind");
    p.kind = *k2;
    FERRY_ASSIGN_OR_RETURN(int64_t queue, json_int(i, "queue", at));
    p.queue = static_cast<int>(queue);
    FERRY_ASSIGN_OR_RETURN(p.basis, string_or_empty(i, "basis", at));
    FERRY_ASSIGN_OR_RETURN(p.current, cpu_field(i, "current", at));
    FERRY_ASSIGN_OR_RETURN(p.planned, cpu_field(i, "planned", at));
    FERRY_ASSIGN_OR_RETURN(p.reason, string_or_empty(i, "reason", at));
    plan.irqs.push_back(std::move(p));
  }
  FERRY_ASSIGN_OR_RETURN(const Json* settings, json_array(j, "settings", w, /*optional=*/true));
  if (settings != nullptr) {
    for (size_t k = 0; k < settings->size(); ++k) {
      const Json& s = (*settings)[k];
      std::string at = w + ": settings[" + std::to_string(k) + "]";
      HostSetting h;
      FERRY_ASSIGN_OR_RETURN(h.name, json_string(s, "name", at));
      FERRY_ASSIGN_OR_RETURN(std::string state, json_string(s, "state", at));
      bool known = false;
      for (SettingState st :
           {SettingState::kOk, SettingState::kChange, SettingState::kManual, SettingState::kUnavailable}) {
        if (setting_state_name(st) == state) {
          h.state = st;
          known = true;
        }
      }
      if (!known) return Status(Code::kInvalidArgument, at + ".state: unknown state \"" + state + "\"");
      FERRY_ASSIGN_OR_RETURN(h.current, string_or_empty(s, "current", at));
      FERRY_ASSIGN_OR_RETURN(h.recommended, string_or_empty(s, "recommended", at));
      FERRY_ASSIGN_OR_RETURN(h.why, string_or_empty(s, "why", at));
      FERRY_ASSIGN_OR_RETURN(const Json* changes, json_array(s, "changes", at));
      for (size_t c = 0; c < changes->size(); ++c) {
        std::string cat = at + ".changes[" + std::to_string(c) + "]";
        FileChange fc;
        FERRY_ASSIGN_OR_RETURN(fc.path, json_string((*changes)[c], "path", cat));
        FERRY_ASSIGN_OR_RETURN(fc.value, json_string((*changes)[c], "value", cat));
        FERRY_ASSIGN_OR_RETURN(fc.what, string_or_empty((*changes)[c], "what", cat));
        if (!tunable_path(fc.path)) {
          return Status(Code::kInvalidArgument, cat + ".path: \"" + fc.path +
                                                    "\" is not a file ferry tune changes (/proc/sys/net/, "
                                                    "/proc/sys/kernel/numa_balancing, cpufreq governors)");
        }
        if (fc.what.empty()) fc.what = h.name;
        h.changes.push_back(std::move(fc));
      }
      plan.settings.push_back(std::move(h));
    }
  }
  FERRY_ASSIGN_OR_RETURN(const Json* notes, json_array(j, "notes", w, /*optional=*/true));
  if (notes != nullptr) {
    for (const Json& n : *notes) {
      if (n.is_string()) plan.notes.push_back(n.get<std::string>());
    }
  }
  return plan;
}

}  // namespace ferry::tune
