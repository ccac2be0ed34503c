// /proc sampling and the drift verdict (see sampler.h).
#include "soak/sampler.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace ferry::soak {

bool sample_process(pid_t pid, Sample* out) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  if (!status) return false;
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) out->rss_kib = std::strtoull(line.c_str() + 6, nullptr, 10);
    if (line.rfind("Threads:", 0) == 0) out->threads = std::atoi(line.c_str() + 8);
  }
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return false;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  out->fds = n;
  return true;
}

namespace {

Sample median(std::vector<Sample> v) {
  Sample m;
  auto mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end(), [](auto& a, auto& b) { return a.rss_kib < b.rss_kib; });
  m.rss_kib = v[mid].rss_kib;
  std::nth_element(v.begin(), v.begin() + mid, v.end(), [](auto& a, auto& b) { return a.threads < b.threads; });
  m.threads = v[mid].threads;
  std::nth_element(v.begin(), v.begin() + mid, v.end(), [](auto& a, auto& b) { return a.fds < b.fds; });
  m.fds = v[mid].fds;
  m.t = v[mid].t;
  return m;
}

}  // namespace

Drift judge_drift(const std::vector<Sample>& samples) {
  Drift d;
  if (samples.size() < 20) {
    d.detail = "only " + std::to_string(samples.size()) + " samples: too few to judge drift";
    return d;
  }
  double span = samples.back().t - samples.front().t;
  double warm = std::max(10.0, span * 0.10);
  std::vector<Sample> after;
  for (const auto& s : samples) {
    if (s.t - samples.front().t >= warm) after.push_back(s);
  }
  if (after.size() < 20) {
    d.detail = "only " + std::to_string(after.size()) + " samples after warm-up: too few to judge drift";
    return d;
  }
  size_t q = after.size() / 4;
  d.early = median(std::vector<Sample>(after.begin(), after.begin() + q));
  d.late = median(std::vector<Sample>(after.end() - q, after.end()));
  d.checked = true;
  char buf[256];
  std::snprintf(
      buf, sizeof(buf),
      "rss %.1f -> %.1f MiB, threads %d -> %d, fds %d -> %d (medians of the first and last quarter after warm-up)",
      d.early.rss_kib / 1024.0, d.late.rss_kib / 1024.0, d.early.threads, d.late.threads, d.early.fds, d.late.fds);
  d.detail = buf;
  if (d.late.rss_kib > d.early.rss_kib + 64 * 1024) d.ok = false;
  if (d.late.threads > d.early.threads + 12) d.ok = false;
  if (d.late.fds > d.early.fds + 12) d.ok = false;
  return d;
}

}  // namespace ferry::soak
