// Directory, DirectoryEntry and DirectoryWatch: the public client.
#include "ferry/directory.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <thread>

#include "directory/backend.h"
#include "directory/directory_impl.h"
#include "directory/entry.h"
#include "wire/metadata.h"

namespace ferry {

std::string DirectoryEntry::metadata() const {
  wire::EngineMetadata m;
  m.engine_id = engine_id;
  m.host_id = host_id;
  m.addresses = addresses;
  return wire::encode_metadata(m);
}

std::string DirectoryEntry::to_string() const {
  char id[17];
  std::snprintf(id, sizeof(id), "%016" PRIx64, engine_id);
  // Fields come from whoever could write the directory: escaped, so that a
  // log or terminal shows them and never acts on them.
  std::string out = directory::terminal_text(name) + " incarnation " + std::to_string(incarnation) + " engine " + id +
                    " pid " + std::to_string(pid) + " at ";
  for (size_t i = 0; i < addresses.size(); ++i) out += (i ? "," : "") + directory::terminal_text(addresses[i]);
  return out;
}

std::string_view event_kind_name(DirectoryEvent::Kind kind) {
  switch (kind) {
    case DirectoryEvent::Kind::kAppeared:
      return "appeared";
    case DirectoryEvent::Kind::kVanished:
      return "vanished";
    case DirectoryEvent::Kind::kReplaced:
      return "replaced";
  }
  return "?";
}

bool Directory::valid_name(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// ---- Impl --------------------------------------------------------------------

Status Directory::Impl::busy() const {
  return Status(Code::kUnavailable,
                "directory " + url.redacted + ": another call held the connection past this call's deadline");
}

Result<DirectoryEntry> Directory::Impl::lookup(std::string_view name, Deadline deadline) {
  if (!Directory::valid_name(name)) {
    return Status(Code::kInvalidArgument, "directory: \"" + directory::printable(name, 200) +
                                              "\" is not a name (1-128 bytes of [A-Za-z0-9._-])");
  }
  std::string key = directory::entry_key(url.ns, name);
  if (!mu.try_lock_until(deadline)) return busy();
  auto got = backend->get(key, Directory::kMaxEntryBytes, deadline);
  mu.unlock();
  FERRY_ASSIGN_OR_RETURN(auto value, std::move(got));
  if (!value.has_value()) {
    return Status(Code::kNotFound, "directory " + url.redacted + ": no engine named \"" + std::string(name) +
                                       "\" (no entry " + key + ")");
  }
  return directory::decode_entry(key, *value, name);
}

namespace {

// About what a decoded entry holds: the object (three times, for the slack
// and the moves of a vector that doubles) and the heap block of each string
// too long to be kept in place, with the allocator's header.
size_t held_bytes(const DirectoryEntry& e) {
  auto heap = [](const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 + 16 : 0; };
  size_t n = 3 * sizeof(DirectoryEntry) + heap(e.name) + heap(e.host_id) + 16;
  n += e.addresses.capacity() * sizeof(std::string);
  for (const std::string& a : e.addresses) n += heap(a);
  return n;
}

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

Result<DirectoryListing> Directory::Impl::list(Deadline deadline) {
  std::string prefix = directory::entries_prefix(url.ns);
  DirectoryListing out;
  size_t held = 0;
  // Each value is decoded as it comes and dropped, so that what the listing
  // holds is its decoded entries (and statuses), counted against
  // kMaxListingBytes, plus the one page of replies the backend reads at a time.
  auto take = [&](std::string_view key, std::string_view value) -> Status {
    std::string_view name = key.substr(prefix.size());
    auto e = directory::decode_entry(key, value, name);
    if (e.ok()) {
      held += held_bytes(*e);
      out.entries.push_back(std::move(e).value());
    } else {
      held += 3 * sizeof(Status) + e.status().message().size() + 32;
      out.malformed.push_back(e.status());
    }
    if (held > Directory::kMaxListingBytes) {
      return Status(Code::kResourceExhausted,
                    "directory " + url.redacted + ": a listing holds at most " + mib(Directory::kMaxListingBytes) +
                        " of entries (Directory::kMaxListingBytes), and " + std::to_string(out.entries.size()) +
                        " entries and " + std::to_string(out.malformed.size()) + " malformed ones under " +
                        directory::printable(prefix, 200) + " took it with more to come");
    }
    return Status();
  };
  if (!mu.try_lock_until(deadline)) return busy();
  Status listed = backend->list(prefix, Directory::kMaxEntries, Directory::kMaxEntryBytes, deadline, take);
  mu.unlock();
  FERRY_RETURN_IF_ERROR(listed);
  std::sort(out.entries.begin(), out.entries.end(),
            [](const DirectoryEntry& a, const DirectoryEntry& b) { return a.name < b.name; });
  return out;
}

// ---- Directory -----------------------------------------------------------------

Directory::Directory(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Directory::~Directory() = default;

Result<std::unique_ptr<Directory>> Directory::open(std::string_view url) {
  FERRY_ASSIGN_OR_RETURN(directory::DirectoryUrl u, directory::parse_directory_url(url));
  auto backend = directory::make_backend(u);
  return std::make_unique<Directory>(std::make_shared<Impl>(std::move(u), std::move(backend)));
}

std::string Directory::url() const { return impl_->url.redacted; }
std::string Directory::ns() const { return impl_->url.ns; }
Result<DirectoryEntry> Directory::lookup(std::string_view name, Deadline deadline) {
  return impl_->lookup(name, deadline);
}
Result<DirectoryListing> Directory::list(Deadline deadline) { return impl_->list(deadline); }
std::unique_ptr<DirectoryWatch> Directory::watch() { return std::make_unique<DirectoryWatch>(impl_); }

// ---- DirectoryWatch --------------------------------------------------------------

namespace {
constexpr auto kMinPollTime = std::chrono::milliseconds(200);
}  // namespace

DirectoryWatch::DirectoryWatch(std::shared_ptr<Directory::Impl> impl) : impl_(std::move(impl)) {}

Result<std::vector<DirectoryEvent>> DirectoryWatch::poll(Deadline deadline) {
  FERRY_ASSIGN_OR_RETURN(DirectoryListing now, impl_->list(deadline));
  std::vector<DirectoryEvent> events;
  // Both lists are sorted by name: one merge finds every change.
  size_t i = 0, j = 0;
  const auto& before = last_;
  const auto& after = now.entries;
  while (i < before.size() || j < after.size()) {
    if (j == after.size() || (i < before.size() && before[i].name < after[j].name)) {
      events.push_back({DirectoryEvent::Kind::kVanished, before[i++]});
    } else if (i == before.size() || after[j].name < before[i].name) {
      events.push_back({DirectoryEvent::Kind::kAppeared, after[j++]});
    } else {
      if (before[i].engine_id != after[j].engine_id || before[i].incarnation != after[j].incarnation) {
        events.push_back({DirectoryEvent::Kind::kReplaced, after[j]});
      }
      ++i;
      ++j;
    }
  }
  last_ = std::move(now.entries);
  primed_ = true;
  return events;
}

Result<std::vector<DirectoryEvent>> DirectoryWatch::next(Deadline deadline, std::chrono::milliseconds interval) {
  if (interval < std::chrono::milliseconds(10)) interval = std::chrono::milliseconds(10);
  Status unreachable;  // the last failure, reported if no poll of this call got through
  bool listed = false;
  for (;;) {
    auto r = poll(deadline);
    if (r.ok()) {
      listed = true;
      if (!r->empty()) return r;
    } else if (r.status().code() != Code::kUnavailable) {
      return r;
    } else {
      unreachable = r.status();
    }
    // A poll starts only with time left to answer, so that one begun just
    // before the deadline does not read as an unreachable directory.
    auto wake = Clock::now() + interval;
    if (wake + kMinPollTime >= deadline) {
      if (!listed && !unreachable.ok()) return unreachable;
      return std::vector<DirectoryEvent>();
    }
    std::this_thread::sleep_until(wake);
  }
}

}  // namespace ferry
