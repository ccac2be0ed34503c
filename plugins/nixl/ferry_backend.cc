// The FERRY NIXL backend (ferry_backend.h).
#include "ferry_backend.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "agent_note.h"
#include "platform/mutex.h"
#include "wire/metadata.h"

namespace ferry::nixl {
namespace {

// NIXL's status for a ferry failure. A lost peer is NIXL's "remote
// disconnect", on which the agent drops the peer's metadata.
nixl_status_t to_nixl(const Status& s) {
  switch (s.code()) {
    case Code::kOk:
      return NIXL_SUCCESS;
    case Code::kPeerLost:
    case Code::kUnavailable:
      return NIXL_ERR_REMOTE_DISCONNECT;
    case Code::kCancelled:
      return NIXL_ERR_CANCELED;
    case Code::kInvalidArgument:
    case Code::kOutOfRange:
      return NIXL_ERR_INVALID_PARAM;
    case Code::kNotFound:
    case Code::kPermissionDenied:
      return NIXL_ERR_NOT_FOUND;
    default:
      return NIXL_ERR_BACKEND;
  }
}

// Descriptors of these memory kinds are all this backend takes.
bool supported(nixl_mem_t mem) { return mem == DRAM_SEG || mem == VRAM_SEG; }

// Bytes a peer's connection info may have; ferry's metadata blob is well
// under a kilobyte.
constexpr size_t kMaxConnInfo = 64 * 1024;

}  // namespace

// Everything the backend shares between NIXL's threads.
struct nixlFerryEngine::State {
  struct Peer {
    std::string conn_info;
    uint64_t engine_id = 0;  // the engine conn_info names
    std::shared_ptr<Connection> connection;
  };
  // Bytes per microsecond toward one agent, smoothed over transfers.
  struct Rate {
    double bytes_per_us = 0;
    double overhead_us = 0;
    uint64_t samples = 0;
  };

  platform::Mutex mu;
  std::map<std::string, Peer> peers GUARDED_BY(mu);
  // Connections peers opened to this engine: their notifications.
  std::vector<std::shared_ptr<Connection>> inbound GUARDED_BY(mu);
  std::set<const LocalMemory*> local GUARDED_BY(mu);
  std::set<const RemoteMemory*> remote GUARDED_BY(mu);
  std::unordered_map<std::string, Rate> rates GUARDED_BY(mu);
  // The engine that speaks for each agent whose connection info is not
  // loaded (takes_note).
  std::unordered_map<std::string, uint64_t> senders GUARDED_BY(mu);
  std::atomic<uint64_t> dropped_notes{0};
};

nixlFerryEngine::nixlFerryEngine(const nixlBackendInitParams* init_params)
    : nixlBackendEngine(init_params), state_(std::make_unique<State>()) {
  auto settings = settings_from_params(getCustomParams());
  if (!settings.ok()) {
    NIXL_ERROR << settings.status().message();
    initErr = true;
    return;
  }
  settings_ = *settings;
  auto engine = Engine::create(settings_.options);
  if (!engine.ok()) {
    NIXL_ERROR << "FERRY backend: cannot start a ferry engine: " << engine.status().to_string();
    initErr = true;
    return;
  }
  engine_ = std::move(engine).value();
  {
    // The agent is its own peer (supportsLocal): notes naming it are taken
    // from this engine only, as for any agent whose metadata is loaded.
    platform::MutexLock lock(state_->mu);
    State::Peer& self = state_->peers[localAgent];
    self.conn_info = engine_->metadata();
    self.engine_id = engine_->id();
  }
  NIXL_INFO << "FERRY backend of agent '" << localAgent << "' listening at " << engine_->address();
}

nixlFerryEngine::~nixlFerryEngine() {
  std::vector<std::shared_ptr<Connection>> connections;
  {
    platform::MutexLock lock(state_->mu);
    for (auto& [agent, peer] : state_->peers) {
      if (peer.connection) connections.push_back(peer.connection);
    }
    connections.insert(connections.end(), state_->inbound.begin(), state_->inbound.end());
    state_->peers.clear();
    state_->inbound.clear();
    for (const RemoteMemory* m : state_->remote) delete m;
    state_->remote.clear();
    // NIXL deregisters what it registered before it destroys a backend;
    // whatever is left goes with the engine.
    for (const LocalMemory* m : state_->local) delete m;
    state_->local.clear();
  }
  for (auto& c : connections) c->close();
  engine_.reset();
}

// ---- memory ------------------------------------------------------------------

nixl_status_t nixlFerryEngine::registerMem(const nixlBlobDesc& mem, const nixl_mem_t& nixl_mem, nixlBackendMD*& out) {
  if (!supported(nixl_mem)) {
    NIXL_ERROR << "FERRY backend: registerMem of memory type " << static_cast<int>(nixl_mem)
               << "; FERRY moves DRAM and VRAM";
    return NIXL_ERR_NOT_SUPPORTED;
  }
  auto region = engine_->reg(reinterpret_cast<void*>(mem.addr), mem.len);
  if (!region.ok()) {
    NIXL_ERROR << "FERRY backend: registerMem: " << region.status().to_string();
    return to_nixl(region.status());
  }
  if (nixl_mem == VRAM_SEG && region->kind != MemoryKind::kCuda) {
    (void)engine_->dereg(*region);
    NIXL_ERROR << "FERRY backend: registerMem: VRAM descriptor at " << mem.addr << " is "
               << memory_kind_name(region->kind) << " memory";
    return NIXL_ERR_INVALID_PARAM;
  }
  auto exported = engine_->export_region(*region);
  if (!exported.ok()) {
    (void)engine_->dereg(*region);
    NIXL_ERROR << "FERRY backend: registerMem: " << exported.status().to_string();
    return to_nixl(exported.status());
  }
  auto memory = std::make_unique<LocalMemory>(*region, *exported);
  platform::MutexLock lock(state_->mu);
  state_->local.insert(memory.get());
  out = memory.release();
  return NIXL_SUCCESS;
}

nixl_status_t nixlFerryEngine::deregisterMem(nixlBackendMD* meta) {
  auto* memory = static_cast<LocalMemory*>(meta);
  {
    platform::MutexLock lock(state_->mu);
    if (state_->local.erase(memory) == 0) {
      NIXL_ERROR << "FERRY backend: deregisterMem of metadata it did not register";
      return NIXL_ERR_INVALID_PARAM;
    }
  }
  Status s = engine_->dereg(memory->region);
  delete memory;
  if (!s.ok()) {
    NIXL_ERROR << "FERRY backend: deregisterMem: " << s.to_string();
    return to_nixl(s);
  }
  return NIXL_SUCCESS;
}

nixl_status_t nixlFerryEngine::getPublicData(const nixlBackendMD* meta, std::string& str) const {
  const auto* memory = static_cast<const LocalMemory*>(meta);
  platform::MutexLock lock(state_->mu);
  if (!state_->local.contains(memory)) return NIXL_ERR_INVALID_PARAM;
  str = memory_data(*memory);
  return NIXL_SUCCESS;
}

nixl_status_t nixlFerryEngine::loadRemoteMD(const nixlBlobDesc& input, const nixl_mem_t& nixl_mem,
                                            const std::string& remote_agent, nixlBackendMD*& output) {
  if (!supported(nixl_mem)) return NIXL_ERR_NOT_SUPPORTED;
  auto memory = RemoteMemory::make(remote_agent, input.addr, input.len, input.metaInfo);
  if (!memory.ok()) {
    NIXL_ERROR << "FERRY backend: loadRemoteMD: " << memory.status().message();
    return NIXL_ERR_INVALID_PARAM;
  }
  platform::MutexLock lock(state_->mu);
  state_->remote.insert(memory->get());
  output = std::move(memory).value().release();
  return NIXL_SUCCESS;
}

nixl_status_t nixlFerryEngine::loadLocalMD(nixlBackendMD* input, nixlBackendMD*& output) {
  const auto* local = static_cast<const LocalMemory*>(input);
  std::string data;
  {
    platform::MutexLock lock(state_->mu);
    if (!state_->local.contains(local)) {
      NIXL_ERROR << "FERRY backend: loadLocalMD of metadata it did not register";
      return NIXL_ERR_INVALID_PARAM;
    }
    data = memory_data(*local);
  }
  // Made from the public data a peer would load, so a transfer within the
  // agent passes the checks a peer's does.
  auto memory = RemoteMemory::make(localAgent, local->base(), local->region.length, data);
  if (!memory.ok()) {
    NIXL_ERROR << "FERRY backend: loadLocalMD: " << memory.status().message();
    return NIXL_ERR_BACKEND;
  }
  platform::MutexLock lock(state_->mu);
  state_->remote.insert(memory->get());
  output = std::move(memory).value().release();
  return NIXL_SUCCESS;
}

nixl_status_t nixlFerryEngine::unloadMD(nixlBackendMD* input) {
  auto* memory = static_cast<RemoteMemory*>(input);
  {
    platform::MutexLock lock(state_->mu);
    if (state_->remote.erase(memory) == 0) return NIXL_ERR_INVALID_PARAM;
  }
  delete memory;
  return NIXL_SUCCESS;
}

// ---- peers -------------------------------------------------------------------

nixl_status_t nixlFerryEngine::getConnInfo(std::string& str) const {
  str = engine_->metadata();
  // Agents exchange this to reach each other, often across hosts: say once
  // if it names nothing another host can dial.
  if (engine_->address().rfind("127.", 0) == 0 && !loopback_warned_.exchange(true)) {
    NIXL_WARN << "FERRY backend of agent '" << localAgent << "' publishes only " << engine_->address()
              << " (it listens on loopback): agents on other hosts cannot reach it; set the backend's listen "
                 "parameter (or FERRY_LISTEN) to 0.0.0.0:0 or this host's address";
  }
  return NIXL_SUCCESS;
}

nixl_status_t nixlFerryEngine::loadRemoteConnInfo(const std::string& remote_agent,
                                                  const std::string& remote_conn_info) {
  if (remote_agent == localAgent) {
    NIXL_ERROR << "FERRY backend: connection info for agent '" << remote_agent << "', this agent's own name";
    return NIXL_ERR_INVALID_PARAM;
  }
  if (remote_conn_info.empty() || remote_conn_info.size() > kMaxConnInfo) {
    NIXL_ERROR << "FERRY backend: agent '" << remote_agent << "' sent connection info of "
               << remote_conn_info.size() << " bytes";
    return NIXL_ERR_INVALID_PARAM;
  }
  auto metadata = wire::decode_metadata(remote_conn_info);
  if (!metadata.ok()) {
    NIXL_ERROR << "FERRY backend: agent '" << remote_agent
               << "' sent connection info that is not a ferry engine's: " << metadata.status().message();
    return NIXL_ERR_INVALID_PARAM;
  }
  std::shared_ptr<Connection> stale;
  {
    platform::MutexLock lock(state_->mu);
    State::Peer& peer = state_->peers[remote_agent];
    if (peer.conn_info != remote_conn_info) {
      stale = std::move(peer.connection);
      peer.connection.reset();
    }
    peer.conn_info = remote_conn_info;
    peer.engine_id = metadata->engine_id;
  }
  if (stale) stale->close();
  return NIXL_SUCCESS;
}

Result<std::shared_ptr<Connection>> nixlFerryEngine::connection_to(const std::string& agent) const {
  std::string conn_info;
  {
    platform::MutexLock lock(state_->mu);
    auto it = state_->peers.find(agent);
    if (it == state_->peers.end()) {
      return Status(Code::kNotFound, "no connection info loaded for agent '" + agent + "'");
    }
    if (it->second.connection && it->second.connection->health().ok()) return it->second.connection;
    conn_info = it->second.conn_info;
  }
  // Dialing may take up to connect_timeout: other peers' calls go on meanwhile.
  auto dialed = engine_->connect(conn_info, after(settings_.connect_timeout));
  if (!dialed.ok()) return dialed.status().with_context("connecting to agent '" + agent + "'");
  std::shared_ptr<Connection> extra;
  std::shared_ptr<Connection> chosen;
  {
    platform::MutexLock lock(state_->mu);
    auto it = state_->peers.find(agent);
    if (it == state_->peers.end() || it->second.conn_info != conn_info) {
      extra = *dialed;  // unloaded or replaced meanwhile
    } else if (it->second.connection && it->second.connection->health().ok()) {
      extra = *dialed;  // another thread won the race
      chosen = it->second.connection;
    } else {
      it->second.connection = *dialed;
      chosen = *dialed;
    }
  }
  if (extra) extra->close();
  if (!chosen) return Status(Code::kNotFound, "agent '" + agent + "' was unloaded while connecting");
  return chosen;
}

nixl_status_t nixlFerryEngine::connect(const std::string& remote_agent) {
  // NIXL connects an agent to itself when it creates the backend. Its
  // connection is opened on first use: an agent that never moves bytes
  // within itself holds none, and creating a backend cannot fail on it.
  if (remote_agent == localAgent) return NIXL_SUCCESS;
  auto c = connection_to(remote_agent);
  if (!c.ok()) {
    NIXL_ERROR << "FERRY backend: " << c.status().to_string();
    return to_nixl(c.status());
  }
  return NIXL_SUCCESS;
}

nixl_status_t nixlFerryEngine::disconnect(const std::string& remote_agent) {
  std::shared_ptr<Connection> connection;
  {
    platform::MutexLock lock(state_->mu);
    auto it = state_->peers.find(remote_agent);
    if (it == state_->peers.end()) return NIXL_SUCCESS;
    connection = std::move(it->second.connection);
    // The agent stays its own peer; its connection reopens on next use.
    if (remote_agent != localAgent) state_->peers.erase(it);
  }
  if (connection) connection->close();
  return NIXL_SUCCESS;
}

// ---- transfers -------------------------------------------------------------------

nixl_status_t nixlFerryEngine::prepXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                                        const nixl_meta_dlist_t& remote, const std::string& remote_agent,
                                        nixlBackendReqH*& handle, const nixl_opt_b_args_t* opt_args) const {
  const auto refuse = [&](nixl_status_t code, const std::string& why) {
    NIXL_ERROR << "FERRY backend: prepXfer to agent '" << remote_agent << "': " << why;
    return code;
  };
  if (operation != NIXL_READ && operation != NIXL_WRITE) return refuse(NIXL_ERR_INVALID_PARAM, "unknown operation");
  if (!supported(local.getType()) || !supported(remote.getType())) {
    return refuse(NIXL_ERR_NOT_SUPPORTED, "FERRY moves DRAM and VRAM only");
  }
  if (local.descCount() != remote.descCount()) {
    return refuse(NIXL_ERR_INVALID_PARAM, std::to_string(local.descCount()) + " local descriptors for " +
                                              std::to_string(remote.descCount()) + " remote ones");
  }
  auto request = std::make_unique<FerryRequest>();
  request->operation = operation;
  request->remote_agent = remote_agent;

  // Pools: each distinct registration once, in the order first met.
  std::vector<Region> local_pools;
  std::vector<RemoteDescriptor> remote_pools;
  std::unordered_map<const LocalMemory*, uint32_t> local_index;
  std::unordered_map<const RemoteMemory*, uint32_t> remote_index;
  {
    platform::MutexLock lock(state_->mu);
    for (int i = 0; i < local.descCount(); ++i) {
      const nixlMetaDesc& l = local[i];
      const nixlMetaDesc& r = remote[i];
      const auto* lm = static_cast<const LocalMemory*>(l.metadataP);
      const auto* rm = static_cast<const RemoteMemory*>(r.metadataP);
      if (!state_->local.contains(lm)) {
        return refuse(NIXL_ERR_INVALID_PARAM, "local descriptor " + std::to_string(i) + " is not registered here");
      }
      if (!state_->remote.contains(rm) || rm->agent != remote_agent) {
        return refuse(NIXL_ERR_INVALID_PARAM,
                      "remote descriptor " + std::to_string(i) + " is not memory loaded from this agent");
      }
      if (l.len != r.len) {
        return refuse(NIXL_ERR_INVALID_PARAM, "descriptor " + std::to_string(i) + " has " + std::to_string(l.len) +
                                                  " local bytes and " + std::to_string(r.len) + " remote ones");
      }
      auto lo = offset_within(lm->base(), lm->region.length, l.addr, l.len, "local descriptor " + std::to_string(i));
      if (!lo.ok()) return refuse(NIXL_ERR_INVALID_PARAM, lo.status().message());
      auto ro = offset_within(rm->base, rm->length, r.addr, r.len, "remote descriptor " + std::to_string(i));
      if (!ro.ok()) return refuse(NIXL_ERR_INVALID_PARAM, ro.status().message());
      if (l.len == 0) continue;
      request->bytes += l.len;
      if (operation == NIXL_READ) {
        request->reads.push_back(ReadItem{reinterpret_cast<void*>(l.addr), l.len, rm->exported, *ro});
        continue;
      }
      auto [li, l_new] = local_index.try_emplace(lm, static_cast<uint32_t>(local_pools.size()));
      if (l_new) local_pools.push_back(lm->region);
      auto [ri, r_new] = remote_index.try_emplace(rm, static_cast<uint32_t>(remote_pools.size()));
      if (r_new) remote_pools.push_back(rm->exported);
      // Offsets in a block are from the pool's start: the region's, and the
      // export's (which covers the whole remote registration).
      request->blocks.push_back(Block{li->second, ri->second, *lo, *ro, l.len});
    }
  }
  auto connection = connection_to(remote_agent);
  if (!connection.ok()) return refuse(to_nixl(connection.status()), connection.status().to_string());
  request->connection = *connection;
  if (operation == NIXL_WRITE && !request->blocks.empty()) {
    auto pools = request->connection->prepare_blocks(local_pools, remote_pools);
    if (!pools.ok()) return refuse(to_nixl(pools.status()), pools.status().to_string());
    request->pools = *pools;
  }
  handle = request.release();
  return NIXL_SUCCESS;
}

Result<std::string> nixlFerryEngine::encode_note(const std::string& message, bool failed) const {
  return encode_agent_note(AgentNote{localAgent, message, failed}, Connection::kMaxNotification);
}

nixl_status_t nixlFerryEngine::postXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                                        const nixl_meta_dlist_t& remote, const std::string& remote_agent,
                                        nixlBackendReqH*& handle, const nixl_opt_b_args_t* opt_args) const {
  auto* request = static_cast<FerryRequest*>(handle);
  if (request->data.state() && !request->data.test()) return NIXL_ERR_REPOST_ACTIVE;
  if (request->note.state() && !request->note.test()) return NIXL_ERR_REPOST_ACTIVE;
  std::string note;
  const bool has_note = opt_args != nullptr && opt_args->hasNotif;
  if (has_note) {
    auto encoded = encode_note(opt_args->notifMsg, false);
    if (!encoded.ok()) {
      NIXL_ERROR << "FERRY backend: postXfer: " << encoded.status().message();
      return NIXL_ERR_INVALID_PARAM;
    }
    note = std::move(encoded).value();
  }
  request->note = Transfer();
  request->note_sent = false;
  request->last_in_progress = Clock::time_point{};
  request->read_note.reset();
  request->read_note_failed.reset();
  request->posted = Clock::now();
  if (request->operation == NIXL_WRITE) {
    if (request->blocks.empty()) {
      // Nothing to move: the notification alone, still after "the data".
      request->data = has_note ? request->connection->notify_async(note) : Transfer();
    } else {
      request->data = request->connection->write_blocks_async(request->pools, request->blocks, note);
    }
  } else {
    if (has_note) {
      request->read_note = note;
      request->read_note_failed = encode_note(opt_args->notifMsg, true).value();
    }
    request->data = request->reads.empty() ? Transfer() : request->connection->readv_async(request->reads);
  }
  if (request->data.state()) {
    request->finished = std::make_shared<FinishSignal>();
    request->data.on_finish([f = request->finished](const Status&) {
      f->done.store(true);
      // Taken and dropped so that a checkXfer between its test and its wait
      // cannot miss the wake-up.
      { platform::MutexLock lock(f->mu); }
      f->changed.notify_all();
    });
  }
  const nixl_status_t now = checkXfer(handle);
  if (now < 0) NIXL_ERROR << "FERRY backend: postXfer to agent '" << remote_agent << "' failed at once";
  return now;
}

void nixlFerryEngine::pause_if_spinning(FerryRequest& request) {
  // NIXL's users poll checkXfer; one that asks again within kTightPoll of
  // the last "in progress", past the first kSpinFirst of the transfer, is
  // spinning on it, and on a host with few cores takes a core from ferry's
  // stream workers (measured on 2 cores: 256 x 16 KiB over loopback TCP at
  // 0.75 of ferry's own wait()). That caller sleeps until the transfer ends
  // or kPause passes, as Transfer::wait sleeps after its spin; a caller that
  // checks now and then never waits.
  constexpr auto kTightPoll = std::chrono::microseconds(10);
  constexpr auto kSpinFirst = std::chrono::microseconds(50);
  constexpr auto kPause = std::chrono::microseconds(200);
  const Clock::time_point now = Clock::now();
  const bool spinning = now - request.last_in_progress < kTightPoll && now - request.posted > kSpinFirst;
  if (spinning && request.finished) {
    FinishSignal& f = *request.finished;
    platform::UniqueLock lock(f.mu);
    f.changed.wait_for(lock.native(), kPause, [&f] { return f.done.load(); });
  }
  request.last_in_progress = Clock::now();
}

nixl_status_t nixlFerryEngine::checkXfer(nixlBackendReqH* handle) const {
  auto* request = static_cast<FerryRequest*>(handle);
  // An empty handle stands for an empty request, finished at once.
  if (request->data.state() && !request->data.test()) {
    pause_if_spinning(*request);
    if (!request->data.test()) return NIXL_IN_PROG;
  }
  const Status data = request->data.state() ? request->data.status() : Status();
  if (request->read_note) {
    if (!request->note_sent) {
      // A read's notification goes once its data is in, or marked failed
      // once it failed: the target learns either way.
      request->note = request->connection->notify_async(data.ok() ? *request->read_note : *request->read_note_failed);
      request->note_sent = true;
    }
    if (!request->note.test()) return NIXL_IN_PROG;
  }
  if (!data.ok()) {
    NIXL_ERROR << "FERRY backend: " << (request->operation == NIXL_WRITE ? "WRITE to" : "READ from") << " agent '"
               << request->remote_agent << "': " << data.to_string();
    return to_nixl(data);
  }
  if (request->read_note && !request->note.status().ok()) {
    NIXL_ERROR << "FERRY backend: READ from agent '" << request->remote_agent
               << "' done, its notification failed: " << request->note.status().to_string();
    return to_nixl(request->note.status());
  }
  if (request->bytes > 0 && request->posted != Clock::time_point{}) {
    record_rate(request->remote_agent, request->bytes, Clock::now() - request->posted);
    request->posted = Clock::time_point{};
  }
  return NIXL_SUCCESS;
}

nixl_status_t nixlFerryEngine::releaseReqH(nixlBackendReqH* handle) const {
  std::unique_ptr<FerryRequest> request(static_cast<FerryRequest*>(handle));
  if (request->data.state() && !request->data.test()) {
    // A write's cancel returns once no byte of it lands any more, and the
    // target hears of it (failed_notif_prefix); a read's, once nothing more
    // lands here. NIXL may reuse the buffers as soon as this returns.
    if (!request->data.cancel() && !request->data.wait(after(settings_.options.peer_timeout)).ok() &&
        !request->data.test()) {
      // One that could not be stopped and is still running (its transport
      // lands without the peer's help, and slowly): failing the connection
      // ends it, and the transfer finishes once nothing of it lands.
      NIXL_WARN << "FERRY backend: releaseReqH of a transfer to agent '" << request->remote_agent
                << "' that would not stop: closing its connection";
      request->connection->close();
      (void)request->data.wait(kNoDeadline);
    }
    if (request->read_note && !request->note_sent) {
      (void)request->connection->notify_async(*request->read_note_failed);
    }
  }
  return NIXL_SUCCESS;
}

// ---- notifications ---------------------------------------------------------------

nixl_status_t nixlFerryEngine::getNotifs(notif_list_t& notif_list) {
  if (!notif_list.empty()) return NIXL_ERR_INVALID_PARAM;
  // Connections peers opened since the last call; accept does not wait.
  for (;;) {
    auto accepted = engine_->accept(Clock::now());
    if (!accepted.ok()) break;
    platform::MutexLock lock(state_->mu);
    state_->inbound.push_back(*accepted);
  }
  std::vector<std::shared_ptr<Connection>> connections;
  {
    platform::MutexLock lock(state_->mu);
    connections = state_->inbound;
    for (auto& [agent, peer] : state_->peers) {
      if (peer.connection) connections.push_back(peer.connection);
    }
  }
  std::vector<const Connection*> ended;
  std::vector<std::shared_ptr<Connection>> live;
  // Checked before draining: an ended connection queues nothing more, so
  // once drained it can go.
  for (const auto& c : connections) {
    if (c->health().ok()) {
      live.push_back(c);
    } else {
      ended.push_back(c.get());
    }
  }
  for (const auto& c : connections) {
    while (auto note = c->poll_note()) {
      auto decoded = decode_agent_note(note->message);
      if (!decoded.ok()) {
        // A peer's garbage is its own loss; the engine goes on.
        if (state_->dropped_notes.fetch_add(1) == 0) {
          NIXL_WARN << "FERRY backend: dropped a notification from " << c->peer_address() << ": "
                    << decoded.status().message();
        }
        continue;
      }
      if (!takes_note(decoded->agent, *c, live)) {
        if (state_->dropped_notes.fetch_add(1) == 0) {
          NIXL_WARN << "FERRY backend: dropped a notification from " << c->peer_address() << " that names agent '"
                    << decoded->agent << "', which another engine speaks for"
                    << (settings_.only_loaded_senders ? " or whose connection info is not loaded" : "");
        }
        continue;
      }
      const bool failed = decoded->failed || !note->delivered;
      notif_list.emplace_back(std::move(decoded->agent),
                              failed ? settings_.failed_prefix + decoded->message : std::move(decoded->message));
    }
  }
  platform::MutexLock lock(state_->mu);
  std::erase_if(state_->inbound, [&](const std::shared_ptr<Connection>& c) {
    return std::find(ended.begin(), ended.end(), c.get()) != ended.end();
  });
  return NIXL_SUCCESS;
}

bool nixlFerryEngine::takes_note(const std::string& agent, const Connection& connection,
                                 const std::vector<std::shared_ptr<Connection>>& live) {
  // The engine id on a connection is proven by ferry's handshake (a
  // signature by that engine's key), so a peer cannot speak for an agent
  // whose engine it is not: a forged "done" would free a KV block still
  // being read. Which connection a note comes on does not matter: two
  // agents that load each other's metadata hold two.
  const uint64_t from = connection.peer_engine_id();
  platform::MutexLock lock(state_->mu);
  auto loaded = state_->peers.find(agent);
  if (loaded != state_->peers.end() && loaded->second.engine_id != 0) return loaded->second.engine_id == from;
  if (settings_.only_loaded_senders) return false;
  // Not loaded: the first engine that speaks for the name holds it while it
  // has a live connection here; a restarted agent (a new engine) takes the
  // name over once the old engine's connections have all failed.
  auto [it, fresh] = state_->senders.try_emplace(agent, from);
  if (fresh || it->second == from) return true;
  const uint64_t holder = it->second;
  if (std::any_of(live.begin(), live.end(), [&](const auto& c) { return c->peer_engine_id() == holder; })) {
    return false;
  }
  it->second = from;
  return true;
}

nixl_status_t nixlFerryEngine::genNotif(const std::string& remote_agent, const std::string& msg) const {
  auto note = encode_note(msg, false);
  if (!note.ok()) {
    NIXL_ERROR << "FERRY backend: genNotif: " << note.status().message();
    return NIXL_ERR_INVALID_PARAM;
  }
  auto connection = connection_to(remote_agent);
  if (!connection.ok()) {
    NIXL_ERROR << "FERRY backend: genNotif: " << connection.status().to_string();
    return to_nixl(connection.status());
  }
  Transfer sent = (*connection)->notify_async(*note);
  // Posted is done for NIXL; a failure already known is told now.
  if (sent.test() && !sent.status().ok()) {
    NIXL_ERROR << "FERRY backend: genNotif to agent '" << remote_agent << "': " << sent.status().to_string();
    return to_nixl(sent.status());
  }
  return NIXL_SUCCESS;
}

// ---- cost ------------------------------------------------------------------------

void nixlFerryEngine::record_rate(const std::string& agent, uint64_t bytes, Clock::duration took) const {
  const double us = std::max(1.0, std::chrono::duration<double, std::micro>(took).count());
  platform::MutexLock lock(state_->mu);
  State::Rate& r = state_->rates[agent];
  // Small transfers say what a transfer costs before its bytes; large ones,
  // the rate. Each is smoothed over the last few of its kind.
  constexpr uint64_t kSmallBytes = 64 * 1024;
  constexpr double kWeight = 0.25;
  if (bytes <= kSmallBytes) {
    r.overhead_us = r.samples == 0 && r.overhead_us == 0 ? us : (1 - kWeight) * r.overhead_us + kWeight * us;
  } else {
    const double rate = static_cast<double>(bytes) / us;
    r.bytes_per_us = r.bytes_per_us == 0 ? rate : (1 - kWeight) * r.bytes_per_us + kWeight * rate;
  }
  ++r.samples;
}

nixl_status_t nixlFerryEngine::estimateXferCost(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                                                const nixl_meta_dlist_t& remote, const std::string& remote_agent,
                                                nixlBackendReqH* const& handle, std::chrono::microseconds& duration,
                                                std::chrono::microseconds& err_margin, nixl_cost_t& method,
                                                const nixl_opt_args_t* extra_params) const {
  uint64_t bytes = 0;
  for (int i = 0; i < local.descCount(); ++i) bytes += local[i].len;
  State::Rate r;
  {
    platform::MutexLock lock(state_->mu);
    auto it = state_->rates.find(remote_agent);
    if (it == state_->rates.end() || it->second.bytes_per_us == 0) {
      // Nothing measured toward this agent yet: no honest estimate.
      return NIXL_ERR_NOT_FOUND;
    }
    r = it->second;
  }
  const double us = r.overhead_us + static_cast<double>(bytes) / r.bytes_per_us;
  duration = std::chrono::microseconds(static_cast<int64_t>(us));
  // The smoothing follows a rate that moves by tens of percent between runs.
  err_margin = std::chrono::microseconds(static_cast<int64_t>(us * 0.5));
  method = nixl_cost_t::ANALYTICAL_BACKEND;
  return NIXL_SUCCESS;
}

}  // namespace ferry::nixl
