// Directory: engines find each other by name through Redis or etcd.
//
// An engine started with Options::directory publishes an entry under
// NAMESPACE/engines/NAME (its addresses, host identity, engine id and a fresh
// incarnation number) with a time to live that a background thread refreshes;
// an engine that dies vanishes from the directory within the TTL, and a clean
// shutdown deletes its entry at once. Engine::connect("NAME") resolves names
// through it. The directory holds no secret: an entry only says where to dial,
// and the handshake (with its shared secret) still decides who gets in.
//
// URLs:
//   redis://[user:password@]host:port[/namespace]
//   etcd://host:port[,host:port...][/namespace]     (etcd's v3 JSON gateway)
// The namespace defaults to "ferry".
//
// Example:
//   auto dir = ferry::Directory::open("redis://10.0.0.1:6379/prod").value();
//   auto e = dir->lookup("decode-3", ferry::after(2s));
//   if (e.ok()) printf("%s at %s\n", e->name.c_str(), e->addresses[0].c_str());
//
// Every call takes a deadline and blocks at most until then. Everything read
// from the directory is treated as hostile: entries are size-limited and
// validated; a malformed entry is kDataLoss naming its key, never a crash.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"
#include "ferry/transfer.h"

namespace ferry {

// One engine as the directory names it. A plain value.
struct DirectoryEntry {
  std::string name;
  // The engine's random id (Engine::id()); a connection made through this
  // entry is refused unless the engine that answers has this id.
  uint64_t engine_id = 0;
  // Higher for every later start of an engine under this name.
  uint64_t incarnation = 0;
  // Host identity (host name and boot id), as in the handshake.
  std::string host_id;
  // "host:port" the engine listens on, preferred first (1 to 64 of them).
  std::vector<std::string> addresses;
  // The engine's process id and start time (Unix milliseconds), for people.
  int64_t pid = 0;
  int64_t started_unix_ms = 0;

  // The metadata blob Engine::connect accepts (Engine::metadata() format).
  std::string metadata() const;
  // One line for logs and the CLI: "decode-3 incarnation 17... engine 0f3a... at 10.0.0.2:7000".
  // Control characters, backslashes and bytes that are not UTF-8 appear as \xNN.
  std::string to_string() const;
};

// What list() found: valid entries sorted by name, and one kDataLoss status
// per entry that was malformed (skipped, so that one bad writer cannot hide
// every other engine).
struct DirectoryListing {
  std::vector<DirectoryEntry> entries;
  std::vector<Status> malformed;
};

// A change seen by a DirectoryWatch.
struct DirectoryEvent {
  enum class Kind : uint8_t {
    kAppeared,  // a name that was not listed is
    kVanished,  // a name that was listed is no more (entry: as last seen)
    kReplaced,  // a name now names another engine (a restart: new incarnation)
  };
  Kind kind = Kind::kAppeared;
  DirectoryEntry entry;
};

// "appeared", "vanished" or "replaced".
std::string_view event_kind_name(DirectoryEvent::Kind kind);

class DirectoryWatch;

// A client of one directory. Thread-safe: calls from several threads share
// one connection in turn (each waits for it only until its own deadline).
class Directory {
 public:
  // Parses `url` and prepares a client; connects lazily, so a directory that
  // is down now is not an error here. kInvalidArgument for a malformed URL.
  static Result<std::unique_ptr<Directory>> open(std::string_view url);
  ~Directory();
  Directory(const Directory&) = delete;
  Directory& operator=(const Directory&) = delete;

  // The URL without its password, for messages.
  std::string url() const;
  // The namespace entries live under ("ferry" unless the URL names one).
  std::string ns() const;

  // The entry published under `name`. kNotFound if none, kDataLoss if it is
  // malformed, kInvalidArgument if `name` is not a valid name, kUnavailable
  // if the directory cannot be reached, kDeadlineExceeded.
  Result<DirectoryEntry> lookup(std::string_view name, Deadline deadline);
  // Every entry of the namespace: at most kMaxEntries, holding at most
  // kMaxListingBytes of memory decoded (100,000 entries of two addresses
  // each take about 50 MiB; entries of the largest kind fit about 3,600).
  // kUnavailable, kDeadlineExceeded, kResourceExhausted past either bound
  // (nothing is returned then).
  Result<DirectoryListing> list(Deadline deadline);
  // A watch that reports names appearing, vanishing and being replaced. It
  // shares this client's connection and may outlive it.
  std::unique_ptr<DirectoryWatch> watch();

  // Names: 1 to 128 bytes of [A-Za-z0-9._-] (so never "host:port").
  static bool valid_name(std::string_view name);
  static constexpr size_t kMaxEntries = 100000;
  static constexpr size_t kMaxEntryBytes = 16 * 1024;
  // What one listing may hold decoded (its entries, malformed statuses).
  static constexpr size_t kMaxListingBytes = 64 * 1024 * 1024;

  struct Impl;
  explicit Directory(std::shared_ptr<Impl> impl);

 private:
  std::shared_ptr<Impl> impl_;
};

// Compares successive listings of a directory. Not thread-safe (one owner).
//
// Example:
//   auto w = dir->watch();
//   for (;;) for (auto& ev : w->next(ferry::after(60s)).value()) ...
class DirectoryWatch {
 public:
  explicit DirectoryWatch(std::shared_ptr<Directory::Impl> impl);
  // Lists once and returns what changed since the last listing (the first
  // call reports every entry as kAppeared). Errors as Directory::list; a
  // failed poll changes nothing, so no name "vanishes" while the directory
  // is down.
  Result<std::vector<DirectoryEvent>> poll(Deadline deadline);
  // Polls every `interval` until something changed (returns it) or
  // `deadline` passed (returns an empty vector). Errors as poll, except that
  // kUnavailable is retried until the deadline, and returned only if no poll
  // of this call reached the directory. After the first, a poll starts only
  // with at least 200 ms left before `deadline`.
  Result<std::vector<DirectoryEvent>> next(Deadline deadline,
                                           std::chrono::milliseconds interval = std::chrono::milliseconds(200));

 private:
  std::shared_ptr<Directory::Impl> impl_;
  bool primed_ = false;
  std::vector<DirectoryEntry> last_;  // sorted by name
};

}  // namespace ferry
