// A lane: one connection on which both ends run the same operation plan
// (plan.h) and check every byte they receive, read or are written.
//
// Both roles use this code: the peer opens the lane and sends its header,
// the survivor answers. After any failed operation the lane closes its
// connection (its plan is out of step) and the peer opens a new one.
//
// A Lane runs on one thread; the fault that deregisters regions in use
// (Roster::strike) may run on another.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ferry/ferry.h"
#include "platform/mutex.h"
#include "soak/memory.h"
#include "soak/plan.h"
#include "soak/report_line.h"
#include "soak/watchdog.h"

namespace ferry::soak {

// Debug faults that prove the soak can fail (each fires once a process).
struct DebugFaults {
  std::atomic<bool> corrupt_one{false};  // flip a received byte before it is checked
  std::atomic<bool> hang_one{false};     // one call sleeps past its deadline and margin
};

// The regions a lane has registered, for the dereg fault.
struct LaneRegions {
  platform::Mutex mu;
  Region local, inbox;
  bool local_live = false, inbox_live = false;
  // What the operation running now touches (set by the lane thread, under
  // mu, so a strike that holds mu sees one operation's state whole).
  std::atomic<bool> local_in_use{false}, inbox_in_use{false};
  std::atomic<bool> struck{false};
  std::string op GUARDED_BY(mu);
  // The local buffer only receives in the operation running now (a receive,
  // or a read this end initiated): nothing of this end reads it.
  std::atomic<bool> local_receives_only{false};
  // After a dereg of a region that only receives, the soak fills it with a
  // canary; when the lane is over, a byte that differs landed after dereg
  // returned, which the API rules out.
  SoakMemory* local_mem = nullptr;
  SoakMemory* inbox_mem = nullptr;
  bool local_canary GUARDED_BY(mu) = false;
  bool inbox_canary GUARDED_BY(mu) = false;
  static constexpr uint64_t kCanarySeed = 0xca9a41;
};

// Every lane of the process; the dereg fault picks one that is busy.
class Roster {
 public:
  void add(LaneRegions* r);
  void remove(LaneRegions* r);
  // Deregisters one region that an operation is using now, `pause` after
  // choosing it (selfcheck: the operation ends meanwhile). Returns what it
  // did, or an empty string when no lane was busy.
  std::string strike(Engine& engine, Watchdog& watchdog, std::mt19937_64& rng,
                     std::chrono::milliseconds pause = std::chrono::milliseconds(0));

 private:
  platform::Mutex mu_;
  std::vector<LaneRegions*> lanes_ GUARDED_BY(mu_);
};

// What a process shares among its lanes.
struct EndContext {
  Engine* engine = nullptr;
  Counters* counters = nullptr;
  Watchdog* watchdog = nullptr;
  Roster* roster = nullptr;
  DebugFaults* debug = nullptr;
  const std::atomic<bool>* stopping = nullptr;
  const std::atomic<bool>* ending = nullptr;  // the supervisor said ENDING: the other ends are leaving
  bool is_survivor = false;
  SoakMemory* source = nullptr;  // filled from source_seed, exported as source_desc
  uint64_t source_seed = 0;
  RemoteDescriptor source_desc;
};

// One end's buffers for one lane (each buffer_bytes(max) long) and a small
// registered host buffer for headers and acknowledgements.
struct LaneMemory {
  SoakMemory* local = nullptr;
  SoakMemory* inbox = nullptr;
  uint8_t* ctl = nullptr;  // registered by the caller
  size_t ctl_size = 0;
};

inline constexpr size_t kCtlBytes = 4096;

// The peer's side: registers `mem`, sends the lane header (seed, largest
// operation, descriptors), reads the survivor's and runs up to `max_ops`
// operations (0: until stopping or a failure). Returns the operations done.
uint64_t run_lane_as_peer(const EndContext& ctx, Connection& conn, LaneMemory mem, uint64_t lane_seed,
                          uint64_t max_op_bytes, uint64_t max_ops);

// The survivor's side, once `header` (the peer's first message, starting
// with "SOAK1 lane") has arrived.
uint64_t run_lane_as_survivor(const EndContext& ctx, Connection& conn, LaneMemory mem, const std::string& header,
                              uint64_t max_op_bytes);

// Hex for descriptors in headers.
std::string to_hex(const std::string& bytes);
bool from_hex(const std::string& hex, std::string* out);

// The deadline an operation of `bytes` gets: 20 s plus 4 MB/s.
Clock::duration op_budget(uint64_t bytes);

}  // namespace ferry::soak
