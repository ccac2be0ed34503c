// ProgressPool: the threads that serve every local connection of an engine
// (read its channel, run its handlers, complete its GPU copies, retry its
// outbox), a fixed few per engine (docs/architecture.md, "Threads": threads grow with cores,
// never with peers). It used to be one progress thread per connection.
//
// A worker sleeps in epoll_wait on the control streams of the connections
// it serves and on its own eventfd. A connection is "hot" while it has work
// (copies in flight, traffic within a spin window, operations waiting on the
// peer): the worker then polls it on every turn without sleeping, because a
// futex or eventfd wake-up costs tens of microseconds on a virtual machine
// and a local copy a few; the windows bound the spinning (Client::turn says
// how long). A cold connection costs nothing: the worker "arms" its channel
// (ShmChannel::arm), and the peer, finding it armed after posting, writes a
// byte on the control stream, which wakes the worker. Threads of this
// process ask for a turn with kick() (a message left in the outbox, a copy
// queued).
//
// Fairness: connections take turns, and a turn is bounded (Client::turn
// reads a few dozen messages at most and hands large copies to the copy
// helpers), so one busy connection delays another's message by a turn, not
// by its whole backlog.
//
// Lifetime: a connection takes itself out with remove() (its close(), which
// its destructor runs first), which waits for a turn under way; the workers
// hold no owner of it, so a connection and its engine are destroyed where
// the application lets go of them, never on a worker. Workers start with the
// first connection; a
// refusal by the kernel fails that connection (kResourceExhausted), never
// the process, and the next connection asks again.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/status.h"
#include "platform/cpu_binding.h"
#include "platform/mutex.h"

namespace ferry::local {

class ProgressPool {
 public:
  // What a worker asks of a connection it serves (LocalTransport). All three
  // run on the worker, one at a time per connection.
  class Client {
   public:
    struct Turn {
      bool did = false;               // it handled something
      bool hot = false;               // poll again on the next turn, without sleeping
      bool waiting_for_room = false;  // messages wait for room in the peer's ring
    };
    virtual ~Client() = default;
    // One bounded turn of work. `woken`: the control stream was readable
    // (the peer rang); `hung_up`: it ended (reported once).
    virtual Turn turn(bool woken, bool hung_up) = 0;
    // Before the worker stops polling the connection: asks the peer to ring
    // after its next message. False if a message came meanwhile (the worker
    // then keeps polling).
    virtual bool arm() = 0;
    virtual void disarm() = 0;
  };
  class Entry;  // a connection's place in the pool

  // Workers per engine by default: one. A turn is microseconds, and the
  // work that takes longer (large host copies) goes to the copy helpers.
  static size_t default_size() { return 1; }
  // How long a worker with connections waiting for room in a peer's ring
  // sleeps before it retries them: a message that waited that long waits
  // at most this much more (the peer wakes nobody when it makes room).
  static constexpr int kOutboxRetryMs = 1;

  // Workers "<name>-<i>", pinned to `cpus` (empty: the constructing
  // thread's CPUs), logging about `engine_id`.
  ProgressPool(size_t workers, std::string name, platform::CpuList cpus, uint64_t engine_id);
  // Ends and joins the workers (one running this destructor itself ends on
  // its own). REQUIRES: every entry removed.
  ~ProgressPool();
  ProgressPool(const ProgressPool&) = delete;
  ProgressPool& operator=(const ProgressPool&) = delete;

  // Serves `client` from now on; `fd` (the connection's control stream) is
  // watched for the peer's rings and hang-up. `entry` is set before any
  // worker can run a turn of `client` (which may use it to kick), and reset
  // on failure. REQUIRES: remove() before `client` or `fd` goes.
  // kResourceExhausted if no worker thread can start or `fd` cannot be
  // watched. Starts workers that do not run yet. Blocks for thread starts
  // only.
  Status add(Client* client, int fd, std::shared_ptr<Entry>& entry);
  // Asks for a turn of `entry` soon. Any thread; a lock and, when the
  // worker sleeps, a write to its eventfd.
  void kick(Entry& entry);
  // The workers serve `entry` no more and no longer watch its descriptor.
  // Waits for a turn under way, except when called from inside that very
  // turn: false then (the turn goes on after this returns). Idempotent.
  bool remove(Entry& entry);
  // Whether the calling thread is a worker (of any engine).
  static bool on_worker();
  // Whether the calling thread is the worker that serves `entry`, outside
  // its turn (inside another connection's, say): no turn of it can run
  // meanwhile, so this thread may read its channel.
  static bool serves_here(const Entry& entry);

  size_t size() const { return size_; }

 private:
  struct Worker;
  static void worker_loop(const std::shared_ptr<Worker>& w, size_t index);

  const size_t size_;
  const std::string name_;
  const platform::CpuList cpus_;
  const uint64_t engine_id_;
  platform::Mutex mu_;
  std::vector<std::shared_ptr<Worker>> workers_ GUARDED_BY(mu_);  // started ones
  size_t next_ GUARDED_BY(mu_) = 0;                                // where the next entry goes
};

}  // namespace ferry::local
