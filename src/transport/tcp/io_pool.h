// IoPool: the TCP transport's engine-wide data plane — a fixed set of
// worker threads per NIC and direction that serve every connection's
// streams (platform/fiber_worker.h), so that an engine's threads grow with
// its NICs and cores, never with its peers.
//
// Workers: for each NIC the engine names (and one group for streams on no
// named NIC), `ferry-rx-<nic>-<i>` read the control and data streams and
// `ferry-tx-<nic>-<i>` write them, each pinned to the NIC's receive or
// transmit CPUs (FERRY_RX_BINDINGS / FERRY_TX_BINDINGS, or NUMA-local ones)
// and logging expected and actual CPU sets as they start. A group has
// workers_per_group() of them. Every worker starts with the engine: one the
// kernel refuses fails the engine's creation, never the process, and never a
// connection later.
//
// A stream is placed on the least loaded worker of its NIC's group and stays
// there for its life (its fiber's stack holds its place in a frame).
//
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/engine_context.h"
#include "ferry/status.h"
#include "platform/fiber_worker.h"

namespace ferry::tcp {

class IoPool {
 public:
  enum class Role { kRx, kTx };
  // Workers a group has in each direction: Options::workers when set; else
  // one for each stream a connection opens by default (auto_streams of the
  // usable CPUs), at most as many as the CPUs bound to the NIC (or usable,
  // for the default group). A stream's worker copies its bytes, and GPU
  // memory's staging too, so fewer workers than streams cap the rate: on the
  // two-H200 host (32 CPUs, 16 streams) GPU memory over loopback moved 17
  // GB/s with 4 workers, 31 with 8 and 40-44 with 16.
  static size_t workers_per_group(const Options& o, size_t bound_cpus, int usable_cpus);

  // Starts every worker for the engine of `ctx` (its NICs and bindings).
  // kResourceExhausted naming the thread when one cannot start.
  static Result<std::shared_ptr<IoPool>> start(const core::EngineContext& ctx);
  // Stops and joins every worker (each connection ended its fibers first).
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  // The worker a new stream on `nic` ("" or a NIC not named: the default
  // group) is served by.
  platform::FiberWorker& pick(Role role, const std::string& nic);
  // Worker threads in all.
  size_t size() const;

 private:
  IoPool() = default;
  struct Group {
    std::string nic;  // "" for the default group
    std::vector<std::shared_ptr<platform::FiberWorker>> rx, tx;
  };
  std::vector<Group> groups_;  // written before the pool is shared
};

// The pool of the engine of `ctx` (started with the engine); kInternal when
// the context has none.
Result<IoPool*> io_pool(core::EngineContext& ctx);

}  // namespace ferry::tcp
