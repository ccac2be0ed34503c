// What an engine has done, as counters an operator scrapes: transfers by
// operation and transport, their bytes, how long each took from posting to
// completion (a histogram), and failures by status code. Engine::metrics()
// returns a snapshot; prometheus_text() writes it in Prometheus' text
// exposition format (docs/metrics.md lists the names).
//
// Counted on the thread that finishes a transfer, into per-thread shards:
// no counter is shared by two threads on the hot path.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ferry {

// One operation on one transport ("tcp", "local").
struct TransferCounts {
  uint64_t succeeded = 0;
  uint64_t failed = 0;
  uint64_t bytes = 0;      // moved by the transfers that succeeded
  double seconds_sum = 0;  // posting to completion, every transfer
  // Transfers that took at most latency_bounds()[i] seconds (cumulative,
  // as Prometheus' buckets; the last bound is +Inf: all of them).
  std::vector<uint64_t> within;
};

// One peer's transfers of one operation.
struct PeerCounts {
  uint64_t succeeded = 0;
  uint64_t failed = 0;
  uint64_t bytes = 0;  // moved by the transfers that succeeded
};

// What one NIC's data streams carried, each way.
struct NicBytes {
  uint64_t sent = 0;
  uint64_t received = 0;
};

// GPU bytes that went through pinned staging slots on one side of a TCP
// connection: chunks, their staged bytes, and the time from queuing a
// chunk's copies to ferry seeing them done.
struct ResentCounts {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
};

struct StagingCounts {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

struct MetricsSnapshot {
  // The histogram's upper bounds, seconds: 1 us to 10 s in steps of 1, 2.5,
  // 5 a decade, then +Inf.
  static const std::vector<double>& latency_bounds();

  // By (operation, transport): operation is "send", "recv", "write",
  // "read", "write_blocks" or "notify". Pairs that never ran are absent.
  std::map<std::pair<std::string, std::string>, TransferCounts> transfers;
  // By (peer, operation), over the connections the engine holds now: the
  // peer is its address as the connection's control stream sees it
  // ("ip:port"); a connection's counts leave with it.
  std::map<std::pair<std::string, std::string>, PeerCounts> peers;
  // Bytes the TCP data streams carried, by local NIC ("any" for streams on
  // no named NIC), since the engine started: frames' payloads, sent once
  // written to the socket (a moment after the write they carry may have
  // finished), received as their frames arrive.
  std::map<std::string, NicBytes> nics;
  // GPU memory staged through pinned host slots over TCP, by direction:
  // "to_host" (a sent chunk, copied from the GPU into a slot) and
  // "to_device" (a received one, copied on from its slot). Absent while
  // none was.
  std::map<std::string, StagingCounts> staging;
  // Failed transfers by status code name ("peer_lost", "deadline_exceeded", ...).
  std::map<std::string, uint64_t> failures;
  // Connections the engine holds, by transport, and those of them failed.
  std::map<std::string, uint64_t> connections;
  std::map<std::string, uint64_t> connections_failed;
  // CUDA streams, events and page-locked blocks that ferry's transfer
  // threads had to make themselves. Connection::stream_wait makes them first,
  // on the caller's thread, since such a call on a transfer thread can wait
  // for the very stream that waits for the transfer: after stream waits, a
  // count that grows says that happened anyway. Counted with metrics off too.
  uint64_t gpu_objects_made_late = 0;
  // Incoming handshakes refused or dropped, by reason: the status code's
  // name ("unauthenticated", "deadline_exceeded", ...) or "busy" (closed
  // unread past max_handshakes).
  std::map<std::string, uint64_t> handshakes_refused;
  // Data paths lost (a reset, a timeout, a failed send; not an orderly
  // close), by transport.
  std::map<std::string, uint64_t> paths_lost;
  // Chunks a lost path had sent and the peer had not confirmed, sent again
  // on another path, and their bytes, by transport. Absent while none was.
  std::map<std::string, ResentCounts> resent;
  // Bytes the engine holds for its peers now (unreceived messages, unpolled
  // notifications, unread replies: against connection_memory_bytes and
  // engine_memory_bytes), and the most it ever held at once.
  uint64_t held_bytes = 0;
  uint64_t held_bytes_peak = 0;
};

// The snapshot in Prometheus' text exposition format (version 0.0.4).
std::string prometheus_text(const MetricsSnapshot& m);

}  // namespace ferry
