// Engine::Impl: the engine's state, shared by the files that implement
// ferry::Engine (engine.cc: creation, memory, notifications, the accept
// queue and the heartbeat thread; engine_dial.cc: the directory and
// connecting to peers). Private to src/engine/.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/engine_context.h"
#include "directory/publisher.h"
#include "engine/metrics_http.h"
#include "ferry/engine.h"
#include "platform/mutex.h"
#include "platform/thread.h"
#include "transport/bootstrap/listener.h"
#include "transport/connection_core.h"

namespace ferry {

struct Engine::Impl {
  std::shared_ptr<core::EngineContext> ctx;
  std::unique_ptr<bootstrap::TcpListener> listener;
  std::string address;

  platform::Mutex mu;
  std::condition_variable accept_cv;
  std::condition_variable heartbeat_cv;
  // Bounded by max_connections: each holds an admission ticket while it lives.
  std::deque<std::shared_ptr<transport::ConnectionCore>> accepted GUARDED_BY(mu);
  std::vector<std::shared_ptr<transport::ConnectionCore>> connections GUARDED_BY(mu);
  // Tickets of the connections that do not hold their own (the local
  // transport's), given back when the engine lets the connection go.
  std::map<const transport::ConnectionCore*, std::unique_ptr<core::Admission::Ticket>> tickets GUARDED_BY(mu);
  uint64_t next_connection_id GUARDED_BY(mu) = 1;
  bool stopping GUARDED_BY(mu) = false;
  size_t next_note_from GUARDED_BY(mu) = 0;  // where the engine-wide stream looks first
  std::thread heartbeat;
  // With Options::directory: the client for lookups, and the thread that
  // keeps this engine's entry alive (deleted first on shutdown).
  std::unique_ptr<Directory> directory;
  std::unique_ptr<directory::Publisher> publisher;
  // With Options::metrics_listen: the scrape endpoint (stopped first).
  std::unique_ptr<MetricsHttp> metrics_http;

  MetricsSnapshot metrics() EXCLUDES(mu);

  uint64_t next_id() EXCLUDES(mu) {
    platform::MutexLock lock(mu);
    return next_connection_id++;
  }

  // Lists `c` (and keeps `ticket` while it is listed). False, with `c`
  // closed, once the engine is stopping.
  bool adopt(const std::shared_ptr<transport::ConnectionCore>& c, std::unique_ptr<core::Admission::Ticket> ticket)
      EXCLUDES(mu) {
    {
      platform::MutexLock lock(mu);
      if (!stopping) {
        connections.push_back(c);
        if (ticket) tickets[c.get()] = std::move(ticket);
        return true;
      }
    }
    c->close();
    return false;
  }

  // Connections that failed before the application accepted them leave the
  // queue, and what they received with them: none can carry a transfer.
  // The heartbeat then closes them, as nobody holds them any more.
  void prune_accepted_locked() REQUIRES(mu) {
    std::erase_if(accepted, [](const std::shared_ptr<transport::ConnectionCore>& c) { return !c->health().ok(); });
  }

  void heartbeat_loop() EXCLUDES(mu) {
    const Options& o = ctx->options;
    // Ticks often enough to notice silence within a tenth of peer_timeout.
    auto period = std::min(o.heartbeat_interval / 2, o.peer_timeout / 10);
    if (period < std::chrono::milliseconds(5)) period = std::chrono::milliseconds(5);
    platform::UniqueLock lock(mu);
    while (!stopping) {
      heartbeat_cv.wait_for(lock.native(), period);
      if (stopping) break;
      std::vector<std::shared_ptr<transport::ConnectionCore>> live = connections;
      lock.unlock();
      auto now = Clock::now();
      for (auto& c : live) c->tick(now);
      live.clear();
      lock.lock();
      prune_accepted_locked();
      // A connection nobody else holds any more is closed on a thread of its
      // own, never on one of its workers nor here: an orderly close may wait
      // up to peer_timeout for an unresponsive peer, and the other
      // connections' heartbeats must go on meanwhile. It stays listed until
      // its close() has returned: a dereg meanwhile must still reach it.
      std::erase_if(closers, [](Closer& k) {
        if (!k.done->load()) return false;
        k.thread.join();
        return true;
      });
      for (auto& c : connections) {
        // A failed connection that holds its admission here (the local
        // transport's) is closed too, even while the application holds it:
        // its thread, control stream and admission go back at once, as a
        // failed TCP connection's do; what it received stays readable.
        const bool failed_holding = !c->health().ok() && tickets.count(c.get()) > 0;
        if ((c.use_count() != 1 && !failed_holding) || closing.count(c.get()) > 0) continue;
        auto done = std::make_shared<std::atomic<bool>>(false);
        auto t = platform::try_start_thread("ferry-close", [this, c, done] { close_dropped(c, *done); });
        if (!t.ok()) break;  // out of threads: the next tick tries again
        closing.insert(c.get());
        closers.push_back(Closer{std::move(t).value(), done});
      }
    }
  }

  // A closer thread's work: close, then unlist.
  void close_dropped(const std::shared_ptr<transport::ConnectionCore>& conn, std::atomic<bool>& done) EXCLUDES(mu) {
    conn->close();
    platform::MutexLock lock(mu);
    closing.erase(conn.get());
    // The destructor may have taken the list meanwhile.
    auto it = std::find(connections.begin(), connections.end(), conn);
    if (it != connections.end()) connections.erase(it);
    tickets.erase(conn.get());
    done.store(true);
  }

  struct Closer {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Closer> closers GUARDED_BY(mu);                         // joined by the heartbeat or the destructor
  std::set<const transport::ConnectionCore*> closing GUARDED_BY(mu);  // a closer runs for these
};

namespace engine_detail {

// Opens the directory client and publishes this engine (Options::directory),
// naming it "<hostname>-<pid>" when Options::name is empty.
Status start_directory(Engine::Impl& impl);

}  // namespace engine_detail
}  // namespace ferry
