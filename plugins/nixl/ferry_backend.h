// nixlFerryEngine: NIXL's backend interface over ferry's public C++ API, so
// that NIXL's users (vLLM's NixlConnector, Dynamo) pick ferry by the name
// FERRY. One ferry engine per backend instance.
//
// How NIXL's calls map:
//   registerMem      Engine::reg + export_region; public data is the export
//   getConnInfo      Engine::metadata(), the blob Engine::connect takes
//   loadRemoteMD     checks the peer's export against NIXL's descriptor
//   prepXfer         WRITE: prepare_blocks once, one block per descriptor;
//                    READ: one ReadItem per descriptor
//   postXfer         one write_blocks_async or readv_async per request
//   checkXfer        the transfer's state; a READ's notification is sent
//                    here once its data is in
//   getNotifs        every connection's poll_note; a write that failed or was
//                    cancelled reaches the target as failed_notif_prefix +
//                    its message; a note naming an agent is taken only from
//                    the engine that agent's loaded connection info names
//                    (engine ids are proven in ferry's handshake), on any
//                    number of connections; for an agent not loaded, from
//                    the first engine that spoke for it while that engine
//                    stays connected (notif_senders=loaded: not at all)
//   genNotif         notify_async
//   loadLocalMD      the agent's own registration as a peer would load it
//   connect(itself)  the engine is its own peer: transfers and notifications
//                    within one agent go on a connection of the engine to
//                    itself, opened on first use, and arrive as a peer's do
// Same-host peers use ferry's local transport (GPU memory included), others
// TCP; the engine's connection to itself uses whichever transport a same-host
// peer would (FERRY_TRANSPORT decides, as for any peer).
//
// Threading: every method may be called from any thread. Peers, connections
// and live metadata are guarded by mu_; connecting happens outside it.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <backend/backend_engine.h>

#include "backend_params.h"
#include "ferry/engine.h"
#include "memory_metadata.h"
#include "transfer_request.h"

namespace ferry::nixl {

class nixlFerryEngine : public nixlBackendEngine {
 public:
  explicit nixlFerryEngine(const nixlBackendInitParams* init_params);
  ~nixlFerryEngine() override;

  bool supportsRemote() const override { return true; }
  bool supportsLocal() const override { return true; }
  bool supportsNotif() const override { return true; }
  nixl_mem_list_t getSupportedMems() const override { return {DRAM_SEG, VRAM_SEG}; }

  nixl_status_t registerMem(const nixlBlobDesc& mem, const nixl_mem_t& nixl_mem, nixlBackendMD*& out) override;
  nixl_status_t deregisterMem(nixlBackendMD* meta) override;

  nixl_status_t connect(const std::string& remote_agent) override;
  nixl_status_t disconnect(const std::string& remote_agent) override;
  nixl_status_t unloadMD(nixlBackendMD* input) override;

  nixl_status_t prepXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                         const nixl_meta_dlist_t& remote, const std::string& remote_agent, nixlBackendReqH*& handle,
                         const nixl_opt_b_args_t* opt_args = nullptr) const override;
  nixl_status_t postXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                         const nixl_meta_dlist_t& remote, const std::string& remote_agent, nixlBackendReqH*& handle,
                         const nixl_opt_b_args_t* opt_args = nullptr) const override;
  nixl_status_t checkXfer(nixlBackendReqH* handle) const override;
  nixl_status_t releaseReqH(nixlBackendReqH* handle) const override;

  nixl_status_t getPublicData(const nixlBackendMD* meta, std::string& str) const override;
  nixl_status_t getConnInfo(std::string& str) const override;
  nixl_status_t loadRemoteConnInfo(const std::string& remote_agent, const std::string& remote_conn_info) override;
  nixl_status_t loadRemoteMD(const nixlBlobDesc& input, const nixl_mem_t& nixl_mem, const std::string& remote_agent,
                             nixlBackendMD*& output) override;
  // The target side of `input`, a registration of this agent, for transfers
  // within the agent; unloadMD frees it.
  nixl_status_t loadLocalMD(nixlBackendMD* input, nixlBackendMD*& output) override;

  nixl_status_t getNotifs(notif_list_t& notif_list) override;
  nixl_status_t genNotif(const std::string& remote_agent, const std::string& msg) const override;

  nixl_status_t estimateXferCost(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                                 const nixl_meta_dlist_t& remote, const std::string& remote_agent,
                                 nixlBackendReqH* const& handle, std::chrono::microseconds& duration,
                                 std::chrono::microseconds& err_margin, nixl_cost_t& method,
                                 const nixl_opt_args_t* extra_params = nullptr) const override;

  // The ferry engine, for tests and diagnostics.
  Engine& engine() const { return *engine_; }

 private:
  struct State;

  // The connection to `agent`, dialed with its loaded connection info when
  // there is none or the last one failed (for this agent itself, the
  // engine's own metadata). Blocks up to connect_timeout.
  Result<std::shared_ptr<Connection>> connection_to(const std::string& agent) const;
  Result<std::string> encode_note(const std::string& message, bool failed) const;
  // Whether a note naming `agent` that came from `connection`'s engine is
  // taken (see getNotifs above). `live` lists the connections of this
  // backend that have not failed.
  bool takes_note(const std::string& agent, const Connection& connection,
                  const std::vector<std::shared_ptr<Connection>>& live);
  // Sleeps briefly when the caller polls `request` in a tight loop.
  static void pause_if_spinning(FerryRequest& request);
  // Records a finished transfer's rate toward `agent` for estimateXferCost.
  void record_rate(const std::string& agent, uint64_t bytes, Clock::duration took) const;

  BackendSettings settings_;
  std::unique_ptr<Engine> engine_;
  mutable std::atomic<bool> loopback_warned_{false};
  std::unique_ptr<State> state_;
};

}  // namespace ferry::nixl
