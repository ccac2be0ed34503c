// What a Directory shares with its watches and with the engine: the parsed
// URL and one backend connection, taken in turn.
#pragma once

#include <memory>
#include <mutex>

#include "directory/backend.h"
#include "directory/url.h"
#include "ferry/directory.h"
#include "platform/deadline_mutex.h"

namespace ferry {

struct Directory::Impl {
  directory::DirectoryUrl url;
  platform::DeadlineMutex mu;
  std::unique_ptr<directory::Backend> backend;  // guarded by mu

  // Takes `mu` by `deadline` (kUnavailable otherwise).
  Status lock(std::unique_lock<platform::DeadlineMutex>& lock, Deadline deadline) const;
  Result<DirectoryEntry> lookup(std::string_view name, Deadline deadline);
  Result<DirectoryListing> list(Deadline deadline);
};

}  // namespace ferry
