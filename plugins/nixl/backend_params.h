// The FERRY backend's parameters (what nixlAgent::createBackend passes and
// getPluginParams lists) and the ferry options they become.
//
//   listen              host:port the engine listens on ("" = every address,
//                       port chosen: 0.0.0.0:0, so agents on other hosts can
//                       reach it; FERRY_LISTEN still wins)
//   nics                NICs to move data on, "eth1,eth2" ("" = the listen address)
//   streams             data streams per NIC pair
//   transport           auto | tcp | local
//   auth_token          shared secret; every agent's backend must use the same
//   peer_timeout_ms     a silent peer fails its transfers after this long
//   connect_timeout_ms  how long connecting to a peer may take
//   failed_notif_prefix put before the message of a notification whose
//                       transfer failed or was cancelled
//   notif_senders       whose notifications are taken: "loaded" (only agents
//                       whose connection info this agent loaded, each from
//                       the engine that info names) or "first" (also agents
//                       not loaded, each from the first engine that speaks
//                       for it while that engine stays connected)
//
// An empty value keeps ferry's default (and its FERRY_* variable, which wins
// over a value given here, as for every ferry engine). An unknown key or a
// malformed value is refused, naming it.
#pragma once

#include <chrono>
#include <string>

#include <nixl_types.h>

#include "ferry/options.h"
#include "ferry/status.h"

namespace ferry::nixl {

inline constexpr const char* kDefaultFailedPrefix = "FERRY_XFER_FAILED:";
inline constexpr const char* kDefaultListen = "0.0.0.0:0";

struct BackendSettings {
  Options options;
  std::chrono::milliseconds connect_timeout{5000};
  std::string failed_prefix = kDefaultFailedPrefix;
  // notif_senders=loaded: notes naming an agent whose connection info is
  // not loaded are dropped.
  bool only_loaded_senders = false;
};

// Every key with its default, as getPluginParams shows them.
nixl_b_params_t default_backend_params();

// The settings `params` ask for. kInvalidArgument names the key and value.
Result<BackendSettings> settings_from_params(const nixl_b_params_t& params);

}  // namespace ferry::nixl
