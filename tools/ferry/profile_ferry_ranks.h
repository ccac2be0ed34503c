// The ferry backend's ranks find each other and keep in step: each rank of a
// process-per-GPU `ferry profile` run owns an Engine, holds a Connection to
// every other rank, and meets them at barriers made of notifications. Kept
// apart from the backend (profile_ferry.cu) because none of it needs CUDA.
//
// Rendezvous: the `ferry profile` parent creates an empty directory and hands
// it to every rank. Rank r writes rank_r.engine there (its engine id, a
// newline, then its Engine::metadata() blob; written to a temporary name and
// renamed, so a reader never sees half a file). Rank r connects to every
// lower rank once that rank's file appears and introduces itself with a first
// notification, "rank r"; it accepts every higher rank and checks that the
// engine that connected is the one named in that rank's file. Connecting
// never waits for the other side to call accept (the engine answers the
// handshake in the background), so no order of arrival deadlocks.
//
// Barrier: every rank notifies every other "barrier N" and waits for the same
// word from each. All ranks leave within about one notification's latency of
// the last arrival. Notifications have their own queue, apart from messages,
// so barriers never match a send or receive of the data being timed. A
// barrier's own notifications are confirmed at the next barrier, so that a
// barrier costs one message each way, not a round trip.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ferry/engine.h"
#include "ferry/status.h"

namespace ferry::cli::profile {

// The file rank `rank` publishes in the rendezvous directory.
std::string rendezvous_file(const std::string& dir, int rank);
// A rendezvous file's content, and back. parse_rendezvous returns
// kInvalidArgument for anything else.
struct RendezvousEntry {
  uint64_t engine_id = 0;
  std::string metadata;  // Engine::metadata(): what Engine::connect needs
};
std::string format_rendezvous(const RendezvousEntry& e);
Result<RendezvousEntry> parse_rendezvous(const std::string& text);

// Thread-compatible: one thread (the backend's) uses it.
class RankConnections {
 public:
  // Creates an engine with `options`, publishes it in `dir` as rank `rank`
  // of `world`, and connects to every other rank. Blocks until connected to
  // all or `deadline` (kDeadlineExceeded naming the rank that never came).
  // kInvalidArgument for a rank outside [0, world); the engine's and the
  // connections' errors with the peer's rank added.
  static Result<std::unique_ptr<RankConnections>> create(const std::string& dir, int rank, int world, Options options,
                                                         Deadline deadline);

  // Closes every connection, then the engine.
  ~RankConnections();
  RankConnections(const RankConnections&) = delete;
  RankConnections& operator=(const RankConnections&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  Engine& engine() { return *engine_; }
  // The connection to rank `peer`. REQUIRES: peer != rank(), 0 <= peer < world().
  Connection& to(int peer) { return *peers_.at(peer); }

  // Returns when every rank has called barrier() as many times as this one.
  // Blocks. kDeadlineExceeded names the first rank missing; kDataLoss when a
  // rank sent another barrier's word (the ranks run different plans); a
  // connection's error (kPeerLost, ...) with the rank added.
  Status barrier(Deadline deadline);

 private:
  RankConnections(int rank, int world, std::unique_ptr<Engine> engine);
  Status connect_lower(const std::string& dir, Deadline deadline);
  Status accept_higher(const std::string& dir, Deadline deadline);

  int rank_;
  int world_;
  uint64_t barriers_ = 0;  // barriers passed
  std::unique_ptr<Engine> engine_;
  std::vector<std::shared_ptr<Connection>> peers_;  // by rank; null at rank_
  std::vector<Transfer> unconfirmed_;               // by rank: the last barrier's notifications
};

}  // namespace ferry::cli::profile
