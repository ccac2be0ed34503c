// What a Directory shares with its watches and with the engine: the parsed
// URL and one backend connection, taken in turn.
#pragma once

#include <memory>
#include <utility>

#include "directory/backend.h"
#include "directory/url.h"
#include "ferry/directory.h"
#include "platform/deadline_mutex.h"

namespace ferry {

struct Directory::Impl {
  Impl(directory::DirectoryUrl u, std::unique_ptr<directory::Backend> b) : url(std::move(u)), backend(std::move(b)) {}

  directory::DirectoryUrl url;
  platform::DeadlineMutex mu;
  std::unique_ptr<directory::Backend> backend GUARDED_BY(mu);

  // Why a call gave up waiting for `mu` (kUnavailable).
  Status busy() const;
  Result<DirectoryEntry> lookup(std::string_view name, Deadline deadline);
  Result<DirectoryListing> list(Deadline deadline);
};

}  // namespace ferry
