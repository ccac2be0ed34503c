// One benchmark session between an initiator and a target over a ferry
// connection: the configuration exchange, the per-size workload, timing and
// end-to-end verification. `ferry bench` (bench.cc) drives it for single runs
// and sweeps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ferry/ferry.h"

namespace ferry::cli {

struct RunConfig {
  std::string op;  // send, write, read, pingpong
  std::vector<uint64_t> sizes;
  int iters = 0;
  int warmup = 0;
  // Operations posted before the oldest is awaited: 1 waits for each before
  // posting the next; more keeps that many in flight, as a timing loop that
  // enqueues its iterations on a stream (nccl-tests') does.
  int inflight = 1;
  bool bidir = false;
  bool verify = false;
  // GPU memory: this side's GPU (initiator) and the target's, -1 for host memory.
  int gpu = -1;
  int peer_gpu = -1;
  // Sessions run at once (`ferry bench --gpus`): the target serves this many.
  int group = 1;
  // 0: every operation of a size uses the start of each side's buffers.
  // Otherwise each side's source and destination span at least this many
  // bytes and operation i uses the i-th size-long slot of them (wrapping),
  // so that consecutive operations touch different memory: buffers that stay
  // in the CPU's caches from one operation to the next measure the caches.
  uint64_t footprint = 0;
  // Called by the initiator just before and just after each size's timed
  // phase, so that concurrent sessions time the same interval (a barrier).
  std::function<void()> sync;
};

struct SizeResult {
  uint64_t bytes;
  int iters;
  double bytes_per_s;
  double p50_us, p99_us;
  std::string verified;          // "ok", "FAILED", or "" when not checked
  Clock::time_point start, end;  // the timed phase
};

// Target side: serves one initiator's session on `conn` and returns its
// configuration. Exits the process with a message on any error.
RunConfig serve_session(Engine& engine, std::shared_ptr<Connection> conn);

// Initiator side: runs `cfg` against the target on `conn`, printing progress
// on stderr. Exits the process with a message on any error.
std::vector<SizeResult> run_initiator(Engine& engine, Connection& conn, const RunConfig& cfg);

// Prints "ferry bench: WHAT: STATUS" and exits 1.
[[noreturn]] void die(const std::string& what, const Status& s);

// The value, or die(what, error).
template <typename T>
T must(Result<T> r, const std::string& what) {
  if (!r.ok()) die(what, r.status());
  return std::move(r).value();
}
inline void must(const Status& s, const std::string& what) {
  if (!s.ok()) die(what, s);
}

}  // namespace ferry::cli
