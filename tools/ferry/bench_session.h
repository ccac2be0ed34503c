// One benchmark session between an initiator and a target over a ferry
// connection: the configuration exchange, the per-size workload, timing and
// end-to-end verification. `ferry bench` (bench.cc) drives it for single runs
// and sweeps.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/ferry.h"
#include "platform/mutex.h"

namespace ferry::cli {

// Host memory that benchmark buffers may take at once: a target's sessions
// share one, so that no initiator (honest or not) can make the target
// allocate more than the host can give. Thread-safe.
class MemoryBudget {
 public:
  // `limit` bytes in all; 0 picks half of the memory available now
  // (MemAvailable), or half of physical memory where that is unknown.
  explicit MemoryBudget(uint64_t limit = 0);
  uint64_t limit() const { return limit_; }

  // Takes `bytes` for `what` ("the session's buffers"): kResourceExhausted,
  // naming the limit and what is in use, when they do not fit. Never blocks.
  Status reserve(uint64_t bytes, std::string_view what);
  // Gives back bytes taken by reserve.
  void release(uint64_t bytes);

 private:
  uint64_t limit_;
  platform::Mutex mu_;
  uint64_t used_ GUARDED_BY(mu_) = 0;
};

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
  // A KV cache's write (bench_blocks.h): each operation writes `blocks`
  // blocks of `block_bytes` as one vector write, scattered (`scatter`) or
  // adjacent; the size is their sum, each pool twice that. 0: plain ops.
  uint64_t blocks = 0;
  uint64_t block_bytes = 0;
  bool scatter = false;
  // Called by the initiator just before and just after each size's timed
  // phase, so that concurrent sessions time the same interval (a barrier).
  std::function<void()> sync;
  // Initiator: where its buffers' host memory is counted (null: a budget of
  // its own with the default limit). Not sent to the target.
  std::shared_ptr<MemoryBudget> budget;
  // Initiator: once set (Ctrl-C), no further size starts; the sizes measured
  // so far are returned. Not sent to the target.
  const std::atomic<bool>* stop = nullptr;
  // Initiator: the target's CPU time so far, in nanoseconds (null: not
  // known, a remote target). Sampled with this process's own around each
  // size's timed phase. Not sent to the target.
  std::function<uint64_t()> peer_cpu_ns;
  // Initiator: no progress line per size on stderr (`--peers` runs many
  // sessions and prints their summary). Not sent to the target.
  bool quiet = false;
};

// Limits on what one session may ask for; a target refuses more.
inline constexpr int kMaxIters = 1'000'000'000;  // iters and warmup each, so that their sum fits an int
inline constexpr int kMaxInflight = 64;
inline constexpr int kMaxGroup = 1026;  // sessions of one run: 1,024 peers and --peers' two probes
inline constexpr int kMaxGpu = 1023;

// Whether `cfg` is a session a target can serve (sizes, counts, op, GPU
// ordinals); kInvalidArgument says which field is wrong and why. Memory is
// checked apart, against a MemoryBudget (host_bytes).
Status validate(const RunConfig& cfg);

// The configuration an initiator sent (JSON), checked field by field for
// type and range; kInvalidArgument names the first bad field. Never throws.
Result<RunConfig> parse_config(std::string_view text);

// Host memory the buffers of `cfg` take on the side whose GPU is `gpu` (-1:
// host memory), saturating at UINT64_MAX.
uint64_t host_bytes(const RunConfig& cfg, int gpu);

struct SizeResult {
  uint64_t bytes;
  int iters;
  double bytes_per_s;
  double p50_us, p99_us;
  std::string verified;          // "ok", "FAILED", or "" when not checked
  Clock::time_point start, end;  // the timed phase
  // --blocks: the anchor measured in the same session just before, one
  // contiguous write of the same bytes (0 otherwise).
  double contiguous_bytes_per_s = 0;
  double contiguous_p50_us = 0;
  // CPU time per operation over the timed phase, every thread of the
  // process: this one's (the initiator's), and the target's when
  // RunConfig::peer_cpu_ns knows it (else -1). A pingpong's operation is a
  // round trip.
  double cpu_us_per_op = 0;
  double peer_cpu_us_per_op = -1;
};

// Target side: serves one initiator's session on `conn` and returns its
// configuration. Blocks until the session ends. Everything the initiator
// sends is checked: a configuration that fails validate(), or buffers that
// do not fit `budget`, is answered with "error: <status>" and refused. A
// session that does not start in time (its configuration within 5 s of this
// call, its first "begin" within 5 s plus 2 s per GiB of its buffers after
// the target's descriptors) fails with kDeadlineExceeded, "the session did
// not start within N s". Any failure (refused, not started, peer gone,
// protocol broken, a timeout of 120 s on one step) returns its status; the
// caller closes `conn`. Never exits.
Result<RunConfig> serve_session(Engine& engine, std::shared_ptr<Connection> conn, MemoryBudget& budget);

// Initiator side: runs `cfg` against the target on `conn`, printing progress
// on stderr. Exits the process with a message on any error, the target's
// refusal included.
std::vector<SizeResult> run_initiator(Engine& engine, Connection& conn, const RunConfig& cfg);

// `text` with control characters and bytes past ASCII written as \xNN, for a
// log line that may quote what a peer sent.
std::string printable(std::string_view text);

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
