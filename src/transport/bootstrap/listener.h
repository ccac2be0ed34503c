// TcpListener: accepts peers on the engine's port and runs the acceptor's
// side of the handshake, one short-lived thread per incoming stream, so that a
// peer that sends garbage or stalls mid-handshake delays nobody else.
//
// What a peer can make it hold is bounded: at most Options::max_handshakes
// streams are read at once before their peer has proven itself and been
// admitted, and at most half of them (rounded up) from one address group (a
// /24, a /64: core::address_group), so one attacker's addresses cannot lock
// others out. A stream must deliver its whole HELLO within kHelloWait (or
// handshake_timeout if shorter). A stream past either cap first makes room:
// the oldest handshake still waiting for its HELLO (else, one running past
// kStaleHandshake) is cut off, from its own group when that group holds its
// share, else from the group holding most; it is then parked, a descriptor
// and no thread, for a moment (kHandshakeWait) until a slot frees, then
// closed unread. The accept loop never waits for it, so streams one group
// floods in do not hold up another's. An admitted control stream waits for
// its data streams holding a connection of the engine's Admission instead.
//
// Thread-safe. Threads: ferry-accept (the accept loop), ferry-hs-<n> (one per
// stream being handshaken; each bounded by Options::handshake_timeout).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/engine_context.h"
#include "platform/mutex.h"
#include "platform/socket.h"
#include "transport/connection_core.h"
#include "wire/handshake.h"

namespace ferry::bootstrap {

class TcpListener {
 public:
  // Hands over an admitted connection, with the admission ticket when the
  // connection does not hold its own (the local transport's).
  using OnConnection = std::function<void(std::shared_ptr<transport::ConnectionCore>, std::unique_ptr<core::Admission::Ticket>)>;
  using NextId = std::function<uint64_t()>;

  // Listens on `at` (accepting nothing until run()). kUnavailable if it cannot listen.
  static Result<std::unique_ptr<TcpListener>> bind(std::shared_ptr<core::EngineContext> ctx,
                                                   const platform::HostPort& at, OnConnection on_connection,
                                                   NextId next_id);
  ~TcpListener();

  // Starts accepting peers. kResourceExhausted if its thread cannot start.
  Status run();

  uint16_t port() const { return port_; }
  // Stops accepting, aborts handshakes in progress and joins every thread.
  void stop() EXCLUDES(mu_);

 private:
  struct Pending {
    uint32_t streams = 0;
    std::vector<platform::Socket> data;  // indexed by stream index
    uint32_t attached = 0;
  };
  struct Handshake {
    std::thread thread;
    int fd = -1;
    std::string group;  // the peer address's (core::address_group)
    Clock::time_point since;
    bool done = false;
    bool counted = true;      // counts against max_handshakes: its peer was not admitted yet
    bool hello_seen = false;  // its whole HELLO arrived
    bool cut_off = false;     // shut down to make room (make_room_locked)
  };
  // A stream accepted past a cap, waiting for a handshake to end.
  struct Parked {
    platform::Socket stream;
    std::string group;
    Clock::time_point since;
  };

  TcpListener(std::shared_ptr<core::EngineContext> ctx, platform::Socket listen, platform::Socket wake, uint16_t port,
              OnConnection on_connection, NextId next_id);
  void accept_loop() EXCLUDES(mu_);
  // A new stream: handshaken now if both caps allow it, else parked, else
  // (too many parked) closed unread.
  void place_locked(platform::Socket s) REQUIRES(mu_);
  // Starts the parked streams the caps now allow (oldest first) and closes
  // those parked for kHandshakeWait.
  void start_parked_locked() REQUIRES(mu_);
  bool fits_locked(const std::string& group) const REQUIRES(mu_);
  // Cuts off the handshake that must give way to a new stream of `group`
  // (the listener's comment says which); false if none may.
  bool make_room_locked(const std::string& group) REQUIRES(mu_);
  void start_handshake_locked(platform::Socket s, std::string group) REQUIRES(mu_);
  // Logs (at most once a second) that a stream of `group` was closed unread.
  void closed_unread_locked(const std::string& group) REQUIRES(mu_);
  // Records that handshake `id` has its whole HELLO.
  void hello_seen(uint64_t handshake_id) EXCLUDES(mu_);
  // Wakes the accept loop from its poll.
  void wake();
  void serve(uint64_t handshake_id, platform::Socket s) EXCLUDES(mu_);
  // `version`: the protocol version chosen from the connector's offer.
  Status serve_control(uint64_t handshake_id, platform::Socket& s, const wire::Hello& hello, uint16_t version,
                       Deadline deadline) EXCLUDES(mu_);
  Status attach_data(platform::Socket& s, const wire::Hello& hello) EXCLUDES(mu_);
  void reap_locked() REQUIRES(mu_);
  // The handshake no longer counts against max_handshakes.
  void uncount(uint64_t handshake_id) EXCLUDES(mu_);
  void uncount_locked(Handshake& h) REQUIRES(mu_);

  const std::shared_ptr<core::EngineContext> ctx_;
  platform::Socket listen_;  // non-blocking
  platform::Socket wake_;    // an eventfd the accept loop polls besides listen_
  const uint16_t port_;
  const OnConnection on_connection_;
  const NextId next_id_;
  std::thread accept_thread_;

  platform::Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  uint64_t next_handshake_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Handshake> handshakes_ GUARDED_BY(mu_);
  int counted_ GUARDED_BY(mu_) = 0;                                       // handshakes with `counted`
  std::map<std::string, int> counted_by_group_ GUARDED_BY(mu_);           // the same, per address group
  std::deque<Parked> parked_ GUARDED_BY(mu_);                             // oldest first
  Clock::time_point busy_logged_ GUARDED_BY(mu_){};                       // last warning of a stream closed unread
  std::map<uint64_t, std::shared_ptr<Pending>> pending_ GUARDED_BY(mu_);  // by cookie
};

}  // namespace ferry::bootstrap
