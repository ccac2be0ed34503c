// Reading the host's topology from sysfs under a root folder.
#include "platform/topology.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <map>

#include "platform/host_files.h"

namespace ferry::platform {
namespace fs = std::filesystem;
namespace {

Result<int64_t> parse_int(std::string_view text, const std::string& what) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  int base = 10;
  const char* start = text.data();
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    start += 2;
  }
  auto [p, ec] = std::from_chars(start, end, v, base);
  if (ec != std::errc() || p != end || start == end) {
    return Status(Code::kInvalidArgument, what + ": expected a number, found \"" + std::string(text) + "\"");
  }
  return v;
}

// An integer file, or `fallback` when the file is missing or unreadable
// (sysfs `speed` fails with EINVAL while a link is down).
int64_t read_int_or(const std::string& path, int64_t fallback) {
  auto s = read_trimmed(path);
  if (!s.ok()) return fallback;
  auto v = parse_int(*s, path);
  return v.ok() ? *v : fallback;
}

bool is_pci_address(std::string_view s) {
  // dddd:bb:dd.f in hex
  if (s.size() != 12) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (i == 4 || i == 7) {
      if (c != ':') return false;
    } else if (i == 10) {
      if (c != '.') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

// Absolute host path `p` as a path inside the root ("/sys/devices/...").
std::string inside_root(const fs::path& p, const fs::path& canonical_root) {
  std::string s = p.string(), r = canonical_root.string();
  if (r == "/") return s;
  if (s.compare(0, r.size(), r) == 0) return s.substr(r.size());
  return s;  // outside the root (a link leaving the fixture): keep it whole
}

Status read_cpus(std::string_view root, Topology& topo) {
  std::string online_path = under_root(root, "/sys/devices/system/cpu/online");
  auto online_text = read_text_file(online_path);
  if (!online_text.ok()) {
    return Status(Code::kNotFound, online_path + ": cannot read the list of online CPUs (" +
                                       online_text.status().message() + "); is the root a Linux /sys tree?");
  }
  FERRY_ASSIGN_OR_RETURN(CpuList online, parse_cpu_list(*online_text, online_path));
  if (online.empty()) return Status(Code::kInvalidArgument, online_path + ": no online CPUs listed");

  // NUMA nodes: nodeN folders with a cpulist.
  std::map<int, CpuList> node_cpus;
  std::string node_dir = under_root(root, "/sys/devices/system/node");
  if (auto names = list_dir(node_dir); names.ok()) {
    for (const std::string& name : *names) {
      if (name.size() < 5 || name.compare(0, 4, "node") != 0) continue;
      auto id = parse_int(std::string_view(name).substr(4), node_dir + "/" + name);
      if (!id.ok()) continue;  // "node" entries other than nodeN (none today)
      std::string path = node_dir + "/" + name + "/cpulist";
      auto text = read_text_file(path);
      if (!text.ok()) continue;
      FERRY_ASSIGN_OR_RETURN(CpuList cpus, parse_cpu_list(*text, path));
      CpuList on;
      std::set_intersection(cpus.begin(), cpus.end(), online.begin(), online.end(), std::back_inserter(on));
      if (!on.empty()) node_cpus[static_cast<int>(*id)] = std::move(on);
    }
  }
  if (node_cpus.empty()) node_cpus[0] = online;  // no NUMA information: one node

  std::map<int, int> node_of;
  for (const auto& [id, cpus] : node_cpus) {
    for (int c : cpus) node_of.emplace(c, id);
    topo.nodes.push_back(NumaNode{id, cpus});
  }

  for (int c : online) {
    CpuInfo info;
    info.id = c;
    auto it = node_of.find(c);
    info.numa_node = it != node_of.end() ? it->second : node_cpus.begin()->first;
    std::string path =
        under_root(root, "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/thread_siblings_list");
    if (auto text = read_text_file(path); text.ok()) {
      FERRY_ASSIGN_OR_RETURN(CpuList sib, parse_cpu_list(*text, path));
      std::set_intersection(sib.begin(), sib.end(), online.begin(), online.end(), std::back_inserter(info.siblings));
    }
    if (std::find(info.siblings.begin(), info.siblings.end(), c) == info.siblings.end()) {
      info.siblings.push_back(c);
      normalize_cpu_list(info.siblings);
    }
    topo.cpus.push_back(std::move(info));
  }
  return Status::Ok();
}

Status read_nics(std::string_view root, const fs::path& canonical_root, Topology& topo) {
  std::string net_dir = under_root(root, "/sys/class/net");
  auto names = list_dir(net_dir);
  if (!names.ok()) return Status::Ok();  // no network class: no NICs to plan for
  for (const std::string& name : *names) {
    if (name == "lo") continue;
    std::string nic_dir = net_dir + "/" + name;
    std::error_code ec;
    fs::path device = fs::canonical(nic_dir + "/device", ec);
    if (ec) continue;  // virtual: bridge, veth, tunnel, ifb, bond
    NicInfo nic;
    nic.name = name;
    nic.device_path = inside_root(device, canonical_root);
    if (auto drv = link_target_name(nic_dir + "/device/driver"); drv.ok()) nic.driver = *drv;
    // The PCI function is the device itself or an ancestor (virtio sits below it).
    for (fs::path p = device; !p.empty() && p != canonical_root && p != p.root_path(); p = p.parent_path()) {
      if (is_pci_address(p.filename().string())) {
        nic.pci_address = p.filename().string();
        nic.pci_path = inside_root(p, canonical_root);
        break;
      }
    }
    nic.numa_node = static_cast<int>(read_int_or(nic_dir + "/device/numa_node", -2));
    if (nic.numa_node == -2 && !nic.pci_path.empty()) {
      nic.numa_node = static_cast<int>(read_int_or(under_root(root, nic.pci_path) + "/numa_node", -1));
    }
    if (nic.numa_node < 0) nic.numa_node = -1;
    nic.speed_mbps = read_int_or(nic_dir + "/speed", -1);
    if (nic.speed_mbps < 0) nic.speed_mbps = -1;
    nic.mtu = static_cast<int>(read_int_or(nic_dir + "/mtu", 0));
    if (auto queues = list_dir(nic_dir + "/queues"); queues.ok()) {
      for (const std::string& q : *queues) {
        if (q.compare(0, 3, "rx-") == 0) ++nic.rx_queues;
        if (q.compare(0, 3, "tx-") == 0) ++nic.tx_queues;
      }
    }
    topo.nics.push_back(std::move(nic));
  }
  std::sort(topo.nics.begin(), topo.nics.end(),
            [](const NicInfo& a, const NicInfo& b) { return NaturalLess()(a.name, b.name); });
  return Status::Ok();
}

Status read_gpus(std::string_view root, const fs::path& canonical_root, Topology& topo) {
  std::string pci_dir = under_root(root, "/sys/bus/pci/devices");
  auto names = list_dir(pci_dir);
  if (!names.ok()) return Status::Ok();  // no PCI bus (some containers): no GPUs
  for (const std::string& addr : *names) {
    std::string dir = pci_dir + "/" + addr;
    int64_t vendor = read_int_or(dir + "/vendor", -1);
    int64_t cls = read_int_or(dir + "/class", -1);
    if (vendor != 0x10de || cls < 0) continue;
    uint32_t base = static_cast<uint32_t>(cls) >> 8;
    if (base != 0x0302 && base != 0x0300) continue;
    GpuInfo gpu;
    gpu.pci_address = addr;
    gpu.pci_class = static_cast<uint32_t>(cls);
    std::error_code ec;
    fs::path real = fs::canonical(dir, ec);
    gpu.pci_path = ec ? inside_root(fs::path(dir), canonical_root) : inside_root(real, canonical_root);
    gpu.numa_node = static_cast<int>(read_int_or(dir + "/numa_node", -1));
    if (gpu.numa_node < 0) gpu.numa_node = -1;
    topo.gpus.push_back(std::move(gpu));
  }
  return Status::Ok();
}

}  // namespace

const NicInfo* Topology::find_nic(std::string_view name) const {
  for (const NicInfo& n : nics) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

const CpuInfo* Topology::find_cpu(int id) const {
  auto it = std::lower_bound(cpus.begin(), cpus.end(), id, [](const CpuInfo& c, int v) { return c.id < v; });
  return it != cpus.end() && it->id == id ? &*it : nullptr;
}

const NumaNode* Topology::find_node(int id) const {
  for (const NumaNode& n : nodes) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

int Topology::nic_node(const NicInfo& nic) const {
  if (nic.numa_node >= 0 && find_node(nic.numa_node) != nullptr) return nic.numa_node;
  if (nodes.size() == 1) return nodes.front().id;
  return -1;
}

CpuList Topology::all_cpus() const {
  CpuList out;
  out.reserve(cpus.size());
  for (const CpuInfo& c : cpus) out.push_back(c.id);
  return out;
}

Result<Topology> read_topology(std::string_view root) {
  std::string r = root.empty() ? std::string("/") : std::string(root);
  std::error_code ec;
  fs::path canonical_root = fs::canonical(r, ec);
  if (ec) return errno_status(ec.value(), "open root folder", r);
  Topology topo;
  FERRY_RETURN_IF_ERROR(read_cpus(root, topo));
  FERRY_RETURN_IF_ERROR(read_nics(root, canonical_root, topo));
  FERRY_RETURN_IF_ERROR(read_gpus(root, canonical_root, topo));
  return topo;
}

}  // namespace ferry::platform
