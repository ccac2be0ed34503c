// TransferMetrics: the engine's transfer counters (ferry/metrics.h), sharded
// by thread. A transfer is metered when it is posted (TransferState::meter)
// and counted once, when it finishes, on the thread that finishes it.
//
// Rare events (a handshake refused, a data path lost) are counted under a
// lock of their own.
//
// Thread-safe; record() takes no lock and touches one shard's cache lines.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/metrics.h"
#include "ferry/status.h"
#include "platform/mutex.h"

namespace ferry::core {

enum class MeteredOp : uint8_t { kSend, kRecv, kWrite, kRead, kWriteBlocks, kNotify };
inline constexpr int kMeteredOps = 6;
// Transports by index: 0 tcp, 1 local.
inline constexpr int kMeteredTransports = 2;
int metered_transport(std::string_view name);  // -1 for any other

// One connection's counts, for the per-peer series: made by the
// connection (TransferMetrics::peer_meter), held by it and by each of its
// transfers until the transfer is counted.
struct PeerMeter {
  explicit PeerMeter(std::string peer_address) : peer(std::move(peer_address)) {}
  const std::string peer;
  struct PerOp {
    std::atomic<uint64_t> succeeded{0}, failed{0}, bytes{0};
  };
  std::array<PerOp, kMeteredOps> ops;
};

// The bytes one NIC's data streams carried (per-NIC series), counted by
// the streams' workers; the engine keeps one per NIC name.
struct NicMeter {
  std::atomic<uint64_t> sent{0}, received{0};
};

// Which way a staged chunk went: to a pinned slot on its way out, or from
// one into GPU memory.
enum class StagingDirection : uint8_t { kToHost, kToDevice };

class TransferMetrics {
 public:
  static constexpr int kBuckets = 23;  // 22 bounds (1 us .. 10 s) and +Inf
  static constexpr int kCodes = 32;
  static constexpr int kShards = 8;

  // Counts a finished transfer, and into `peer` too when it is not null.
  void record(MeteredOp op, int transport, uint64_t bytes, int64_t nanoseconds, Code code, PeerMeter* peer);
  // A new connection's meter, listed in snapshots while anyone holds it.
  std::shared_ptr<PeerMeter> peer_meter(std::string peer_address) EXCLUDES(mu_);
  // The meter of local NIC `nic` ("" for streams on no named NIC), the same
  // one for every stream on it.
  std::shared_ptr<NicMeter> nic_meter(const std::string& nic) EXCLUDES(mu_);
  // A handshake this engine refused or dropped: `reason` is the status
  // code's name, or "busy" for a stream closed unread past max_handshakes.
  void handshake_refused(std::string_view reason) EXCLUDES(mu_);
  // A chunk of `bytes` staged between GPU memory and a pinned slot,
  // `nanoseconds` from queuing its copies to seeing them done.
  void staged(StagingDirection direction, uint64_t bytes, int64_t nanoseconds);
  // A data path of a `transport` connection lost while the connection went on
  // or failed (not an orderly close).
  void path_lost(std::string_view transport) EXCLUDES(mu_);
  // A chunk of `bytes` that a lost path had left unconfirmed went out again
  // on another path (rare: failovers only, so under the lock).
  void chunk_resent(std::string_view transport, uint64_t bytes) EXCLUDES(mu_);

  // Sums the shards. Counts taken while transfers finish may be a moment
  // apart from one another; each is exact.
  MetricsSnapshot snapshot() const EXCLUDES(mu_);

 private:
  struct alignas(64) Shard {
    struct PerOp {
      std::atomic<uint64_t> succeeded{0}, failed{0}, bytes{0}, nanoseconds{0};
      std::array<std::atomic<uint64_t>, kBuckets> buckets{};
    };
    std::array<std::array<PerOp, kMeteredTransports>, kMeteredOps> ops;
    std::array<std::atomic<uint64_t>, kCodes> failures{};
    struct Staged {
      std::atomic<uint64_t> chunks{0}, bytes{0}, nanoseconds{0};
    };
    std::array<Staged, 2> staged;  // by StagingDirection
  };
  static int bucket_of(int64_t nanoseconds);
  Shard& mine();

  std::array<Shard, kShards> shards_;
  mutable platform::Mutex mu_;
  std::map<std::string, uint64_t, std::less<>> handshakes_refused_ GUARDED_BY(mu_);
  std::map<std::string, uint64_t, std::less<>> paths_lost_ GUARDED_BY(mu_);
  std::map<std::string, ResentCounts, std::less<>> resent_ GUARDED_BY(mu_);
  // The connections' meters; those no one holds are dropped as new ones come.
  std::vector<std::weak_ptr<PeerMeter>> peers_ GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<NicMeter>, std::less<>> nics_ GUARDED_BY(mu_);
};

}  // namespace ferry::core
