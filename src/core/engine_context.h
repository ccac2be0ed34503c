// EngineContext: what an engine shares with its transports and connections
// (options, identity, registry, what its connections hold). Held by
// shared_ptr so a connection that outlives its Engine object still finds
// valid state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/metrics.h"
#include "core/admission.h"
#include "core/notification_queue.h"
#include "core/notification_signal.h"
#include "core/registry.h"
#include "core/worker_cpus.h"
#include "ferry/options.h"
#include "platform/identity.h"
#include "platform/interfaces.h"

namespace ferry::platform {
class GatherKernels;
class StagingKernels;
class StreamSignals;
class GpuReserve;
class ResidentGather;
}  // namespace ferry::platform

namespace ferry::tcp {
class IoPool;
}  // namespace ferry::tcp

namespace ferry::local {
class GpuExports;
class GpuImports;
struct LocalWorkers;
}  // namespace ferry::local

namespace ferry::core {

class StreamGate;

struct EngineContext {
  Options options;
  // The key whose id engine_id is; the handshake signs with it.
  std::shared_ptr<const platform::IdentityKey> identity;
  uint64_t engine_id = 0;
  std::string host_id;
  // The NICs named by Options::nics (empty: none named).
  std::vector<platform::Interface> nics;
  // "ip:port" peers may reach this engine at, preferred first. Written once
  // by Engine::create before the listener accepts anyone.
  std::vector<std::string> addresses;
  // The engine listens on every address and names no NICs: `addresses` are
  // what peers elsewhere may try, and a connector's data streams go to the
  // address its control stream reached (the WELCOME names only that one).
  bool listens_everywhere = false;
  // NUMA node of each named NIC (-1 unknown).
  std::map<std::string, int> nic_nodes;
  // The host's shape as read at start (empty where sysfs says nothing).
  platform::Topology topology;
  // CPUs of each NIC's transmit and receive workers.
  WorkerCpus worker_cpus;
  Registry registry;
  Admission admission;
  // What all connections hold for their peers (Options::engine_memory_bytes);
  // each connection's budget takes from it.
  std::shared_ptr<ByteBudget> memory_budget;
  // Bumped whenever any connection queues a notification.
  NotificationSignal notifications;
  // GPU memory shared with and opened from same-host peers (local transport).
  std::shared_ptr<local::GpuExports> gpu_exports;
  std::shared_ptr<local::GpuImports> gpu_imports;
  // The threads every local connection shares (progress workers, copy helpers).
  std::shared_ptr<local::LocalWorkers> local_workers;
  // The kernel that copies batches of small GPU blocks (null: copy engines).
  std::shared_ptr<platform::GatherKernels> gather_kernels;
  // The gather kernel kept resident between batches (null: launched per batch).
  std::shared_ptr<platform::ResidentGather> resident_gather;
  // The TCP staging copy kernel, loaded once per device (null: copy engines only).
  std::shared_ptr<platform::StagingKernels> staging_kernels;
  // Holds transfers ordered after CUDA streams until the streams get there.
  std::shared_ptr<StreamGate> stream_gate;
  // The words CUDA streams wait on for a transfer to finish.
  std::shared_ptr<platform::StreamSignals> stream_signals;
  // Driver objects connections gave back (gpu/gpu_kit.h), freed at the end.
  std::shared_ptr<platform::GpuReserve> gpu_reserve;
  // The TCP transport's workers, which serve every connection's streams.
  std::shared_ptr<tcp::IoPool> tcp_pool;
  // The engine's transfer counters; null with Options::metrics off.
  std::unique_ptr<TransferMetrics> metrics;
};

}  // namespace ferry::core
