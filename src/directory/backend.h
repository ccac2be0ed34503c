// Backend: the few key-value operations the directory needs, one
// implementation per server (redis_backend.cc, etcd_backend.cc).
//
// Threading: an instance is used by one thread at a time (callers serialize).
// Every call ends by its deadline; a server that cannot be reached or does
// not answer in time is kUnavailable, a reply that breaks the protocol or a
// bound is kDataLoss. After a failure the next call reconnects.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "directory/url.h"
#include "ferry/status.h"
#include "ferry/transfer.h"

namespace ferry::directory {

using KeyValues = std::vector<std::pair<std::string, std::string>>;
// Takes one key and its value during Backend::list; they are valid only for
// the call. An error ends the listing with it.
using TakeEntry = std::function<Status(std::string_view key, std::string_view value)>;

class Backend {
 public:
  virtual ~Backend() = default;

  // The value under `key` (nullopt: none), at most `max_value` bytes.
  virtual Result<std::optional<std::string>> get(const std::string& key, size_t max_value, Deadline deadline) = 0;
  // Hands every key under `prefix` with its value to `take`, a page at a
  // time, so that the backend holds one page's replies (a few MiB), never the
  // whole listing. At most `max_entries` keys (more is kResourceExhausted);
  // values of at most `max_value` bytes (a longer value is handed over cut to
  // max_value + 1 bytes, for the caller to refuse). A key is handed over
  // once, in no particular order.
  virtual Status list(const std::string& prefix, size_t max_entries, size_t max_value, Deadline deadline,
                      const TakeEntry& take) = 0;
  // Stores `value` under `key`, replacing what is there, to expire after `ttl`
  // unless refreshed.
  virtual Status put_with_ttl(const std::string& key, const std::string& value, std::chrono::milliseconds ttl,
                              Deadline deadline) = 0;
  // Extends the life of `key` by `ttl` if it still holds `value`: true. False
  // (and nothing changed) if it is gone or holds another value.
  virtual Result<bool> refresh(const std::string& key, const std::string& value, std::chrono::milliseconds ttl,
                               Deadline deadline) = 0;
  // Deletes `key` if it holds `value` (atomically where the server allows).
  virtual Status remove_if(const std::string& key, const std::string& value, Deadline deadline) = 0;
  // Stores `value` under `key` with no expiry (tests, tools).
  virtual Status put(const std::string& key, const std::string& value, Deadline deadline) = 0;
};

// The backend `url` names. Connects lazily.
std::unique_ptr<Backend> make_backend(const DirectoryUrl& url);
std::unique_ptr<Backend> make_redis_backend(const DirectoryUrl& url);
std::unique_ptr<Backend> make_etcd_backend(const DirectoryUrl& url);
// For a server whose client library this build lacks: every call fails with
// kUnimplemented naming `server` and the `library` to build with.
std::unique_ptr<Backend> make_missing_backend(const std::string& server, const std::string& library);

}  // namespace ferry::directory
