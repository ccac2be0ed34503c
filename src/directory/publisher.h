// Publisher: keeps an engine's entry in the directory while the engine lives,
// and tells connections made by name when their peer's name moved on to a
// newer incarnation.
//
// One thread (ferry-directory) does both, with a backend of its own (so a
// lookup that waits on the directory never delays a refresh):
//   * every ttl/3 it refreshes the entry (Redis PEXPIRE, etcd lease
//     keep-alive) if it still holds this engine's value; an entry that is gone
//     (expired while the directory was down, or a directory that lost its
//     data) is published again; one that names a newer incarnation of
//     another engine is verified first (the verifier dials it: engine ids
//     are proven in the handshake): if that engine answers there, it took the
//     name and this one logs it and stops publishing; if not, the entry is a
//     forgery (whoever can write the directory) and this engine publishes
//     its own again.
//     Failures retry with backoff (100 ms doubling to 2 s) and log once.
//   * every min(ttl/3, 500 ms), while connections made by name live, it reads
//     their names' entries; an entry naming another engine with a higher
//     incarnation, once verified the same way, fails the connection to the
//     old one with kPeerLost. A verdict is kept per (engine, incarnation), so
//     a forgery costs one dial, not one a check.
// Every directory call has a deadline (a refresh at most 1 s, a peer check
// 500 ms), so the destructor, which stops the thread and then deletes the
// entry if it is still this engine's (at most 500 ms), returns within about
// 1.5 s even when the directory hangs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "directory/backend.h"
#include "ferry/directory.h"
#include "ferry/status.h"
#include "platform/mutex.h"

namespace ferry::directory {

class Publisher {
 public:
  // OK when the engine `entry` names answers at one of its addresses, by
  // `deadline`, proving its engine id. Called on the publisher's thread.
  using Verifier = std::function<Status(const DirectoryEntry& entry, Deadline deadline)>;

  // Publishes `self` (its incarnation is chosen here: above the one the
  // directory holds for the name, if any) within `first_try` and starts the
  // thread. A directory that cannot be reached now is not an error: the
  // thread keeps trying. kResourceExhausted if the thread cannot start.
  static Result<std::unique_ptr<Publisher>> start(const DirectoryUrl& url, DirectoryEntry self,
                                                  std::chrono::milliseconds ttl, Deadline first_try,
                                                  Verifier verify);
  ~Publisher();

  // This engine's entry as published (or to be). Thread-safe.
  DirectoryEntry self() const;

  // A connection as the publisher sees it, handed over by the engine that
  // owns it (the directory sits beside the transports, not above them): its
  // id, whether it is still up (false once it failed or is gone), and how to
  // fail it (nothing once it is gone). Neither keeps it alive.
  struct WatchedConnection {
    uint64_t id = 0;
    std::function<bool()> up;
    std::function<void(const Status&)> fail;
  };
  // Fails `conn` with kPeerLost once `name` names an engine other than
  // `peer` with a higher incarnation. Thread-safe.
  void watch_peer(const DirectoryEntry& peer, WatchedConnection conn);

 private:
  Publisher(const DirectoryUrl& url, DirectoryEntry self, std::chrono::milliseconds ttl, Verifier verify);
  // Whether `e` (another engine's claim on a name) is real: the verifier's
  // verdict, dialed once per engine and incarnation (cached).
  bool genuine(const DirectoryEntry& e, Deadline deadline);
  void loop() EXCLUDES(mu_);
  // One publishing step; returns when to take the next one.
  Clock::duration publish_step() EXCLUDES(mu_);
  void check_peers() EXCLUDES(mu_);
  Status publish_now(Deadline deadline) EXCLUDES(mu_);

  struct Watched {
    DirectoryEntry peer;
    WatchedConnection conn;
  };

  DirectoryUrl url_;
  std::string key_;
  // The incarnation may rise before the first publish: the thread changes it
  // under mu_ and reads it without; others read it under mu_.
  DirectoryEntry self_;
  std::string value_;
  std::chrono::milliseconds ttl_;
  std::unique_ptr<Backend> backend_;  // only the thread (and start/destructor, when it is not running) use it
  const Verifier verify_;
  // Verdicts of genuine(), by (engine id, incarnation); the thread's (and
  // start's, before it runs). Bounded: the oldest go past kMaxVerdicts.
  std::map<std::pair<uint64_t, uint64_t>, bool> verdicts_;
  static constexpr size_t kMaxVerdicts = 256;

  // Publishing state (the thread's).
  bool published_ = false;
  bool ever_published_ = false;
  bool displaced_ = false;
  bool failing_ = false;
  Clock::duration backoff_{};

  mutable platform::Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<Watched> watched_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ferry::directory
