// Engine options and the registry of tunables.
//
// Options come from code first; each field can then be overridden by its
// FERRY_* environment variable (Engine::create applies them). Every tunable is
// declared once, with its variable, default, unit and meaning, in
// src/engine/tunables.cc; `ferry config` prints that table.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry {

enum class LogLevel : uint8_t { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Options::transport: which transport carries a connection. The comment
// after each value gives its name, as FERRY_TRANSPORT, `ferry config` and
// Python spell it.
enum class TransportChoice : uint8_t {
  kAuto = 0,   // "auto": the local transport for peers on this host, TCP otherwise
  kTcp = 1,    // "tcp": always TCP
  kLocal = 2,  // "local": the local transport; peers on other hosts are refused
};

// Options::nic_policy: which paths a bulk transfer uses.
enum class NicPolicy : uint8_t {
  kNearest = 0,  // "nearest": the paths whose NIC is on the NUMA node of the
                 // transfer's memory when there are any, else every path
  kAll = 1,      // "all": every path
};

// Options::path_policy: how many of a connection's paths carry its transfers.
enum class PathPolicy : uint8_t {
  kAdaptive = 0,  // "adaptive": as many as the host's CPUs can drive (Options::path_policy)
  kAll = 1,       // "all": every path, always
};

// Options::staging_copy: what copies GPU memory to and from the pinned host
// slots it rides TCP through, and a batch of small GPU blocks on the local
// transport.
enum class StagingCopy : uint8_t {
  kKernel = 0,      // "kernel": a copy kernel on a few of the GPU's SMs
  kCopyEngine = 1,  // "engine": the GPU's copy engines; every SM stays the application's
};

// The lower-case name of a value ("auto", "nearest", "engine", ...), as the
// FERRY_* variables, `ferry config` and Python spell it; empty for a value
// outside the enum (only a cast makes one, and validate refuses it). The view
// points at a string literal.
std::string_view to_string(TransportChoice choice);
std::string_view to_string(NicPolicy policy);
std::string_view to_string(PathPolicy policy);
std::string_view to_string(StagingCopy copy);

// The value whose name (exactly, lower case) is `name`; the inverse of
// to_string. Any other name is kInvalidArgument naming the field and the
// names it takes, e.g. `transport must be auto, tcp or local, got "udp"`.
//
// Example:
//   ferry::Result<ferry::TransportChoice> t = ferry::parse_transport("tcp");
//   if (t.ok()) options.transport = *t;
Result<TransportChoice> parse_transport(std::string_view name);
Result<NicPolicy> parse_nic_policy(std::string_view name);
Result<PathPolicy> parse_path_policy(std::string_view name);
Result<StagingCopy> parse_staging_copy(std::string_view name);

// Options::streams: let the engine choose by the CPUs it may use.
inline constexpr int kAutoStreams = 0;

struct Options {
  // host:port to listen on; port 0 picks a free port. The default reaches
  // only this host. A wildcard ("0.0.0.0:0") listens on every address and
  // publishes (Engine::address, metadata, directory entry) the address of
  // every interface that is up and not loopback, fastest first, so peers on
  // other hosts can dial it; 127.0.0.1 only when there is no other.
  std::string listen = "127.0.0.1:0";
  // NICs to serve and move data on, comma-separated interface names
  // ("eth1,eth2"). Empty: only the `listen` address. When set, the engine
  // listens on every address (0.0.0.0 unless `listen` names a host other than
  // 127.0.0.1), advertises each NIC's address to peers, and opens data
  // streams on each pair of NICs that can reach each other. `listen` must
  // then name 127.0.0.1, a wildcard (0.0.0.0, ::) or the NICs' one shared
  // address: Engine::create refuses a host it would not listen on for every
  // NIC it advertises.
  std::string nics;
  // CPUs for each NIC's transmit and receive workers, in NCCL's format
  // ("eth1:8-21,112-125;eth2:..."). Empty: NCCL_GPUDIRECTTCPX_TX/RX_BINDINGS
  // if set, else the NIC's NUMA node split in two: TX workers on the first
  // half of its cores, RX workers on the second.
  std::string tx_bindings;
  std::string rx_bindings;
  // Worker threads per NIC and direction that serve the TCP transport's
  // streams (ferry-rx-<nic>-<i>, ferry-tx-<nic>-<i>), 1..64; they take turns
  // on the NIC's bound CPUs. 0 (auto): one per stream a connection opens
  // by default (auto_streams), at most the NIC's bound CPUs. A
  // stream's worker copies its bytes: with fewer workers than streams the
  // workers cap the rate (GPU memory over loopback, 16 streams, two H200:
  // 17 GB/s with 4 workers, 40-44 with 16). What ferry.p2p's
  // Endpoint(num_cpus=N) sets, as UCCL's num_cpus counts threads.
  int workers = 0;
  // kNearest ("nearest"): a transfer uses the paths whose NIC is on the NUMA
  // node of its memory when there are any; kAll ("all"): every path.
  NicPolicy nic_policy = NicPolicy::kNearest;
  // kAdaptive ("adaptive"): a connection whose paths (a reader and a writer each)
  // outnumber the cores starts on one path and doubles the count while the
  // host's CPUs are under half busy (or mostly busy with other work); while
  // it saturates them itself it keeps fewer paths only when fewer measure
  // faster (links faster than the CPU gain nothing from more threads). With
  // cores to spare, every path. kAll ("all"): every path, always.
  PathPolicy path_policy = PathPolicy::kAdaptive;
  // Data streams (paths) per NIC pair, besides the control stream; each
  // costs a descriptor an end (the engine's workers serve it). 0 (auto): auto_streams() paths in all, dealt
  // round-robin over the NIC pairs (at least one each), within what
  // max_streams leaves. Over loopback or fast NICs a stream is bound by the
  // CPU that copies its bytes, so more cores carry more streams: on the
  // two-H200 host 2 streams moved 7-9 GB/s of GPU memory, 16 streams 37-46.
  int streams = kAutoStreams;
  // Bulk transfers are cut into chunks of this many bytes.
  size_t chunk_bytes = 512 * 1024;
  // Chunks a path may have sent that the peer has not yet confirmed landing.
  int window = 16;
  // GPU memory rides TCP through pinned host slots: each path stages up to
  // this many chunks ahead in each direction (device->host copies run ahead of
  // the socket; host->device copies follow arrival). Slots are allocated only
  // on paths that move GPU memory: at most staging_depth x
  // staging_chunk_bytes per path and direction.
  int staging_depth = 2;
  // Transfers that touch GPU memory travel in chunks of this size (also the
  // size of a staging slot).
  size_t staging_chunk_bytes = 1024 * 1024;
  // What runs staging copies: kKernel ("kernel"), a copy kernel on a few of
  // the GPU's SMs (faster, and fair among the paths, on the two-H200 host),
  // or kCopyEngine ("engine"), the copy engines (leaves every SM to the
  // application). Copies the kernel cannot do (addresses or sizes not
  // multiples of 16 bytes) use the engines either way. On the local
  // transport, kKernel also moves a batch of small blocks between GPUs
  // (write_blocks, writev) with one gather kernel launch where the engines
  // would take one copy per block.
  StagingCopy staging_copy = StagingCopy::kKernel;
  // Local transport, batches of GPU blocks (write_blocks between pools):
  // with kKernel, keep the gather kernel resident on the GPU this long after
  // its last batch, fed through pinned host memory, so that a batch costs no
  // launch (about 4 us less a batch on the two-H200 host). While it lingers
  // it holds 32 blocks of 256 threads, one an SM, away from the
  // application's kernels. 0: launched for each batch.
  std::chrono::microseconds gather_linger{0};
  // GPU memory sent over TCP: the socket borrows the pages of a staged chunk
  // that fills its slot (vmsplice and splice) instead of the CPU copying them
  // into the socket, and the slot is reused only once the peer confirmed the
  // chunk landed; smaller chunks are copied. A sending path then holds up to
  // twice staging_depth slots. Over loopback the receiver reads the slot
  // itself: one CPU copy a byte instead of two. false: copied into the
  // socket, as host memory is.
  bool staging_lend_pages = true;
  // Messages and writes up to this size ride inline on the control stream.
  size_t inline_max = 64 * 1024;
  // The most inline_max may be; a peer's inline message larger than this is
  // refused as malformed.
  static constexpr size_t kMaxInline = 1024 * 1024;
  // Shared secret; empty means no authentication.
  std::string auth_token;
  // Count transfers for Engine::metrics() (two clock reads and a few
  // uncontended atomic adds a transfer).
  bool metrics = true;
  // Where to serve metrics() to Prometheus over HTTP (GET /metrics):
  // "host:port", or ":port"/"port" for loopback; port 0 picks one
  // (Engine::metrics_address). Empty: nothing listens. The numbers are all
  // it tells: bind it where only scrapers reach.
  std::string metrics_listen;
  // A heartbeat goes out after this long without other control traffic.
  // Over TCP with a peer of this release, only while something of the
  // connection waits on the peer: an idle connection sends nothing.
  std::chrono::milliseconds heartbeat_interval{500};
  // Transfer::wait() polls this long before it sleeps; 0 lets the transport
  // choose: 50 us over TCP (whose worker threads need the cores), 10 ms on
  // the local transport, whose progress thread polls while copies run
  // anyway. Measured on the two-GPU host: a waiter that slept through a
  // 1 GiB GPU copy woke 80-200 us late.
  std::chrono::microseconds wait_spin{0};
  // A peer silent for this long is declared lost; its transfers fail.
  std::chrono::milliseconds peer_timeout{5000};
  // A data stream whose sent bytes stay unacknowledged by TCP this long is
  // declared dead (TCP_USER_TIMEOUT); its unconfirmed chunks move to the
  // surviving paths.
  std::chrono::milliseconds path_timeout{2000};
  // A connection whose handshake takes longer is dropped.
  std::chrono::milliseconds handshake_timeout{5000};
  // Kernel socket buffer size per stream in bytes; 0 leaves the kernel's autotuning.
  size_t socket_buffer_bytes = 0;
  // kAuto ("auto": the local transport for peers on this host, TCP
  // otherwise), kTcp ("tcp": always TCP) or kLocal ("local": refuse peers on
  // other hosts).
  TransportChoice transport = TransportChoice::kAuto;
  // The process's log level (FERRY_LOG, in any case); lines and where they
  // go: ferry/log.h. A level other than kWarn, or FERRY_LOG, set at
  // Engine::create applies to every engine of the process.
  LogLevel log_level = LogLevel::kWarn;

  // ---- the directory: engines find each other by name (docs/directory.md) ----
  // "redis://[user:password@]host:port[/namespace]" or
  // "etcd://host:port[,host:port...][/namespace]"; empty: no directory (peers
  // connect by host:port or metadata blob). With one, the engine publishes
  // itself under `name` while it lives, and connect("NAME") resolves names.
  std::string directory;
  // The name this engine publishes; empty: "<hostname>-<pid>". 1 to 128
  // bytes of [A-Za-z0-9._-].
  std::string name;
  // An engine's entry lives this long unless refreshed (every third of it);
  // an engine that dies vanishes within it. etcd rounds up to whole seconds.
  std::chrono::milliseconds directory_ttl{5000};

  // ---- limits on what a peer can make the engine hold (docs/security.md) ----
  // Connections (accepted, dialed or waiting in the accept queue) the engine
  // holds at once; one more is refused with kResourceExhausted. A connection
  // costs no thread (the engine's workers serve every stream): its memory
  // and its descriptors (1 + its data streams; raise RLIMIT_NOFILE, often
  // 1,024, to hold thousands).
  int max_connections = 4096;
  // Handshakes in progress at once (streams read before their peer is
  // admitted); one peer address may hold at most half of them, rounded up
  // (at least 1). A stream past either cap waits briefly for a handshake to
  // end, then is closed unread.
  int max_handshakes = 16;
  // Connections one peer address may hold at once.
  int max_connections_per_peer = 64;
  // Data streams the engine holds over all its connections (each costs a
  // descriptor and its socket buffers, no thread); a handshake that would
  // pass it is refused. 4,096 connections of 2 streams fit twice over.
  int max_streams = 16384;
  // Bytes a connection may hold on behalf of its peer (messages nobody has
  // posted a receive for, notifications not yet polled, replies the peer does
  // not read); past it the connection fails with kResourceExhausted.
  size_t connection_memory_bytes = 256u << 20;
  // Bytes all connections together may hold on behalf of their peers (each
  // within connection_memory_bytes); a connection whose peer would pass it
  // fails with kResourceExhausted, so a few flooding peers cannot grow the
  // engine by max_connections times connection_memory_bytes.
  size_t engine_memory_bytes = size_t{1} << 30;
  // Same-host peers of another uid may use the local transport (by default
  // they are refused: the local transport trusts the kernel's same-uid rules).
  bool local_other_uids = false;
  // An engine may be its own peer on the local transport. Two engines of
  // this one process use it between them without this: the kernel says the
  // peer is this process and the handshake proves it is another engine
  // (another id), so it shares this address space. An engine that dials
  // itself is refused unless this is set.
  bool local_same_process = false;
};

// One tunable as `ferry config` shows it.
struct TunableInfo {
  std::string name;  // "streams"
  std::string env;   // "FERRY_STREAMS"
  std::string default_value;
  std::string value;  // the value in the Options it was described from
  std::string unit;   // "bytes", "ms", "count", ""
  std::string doc;
};

// Returns `base` with every FERRY_* variable set in the environment applied.
// A malformed value is kInvalidArgument naming the variable and the value.
Result<Options> apply_environment(Options base);

// Checks ranges (streams 0..64, chunk >= 4 KiB, ...). kInvalidArgument names the field.
Status validate(const Options& options);

// The data streams a connection of an engine with streams = kAutoStreams
// opens in all when it dials from a thread that may run on `cpus` CPUs:
// half of them (a stream keeps about a core busy at full rate), 2 to 16.
int auto_streams(int cpus);

// FERRY_* variables set in this process's environment that ferry does not
// read (a typo such as FERRY_STREAMZ), sorted. FERRY_TEST_* are the test
// suites' own and not listed.
std::vector<std::string> unknown_environment();

// The registry of tunables, with their values in `options`.
std::vector<TunableInfo> describe_tunables(const Options& options);

}  // namespace ferry
