// The soak's verdict and its table (see report.h).
#include "soak/report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace ferry::soak {

namespace {

std::string fails(const std::map<std::string, uint64_t>& c) {
  std::string s;
  for (auto& [k, v] : c) {
    if (k.rfind("fail.", 0) == 0) s += (s.empty() ? "" : ", ") + k.substr(5) + " " + std::to_string(v);
  }
  return s.empty() ? "none" : s;
}

uint64_t sum_prefix(const std::map<std::string, uint64_t>& c, const std::string& prefix) {
  uint64_t n = 0;
  for (auto& [k, v] : c) {
    if (k.rfind(prefix, 0) == 0) n += v;
  }
  return n;
}

uint64_t at(const std::map<std::string, uint64_t>& c, const std::string& k) {
  auto it = c.find(k);
  return it == c.end() ? 0 : it->second;
}

std::string mib(uint64_t kib) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f MiB", kib / 1024.0);
  return b;
}

}  // namespace

uint64_t Report::late_failures() const {
  return at(survivor, "fail.deadline_exceeded") + at(others, "fail.deadline_exceeded");
}

uint64_t Report::failed_ops() const { return sum_prefix(survivor, "fail.") + sum_prefix(others, "fail."); }

bool Report::passed() const {
  bool ok = late_failures() == 0 && corruptions == 0 && hangs == 0 && violations == 0 && crashes == 0 &&
            probes_failed == 0 && final_probe_ok && leaked_fds == 0 && leaked_threads == 0 && drift.ok &&
            never_injected.empty() && at(survivor, "ops_ok") > 0;
  if (strict && failed_ops() > 0) ok = false;
  return ok;
}

std::string Report::table() const {
  std::string out;
  auto row = [&](const std::string& k, const std::string& v) {
    char b[64];
    std::snprintf(b, sizeof(b), "  %-26s ", k.c_str());
    out += b + v + "\n";
  };
  char head[256];
  std::snprintf(head, sizeof(head),
                "ferry soak: %s transport, %s memory, %.0f s, %d peers x %d lanes, operations 1 B..%llu B: %s\n",
                transport.c_str(), memory.c_str(), seconds, peers, lanes, static_cast<unsigned long long>(max_op_bytes),
                passed() ? "PASSED" : "FAILED");
  out += head;
  row("operations (survivor side)", std::to_string(at(survivor, "ops")) + " (ok " +
                                        std::to_string(at(survivor, "ops_ok")) + "; failed: " + fails(survivor) + ")");
  std::string kinds;
  for (auto& [k, v] : survivor) {
    if (k.rfind("op.", 0) == 0) kinds += (kinds.empty() ? "" : ", ") + k.substr(3) + " " + std::to_string(v);
  }
  row("  by kind", kinds.empty() ? "none" : kinds);
  row("failed on the peers' side", fails(others));
  uint64_t at_end = sum_prefix(survivor, "fail_at_end.") + sum_prefix(others, "fail_at_end.");
  if (at_end > 0) row("  ended by the run's end", std::to_string(at_end) + " (the other end left between operations)");
  char gib[64];
  std::snprintf(gib, sizeof(gib), "%.2f GiB", (at(survivor, "bytes") + at(others, "bytes")) / double(1ull << 30));
  row("bytes verified", gib);
  std::string f;
  for (auto& [k, v] : faults) f += (f.empty() ? "" : ", ") + k + " " + std::to_string(v);
  row("faults injected", f.empty() ? "none" : f);
  uint64_t hit = at(survivor, "dereg_done") + at(others, "dereg_done");
  uint64_t idle = at(survivor, "dereg_idle") + at(others, "dereg_idle");
  if (hit + idle > 0) {
    row("  dereg", std::to_string(hit) + " caught a transfer, " + std::to_string(idle) + " found none; " +
                       std::to_string(at(survivor, "canary_checked") + at(others, "canary_checked")) +
                       " receiving regions found untouched after dereg returned");
  }
  if (at(survivor, "limit.memory_enforced") + at(survivor, "limit.memory_other") + at(survivor, "holds") > 0) {
    row("  exhaust", "memory floods refused " + std::to_string(at(survivor, "limit.memory_enforced")) +
                         " (ended otherwise " + std::to_string(at(survivor, "limit.memory_other")) +
                         "), held connections admitted " + std::to_string(at(survivor, "holds")));
  }
  for (auto& [k, why] : skipped) row("  skipped: " + k, why);
  for (auto& k : never_injected) row("  never injected: " + k, "the run was too short (FAILED)");
  row("peer restarts", std::to_string(restarts));
  row("probes (new connections)", std::to_string(probes_ok) + " ok, " + std::to_string(probes_failed) +
                                      " failed; final " + (final_probe_ok ? "ok" : "FAILED"));
  row("ran into their deadline",
      std::to_string(late_failures()) + " (a fault must surface as its cause within peer_timeout, not as a deadline)");
  row("corruptions", std::to_string(corruptions));
  row("hangs", std::to_string(hangs));
  row("contract violations", std::to_string(violations));
  row("crashes", std::to_string(crashes));
  row("leaked fds / threads", std::to_string(leaked_fds) + " / " + std::to_string(leaked_threads) + " (baseline " +
                                  std::to_string(baseline.fds) + " fds, " + std::to_string(baseline.threads) +
                                  " threads; after the peers " + std::to_string(final_sample.fds) + ", " +
                                  std::to_string(final_sample.threads) + ")");
  row("RSS start / end", mib(baseline.rss_kib) + " / " + mib(final_sample.rss_kib));
  row("drift", std::string(drift.checked ? (drift.ok ? "ok: " : "GROWING: ") : "not judged: ") + drift.detail);
  if (strict) row("strict (no faults)", std::to_string(failed_ops()) + " failed operations (must be 0)");
  for (auto& p : problems) row("problem", p);
  row("logs", dir);
  return out;
}

std::string Report::json() const {
  nlohmann::json j;
  j["passed"] = passed();
  j["transport"] = transport;
  j["memory"] = memory;
  j["seconds"] = seconds;
  j["peers"] = peers;
  j["lanes"] = lanes;
  j["max_op_bytes"] = max_op_bytes;
  j["survivor_counters"] = survivor;
  j["peer_counters"] = others;
  j["operations"] = at(survivor, "ops");
  j["operations_ok"] = at(survivor, "ops_ok");
  j["bytes_verified"] = at(survivor, "bytes") + at(others, "bytes");
  j["faults"] = faults;
  j["faults_skipped"] = skipped;
  j["faults_never_injected"] = never_injected;
  j["deadline_failures"] = late_failures();
  j["corruptions"] = corruptions;
  j["hangs"] = hangs;
  j["violations"] = violations;
  j["crashes"] = crashes;
  j["peer_restarts"] = restarts;
  j["probes_ok"] = probes_ok;
  j["probes_failed"] = probes_failed;
  j["final_probe_ok"] = final_probe_ok;
  j["leaked_fds"] = leaked_fds;
  j["leaked_threads"] = leaked_threads;
  j["rss_start_kib"] = baseline.rss_kib;
  j["rss_end_kib"] = final_sample.rss_kib;
  j["baseline"] = {{"fds", baseline.fds}, {"threads", baseline.threads}, {"rss_kib", baseline.rss_kib}};
  j["drift"] = {{"checked", drift.checked}, {"ok", drift.ok}, {"detail", drift.detail}};
  j["problems"] = problems;
  j["logs"] = dir;
  return j.dump(2);
}

}  // namespace ferry::soak
