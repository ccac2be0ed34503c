// Reading the throughput-limiting host settings and what to change them to.
#include "tune/host_settings.h"

#include <charconv>
#include <map>

#include "platform/host_files.h"
#include "platform/text.h"

namespace ferry::tune {
namespace {

using platform::read_trimmed;
using platform::under_root;

// 256 MiB: at 200 Gb/s and a 1 ms round trip one NIC holds 25 MB in flight;
// the maximum bounds what one socket may ask for, not what every socket gets.
constexpr int64_t kSocketBufferMax = 256ll << 20;
constexpr int64_t kOptmemMax = 1 << 20;  // 1 MiB
constexpr int64_t kBusyPollUs = 50;

bool to_int(std::string_view s, int64_t& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

HostSetting unavailable(HostSetting s, const Status& why) {
  s.state = SettingState::kUnavailable;
  s.current = why.code() == Code::kNotFound ? "not available" : "unreadable: " + why.message();
  return s;
}

// A sysctl that should be at least `min`.
HostSetting at_least(std::string_view root, std::string name, std::string path, int64_t min, std::string why) {
  HostSetting s;
  s.name = std::move(name);
  s.recommended = std::to_string(min) + " or more";
  s.why = std::move(why);
  auto cur = read_trimmed(under_root(root, path));
  if (!cur.ok()) return unavailable(std::move(s), cur.status());
  s.current = *cur;
  int64_t v = 0;
  if (!to_int(*cur, v)) {
    s.state = SettingState::kUnavailable;
    s.current = "unreadable: \"" + *cur + "\" is not a number";
    return s;
  }
  if (v >= min) {
    s.state = SettingState::kOk;
  } else {
    s.state = SettingState::kChange;
    s.changes.push_back(FileChange{path, std::to_string(min), s.name, CompareAs::kWords});
  }
  return s;
}

// A "min default max" triple whose max should be at least `min`.
HostSetting triple_max_at_least(std::string_view root, std::string name, std::string path, int64_t min,
                                std::string why) {
  HostSetting s;
  s.name = std::move(name);
  s.recommended = "maximum (third value) " + std::to_string(min) + " or more";
  s.why = std::move(why);
  auto cur = read_trimmed(under_root(root, path));
  if (!cur.ok()) return unavailable(std::move(s), cur.status());
  std::vector<std::string_view> w = platform::split_words(*cur);
  s.current = cur->empty()    ? ""
              : w.size() == 3 ? std::string(w[0]) + " " + std::string(w[1]) + " " + std::string(w[2])
                              : *cur;
  int64_t v = 0;
  if (w.size() != 3 || !to_int(w[2], v)) {
    s.state = SettingState::kUnavailable;
    s.current = "unreadable: \"" + *cur + "\" is not three numbers";
    return s;
  }
  if (v >= min) {
    s.state = SettingState::kOk;
  } else {
    s.state = SettingState::kChange;
    s.changes.push_back(FileChange{path, std::string(w[0]) + "\t" + std::string(w[1]) + "\t" + std::to_string(min),
                                   s.name, CompareAs::kWords});
  }
  return s;
}

HostSetting governor(std::string_view root, const platform::Topology& topo) {
  HostSetting s;
  s.name = "cpu frequency governor";
  s.recommended = "performance";
  s.why =
      "powersave and schedutil lower the clock of cores that sleep between chunks; a TX or RX worker then runs "
      "slow after every wait";
  std::map<std::string, int> seen;
  for (const platform::CpuInfo& c : topo.cpus) {
    std::string path = "/sys/devices/system/cpu/cpu" + std::to_string(c.id) + "/cpufreq/scaling_governor";
    auto cur = read_trimmed(under_root(root, path));
    if (!cur.ok()) continue;
    ++seen[*cur];
    if (*cur != "performance") {
      s.changes.push_back(
          FileChange{path, "performance", "governor of CPU " + std::to_string(c.id), CompareAs::kWords});
    }
  }
  if (seen.empty()) {
    s.state = SettingState::kUnavailable;
    s.current = "no cpufreq (VM or firmware)";
    return s;
  }
  for (const auto& [g, n] : seen) {
    s.current += (s.current.empty() ? "" : ", ") + g + " (" + std::to_string(n) + " CPUs)";
  }
  s.state = s.changes.empty() ? SettingState::kOk : SettingState::kChange;
  return s;
}

HostSetting numa_balancing(std::string_view root, const platform::Topology& topo) {
  HostSetting s;
  s.name = "kernel.numa_balancing";
  s.recommended = "0";
  s.why =
      "automatic NUMA balancing unmaps pages to sample accesses and migrates memory and threads away from "
      "where ferry pinned them: page faults and cache misses on the data path";
  auto cur = read_trimmed(under_root(root, "/proc/sys/kernel/numa_balancing"));
  if (!cur.ok()) return unavailable(std::move(s), cur.status());
  s.current = *cur;
  if (*cur == "0") {
    s.state = SettingState::kOk;
  } else {
    s.state = SettingState::kChange;
    s.changes.push_back(FileChange{"/proc/sys/kernel/numa_balancing", "0", s.name, CompareAs::kWords});
  }
  if (topo.nodes.size() <= 1 && s.state == SettingState::kChange) {
    s.why += " (one NUMA node here: harmless either way)";
  }
  return s;
}

HostSetting irqbalance(std::string_view root) {
  HostSetting s;
  s.name = "irqbalance daemon";
  s.recommended = "not running";
  s.why =
      "it rewrites IRQ affinities every 10 s, undoing `ferry tune apply`; stop it with `systemctl stop "
      "irqbalance` (ferry does not stop services)";
  std::string proc = under_root(root, "/proc");
  auto names = platform::list_dir(proc);
  if (!names.ok()) return unavailable(std::move(s), names.status());
  std::vector<std::string> pids;
  for (const std::string& n : *names) {
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) continue;
    auto comm = read_trimmed(proc + "/" + n + "/comm");
    if (comm.ok() && *comm == "irqbalance") pids.push_back(n);
  }
  if (pids.empty()) {
    s.current = "not running";
    s.state = SettingState::kOk;
  } else {
    s.current = "running (pid " + pids.front() + ")";
    s.state = SettingState::kManual;
  }
  return s;
}

}  // namespace

std::string_view setting_state_name(SettingState state) {
  switch (state) {
    case SettingState::kOk:
      return "ok";
    case SettingState::kChange:
      return "change";
    case SettingState::kManual:
      return "manual";
    case SettingState::kUnavailable:
      break;
  }
  return "unavailable";
}

const std::vector<SysctlFile>& recorded_sysctls() {
  static const std::vector<SysctlFile> kFiles = {
      {"net.core.rmem_max", "/proc/sys/net/core/rmem_max"},
      {"net.core.wmem_max", "/proc/sys/net/core/wmem_max"},
      {"net.core.optmem_max", "/proc/sys/net/core/optmem_max"},
      {"net.core.busy_poll", "/proc/sys/net/core/busy_poll"},
      {"net.core.busy_read", "/proc/sys/net/core/busy_read"},
      {"net.ipv4.tcp_rmem", "/proc/sys/net/ipv4/tcp_rmem"},
      {"net.ipv4.tcp_wmem", "/proc/sys/net/ipv4/tcp_wmem"},
      {"kernel.numa_balancing", "/proc/sys/kernel/numa_balancing"},
  };
  return kFiles;
}

std::vector<HostSetting> read_host_settings(std::string_view root, const platform::Topology& topo) {
  std::vector<HostSetting> out;
  out.push_back(at_least(root, "net.core.rmem_max", "/proc/sys/net/core/rmem_max", kSocketBufferMax,
                         "caps SO_RCVBUF: a 200 Gb/s NIC with 1 ms of round trip holds 25 MB in flight, and ferry's "
                         "socket_buffer_bytes cannot go past this"));
  out.push_back(at_least(root, "net.core.wmem_max", "/proc/sys/net/core/wmem_max", kSocketBufferMax,
                         "caps SO_SNDBUF, as rmem_max caps the receive side"));
  out.push_back(triple_max_at_least(root, "net.ipv4.tcp_rmem", "/proc/sys/net/ipv4/tcp_rmem", kSocketBufferMax,
                                    "receive autotuning grows a socket's buffer up to the third value; too low and "
                                    "one stream cannot fill a fast NIC over distance"));
  out.push_back(triple_max_at_least(root, "net.ipv4.tcp_wmem", "/proc/sys/net/ipv4/tcp_wmem", kSocketBufferMax,
                                    "send autotuning limit, as tcp_rmem for receive"));
  out.push_back(at_least(root, "net.core.optmem_max", "/proc/sys/net/core/optmem_max", kOptmemMax,
                         "MSG_ZEROCOPY charges each pending completion notification to the socket's option memory; "
                         "when it runs out, sends fail with ENOBUFS or fall back to copying"));
  out.push_back(at_least(root, "net.core.busy_read", "/proc/sys/net/core/busy_read", kBusyPollUs,
                         "blocking receives poll the NIC queue this many microseconds before sleeping: fewer "
                         "interrupts and wake-ups for small messages, at the cost of CPU on the RX cores"));
  out.push_back(at_least(root, "net.core.busy_poll", "/proc/sys/net/core/busy_poll", kBusyPollUs,
                         "the same for poll and epoll waits"));
  out.push_back(governor(root, topo));
  out.push_back(numa_balancing(root, topo));
  out.push_back(irqbalance(root));
  return out;
}

}  // namespace ferry::tune
