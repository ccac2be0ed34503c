// IoPool: starting each NIC's workers, pinned, and placing streams on them.
#include "transport/tcp/io_pool.h"

#include <algorithm>
#include <set>

#include "platform/log.h"
#include "platform/thread.h"

namespace ferry::tcp {
namespace {

// Pins the calling worker and logs expected and actual CPU sets (docs/architecture.md, "Threads").
void pin_and_log(uint64_t engine, const std::string& thread, const char* role, const std::string& nic,
                 const platform::CpuList& expected) {
  platform::CpuList actual = platform::pin_current_thread(expected);
  bool ok = expected.empty() || actual == expected;
  FERRY_ENGINE_LOG(kInfo, "tcp", engine, "%s %s worker %s: expected %s actual %s %s", role,
                   nic.empty() ? "-" : nic.c_str(), thread.c_str(),
                   expected.empty() ? "any" : platform::format_cpu_list(expected).c_str(),
                   platform::format_cpu_list(actual).c_str(), ok ? "ok" : "MISMATCH");
  if (!ok) {
    FERRY_ENGINE_LOG(kWarn, "tcp", engine, "%s worker %s could not be pinned to %s (runs on %s)", role, thread.c_str(),
                     platform::format_cpu_list(expected).c_str(), platform::format_cpu_list(actual).c_str());
  }
}

}  // namespace

size_t IoPool::workers_per_group(const Options& o, size_t bound_cpus, int usable_cpus) {
  if (o.workers > 0) return static_cast<size_t>(o.workers);
  const size_t cpus = bound_cpus > 0 ? bound_cpus : static_cast<size_t>(std::max(usable_cpus, 1));
  return std::min(static_cast<size_t>(auto_streams(usable_cpus)), cpus);
}

Result<std::shared_ptr<IoPool>> IoPool::start(const core::EngineContext& ctx) {
  std::shared_ptr<IoPool> pool(new IoPool());
  std::set<std::string> nics;
  for (const auto& n : ctx.nics) nics.insert(n.name);
  std::vector<std::string> order(nics.begin(), nics.end());
  order.insert(order.begin(), "");  // streams on no named NIC
  const uint64_t engine = ctx.engine_id;
  for (const std::string& nic : order) {
    Group g;
    g.nic = nic;
    for (Role role : {Role::kRx, Role::kTx}) {
      const platform::NicBindings& b = role == Role::kRx ? ctx.worker_cpus.rx : ctx.worker_cpus.tx;
      auto it = nic.empty() ? b.end() : b.find(nic);
      platform::CpuList cpus = it == b.end() ? platform::CpuList{} : it->second;
      const size_t n = workers_per_group(ctx.options, cpus.size(), platform::usable_cpu_count());
      const char* r = role == Role::kRx ? "rx" : "tx";
      for (size_t i = 0; i < n; ++i) {
        std::string name = std::string("ferry-") + r + "-" + (nic.empty() ? std::string("any") : nic) + "-" +
                           std::to_string(i);
        auto w = platform::FiberWorker::start(name, [engine, name, r, nic, cpus] {
          pin_and_log(engine, name, r, nic, cpus);
        });
        if (!w.ok()) {
          // The pool's destructor stops the groups it holds; this one's
          // workers are not among them yet.
          for (auto& started : g.rx) started->stop();
          for (auto& started : g.tx) started->stop();
          return w.status().with_context("tcp data plane");
        }
        (role == Role::kRx ? g.rx : g.tx).push_back(std::move(w).value());
      }
    }
    pool->groups_.push_back(std::move(g));
  }
  return pool;
}

IoPool::~IoPool() {
  for (Group& g : groups_) {
    for (auto& w : g.rx) w->stop();
    for (auto& w : g.tx) w->stop();
  }
}

platform::FiberWorker& IoPool::pick(Role role, const std::string& nic) {
  Group* group = &groups_.front();
  for (Group& g : groups_) {
    if (!nic.empty() && g.nic == nic) group = &g;
  }
  auto& workers = role == Role::kRx ? group->rx : group->tx;
  platform::FiberWorker* best = workers.front().get();
  for (auto& w : workers) {
    if (w->load() < best->load()) best = w.get();
  }
  return *best;
}

size_t IoPool::size() const {
  size_t n = 0;
  for (const Group& g : groups_) n += g.rx.size() + g.tx.size();
  return n;
}

Result<IoPool*> io_pool(core::EngineContext& ctx) {
  if (!ctx.tcp_pool) return Status(Code::kInternal, "this engine has no TCP data plane");
  return ctx.tcp_pool.get();
}

}  // namespace ferry::tcp
