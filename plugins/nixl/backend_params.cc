// Backend parameters to ferry options (backend_params.h).
#include "backend_params.h"

#include <charconv>

namespace ferry::nixl {
namespace {

Result<long long> parse_count(const std::string& key, const std::string& value, long long low, long long high) {
  long long n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < low || n > high) {
    return Status(Code::kInvalidArgument, "FERRY backend parameter " + key + "=\"" + value +
                                              "\": expected an integer from " + std::to_string(low) + " to " +
                                              std::to_string(high));
  }
  return n;
}

}  // namespace

nixl_b_params_t default_backend_params() {
  return {{"listen", ""},          {"nics", ""},
          {"streams", ""},         {"transport", ""},
          {"auth_token", ""},      {"peer_timeout_ms", ""},
          {"connect_timeout_ms", "5000"}, {"failed_notif_prefix", kDefaultFailedPrefix},
          {"notif_senders", "first"}};
}

Result<BackendSettings> settings_from_params(const nixl_b_params_t& params) {
  BackendSettings s;
  // Two agents of one process are a common NIXL layout (its own examples);
  // such a peer can only be another engine of this address space.
  s.options.local_same_process = true;
  // NIXL agents exchange metadata to reach each other across hosts: the
  // engine listens everywhere and publishes addresses other hosts can dial
  // (ferry's own default, loopback, would publish 127.0.0.1).
  s.options.listen = kDefaultListen;
  const nixl_b_params_t known = default_backend_params();
  for (const auto& [key, value] : params) {
    if (!known.contains(key)) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k.first;
      return Status(Code::kInvalidArgument, "FERRY backend: unknown parameter \"" + key + "\"; known: " + names);
    }
    if (key == "failed_notif_prefix") {
      s.failed_prefix = value;
      continue;
    }
    if (value.empty()) continue;
    if (key == "listen") {
      s.options.listen = value;
    } else if (key == "nics") {
      s.options.nics = value;
    } else if (key == "streams") {
      auto n = parse_count(key, value, 1, 64);
      if (!n.ok()) return n.status();
      s.options.streams = static_cast<int>(*n);
    } else if (key == "transport") {
      auto t = parse_transport(value);
      if (!t.ok()) return Status(Code::kInvalidArgument, "FERRY backend parameter " + t.status().message());
      s.options.transport = *t;
    } else if (key == "auth_token") {
      s.options.auth_token = value;
    } else if (key == "peer_timeout_ms") {
      auto n = parse_count(key, value, 100, 3'600'000);
      if (!n.ok()) return n.status();
      s.options.peer_timeout = std::chrono::milliseconds(*n);
    } else if (key == "connect_timeout_ms") {
      auto n = parse_count(key, value, 1, 3'600'000);
      if (!n.ok()) return n.status();
      s.connect_timeout = std::chrono::milliseconds(*n);
    } else if (key == "notif_senders") {
      if (value != "loaded" && value != "first") {
        return Status(Code::kInvalidArgument,
                      "FERRY backend parameter notif_senders is \"" + value + "\"; expected loaded or first");
      }
      s.only_loaded_senders = value == "loaded";
    }
  }
  return s;
}

}  // namespace ferry::nixl
