// Landed and arriving chunks of one incoming operation.
#include "transport/tcp/chunk_arrivals.h"

#include <string>

namespace ferry::tcp {

int ChunkArrivals::arriving_elsewhere(uint64_t offset, int path) const {
  int other = -1;
  auto [first, last] = arriving_.equal_range(offset);
  for (auto it = first; it != last; ++it) {
    if (it->second != path) other = it->second;
  }
  return other;
}

ChunkArrivals::Begin ChunkArrivals::begin(uint64_t offset, int path) {
  Begin b;
  // Named even when this copy is not landed: the path bringing the first
  // copy was given up all the same.
  b.stalled_path = arriving_elsewhere(offset, path);
  if (completed_ || aborted_ || landed_.count(offset) > 0) {
    b.land = false;
    return b;
  }
  arriving_.emplace(offset, path);
  return b;
}

Result<bool> ChunkArrivals::end(uint64_t offset, int path, uint64_t size, bool landed) {
  auto [first, last] = arriving_.equal_range(offset);
  for (auto it = first; it != last; ++it) {
    if (it->second == path) {
      arriving_.erase(it);
      break;
    }
  }
  if (landed && landed_.insert(offset).second) {
    received_ += size;
    if (received_ > total_) {
      return Status(Code::kDataLoss,
                    std::to_string(received_) + " bytes landed for an operation of " + std::to_string(total_));
    }
  }
  if (completed_ || (received_ != total_ && !aborted_) || !arriving_.empty()) return false;
  completed_ = true;
  return true;
}

ChunkArrivals::Abort ChunkArrivals::abort(uint64_t offset, int path) {
  Abort a;
  a.stalled_path = arriving_elsewhere(offset, path);
  if (completed_) return a;  // every byte had landed: it stays complete
  aborted_ = true;
  if (!arriving_.empty()) return a;
  completed_ = a.over = true;
  return a;
}

}  // namespace ferry::tcp
