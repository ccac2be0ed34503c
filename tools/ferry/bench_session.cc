// Benchmark sessions: what initiator and target do over the ferry connection.
#include "ferry/bench_session.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <thread>

#include "core/pattern.h"
#include "ferry/bench_blocks.h"
#include "ferry/bench_process_stats.h"
#include "ferry/bench_sizes.h"
#include "gpu/cuda_driver.h"

namespace ferry::cli {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kOpTimeout = 120s;
// A target's session must send its configuration within kStartLimit of being
// accepted, and its first "begin" within kStartLimit, plus kStartPerGiB for
// each GiB of its buffers (what an honest initiator takes to allocate and
// fill its own), of the target's descriptors. Otherwise a connection that
// does nothing but stay alive (an engine heartbeats by itself) holds one of
// the target's sessions, and its memory, for kOpTimeout.
constexpr auto kStartLimit = 5s;
constexpr auto kStartPerGiB = 2s;
// How long a target waits for an initiator to take the reason of a refusal.
constexpr auto kReplyTimeout = 5s;
constexpr size_t kControlBytes = 64 * 1024;
constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

uint64_t add_sat(uint64_t a, uint64_t b) { return a > kNoLimit - b ? kNoLimit : a + b; }
uint64_t mul_sat(uint64_t a, uint64_t b) { return b != 0 && a > kNoLimit / b ? kNoLimit : a * b; }
uint64_t page_up(uint64_t n) { return n > kNoLimit - 4095 ? kNoLimit : (n + 4095) & ~uint64_t{4095}; }

// "11.4 GiB": a limit or a request, readable whatever its size.
std::string human_bytes(uint64_t n) {
  static const char* const kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 " bytes", n);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

// Bytes the kernel says it can hand out without swapping; 0 when unknown.
uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return mul_sat(kib, 1024);
  }
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? mul_sat(static_cast<uint64_t>(pages), static_cast<uint64_t>(page)) : 0;
}

json to_json(const RunConfig& c) {
  return json{
      {"op", c.op},       {"sizes", c.sizes},   {"iters", c.iters},  {"warmup", c.warmup}, {"inflight", c.inflight},
      {"bidir", c.bidir}, {"verify", c.verify}, {"gpu", c.peer_gpu}, {"group", c.group},   {"footprint", c.footprint},
      {"blocks", c.blocks}, {"block_bytes", c.block_bytes}, {"scatter", c.scatter}};
}

Status bad_config(const std::string& what) { return Status(Code::kInvalidArgument, "session configuration: " + what); }

// An integer field of `j` in [lo, hi]; `fallback` where it is optional and absent.
Status get_int(const json& j, const char* name, int64_t lo, int64_t hi, std::optional<int64_t> fallback, int& out) {
  auto it = j.find(name);
  if (it == j.end()) {
    if (!fallback) return bad_config(std::string(name) + " is missing");
    out = static_cast<int>(*fallback);
    return Status();
  }
  std::string range = "; it must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  int64_t v = 0;
  if (it->is_number_unsigned()) {
    uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return bad_config(std::string(name) + " is " + std::to_string(u) + range);
    v = static_cast<int64_t>(u);
  } else if (it->is_number_integer()) {
    v = it->get<int64_t>();
  } else {
    return bad_config(std::string(name) + " must be an integer");
  }
  if (v < lo || v > hi) return bad_config(std::string(name) + " is " + std::to_string(v) + range);
  out = static_cast<int>(v);
  return Status();
}

// A byte count: a JSON integer from 0 to 2^64 - 1.
Status get_bytes(const json& v, const std::string& name, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return Status();
  }
  if (v.is_number_integer()) return bad_config(name + " is negative");
  return bad_config(name + " must be a whole number of bytes below 2^64");
}

Status get_bool(const json& j, const char* name, bool& out) {
  auto it = j.find(name);
  if (it == j.end()) return bad_config(std::string(name) + " is missing");
  if (!it->is_boolean()) return bad_config(std::string(name) + " must be true or false");
  out = it->get<bool>();
  return Status();
}

using core::fill_random;
using core::fnv1a;

platform::cu::DevicePtr dptr(const void* p) {
  return static_cast<platform::cu::DevicePtr>(reinterpret_cast<uintptr_t>(p));
}

// One side's memory: [src | dst | control] in host memory, registered once,
// page aligned; or, on a GPU, [src | dst] in device memory and the control
// slice in host memory. src and dst span the largest size, or the
// footprint where that is larger (RunConfig::footprint). Whoever allocates
// it has checked the size against a MemoryBudget (host_bytes).
struct Buffers {
  Engine* engine = nullptr;
  uint8_t* base = nullptr;    // host memory
  uint8_t* device = nullptr;  // GPU memory (src, dst) or null
  size_t max = 0;             // bytes of src, and of dst
  bool rotate = false;        // operations take turns through slots of src and dst
  int gpu = -1;
  Region region, device_region;
  bool registered = false, device_registered = false;
  uint8_t* src() const { return device != nullptr ? device : base; }
  uint8_t* dst() const { return src() + max; }
  uint8_t* ctl() const { return device != nullptr ? base : base + 2 * max; }

  // Where operation `i` of `size` bytes starts in src and in dst (and in the
  // peer's, which has the same span).
  size_t at(int i, uint64_t size) const {
    return rotate ? static_cast<size_t>(rotating_offset(static_cast<uint64_t>(i), size, max)) : 0;
  }

  explicit Buffers(Engine* e) : engine(e) {}
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  // Allocates and registers the memory; on failure, what was made is undone
  // by the destructor.
  Status allocate(uint64_t max_size, int on_gpu = -1, uint64_t footprint = 0) {
    max = std::max<uint64_t>({max_size, footprint, 1});
    rotate = footprint > 0;
    gpu = on_gpu;
    size_t total = page_up((gpu >= 0 ? 0 : 2 * max) + kControlBytes);
    base = static_cast<uint8_t*>(std::aligned_alloc(4096, total));
    if (base == nullptr) {
      return Status(Code::kResourceExhausted, "cannot allocate " + human_bytes(total) + " of host memory");
    }
    std::memset(base, 0, total);
    FERRY_ASSIGN_OR_RETURN(region, engine->reg(base, total));
    registered = true;
    if (gpu < 0) return Status();
    const platform::CudaDriver& d = platform::cuda();
    FERRY_RETURN_IF_ERROR(platform::use_device(gpu).with_context("GPU " + std::to_string(gpu)));
    platform::cu::DevicePtr p = 0;
    FERRY_RETURN_IF_ERROR(d.check(d.mem_alloc(&p, 2 * max), "cuMemAlloc", Code::kResourceExhausted)
                              .with_context(human_bytes(2 * max) + " on GPU " + std::to_string(gpu)));
    device = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(p));
    FERRY_ASSIGN_OR_RETURN(device_region, engine->reg(device, 2 * max));
    device_registered = true;
    return Status();
  }
  ~Buffers() {
    // dereg returns once no bytes land in the memory any more; only then is it freed.
    if (registered) (void)engine->dereg(region);
    std::free(base);
    if (device != nullptr) {
      if (device_registered) (void)engine->dereg(device_region);
      (void)platform::use_device(gpu);
      platform::cuda().mem_free(dptr(device));
    }
  }

  // Host bytes into / out of [p, p+n) of src or dst, wherever they live.
  Status put(uint8_t* p, const uint8_t* from, size_t n) const {
    if (device == nullptr) {
      std::memcpy(p, from, n);
      return Status();
    }
    FERRY_RETURN_IF_ERROR(platform::use_device(gpu));
    return platform::cuda().check(platform::cuda().memcpy(dptr(p), dptr(from), n), "cuMemcpy to the GPU");
  }
  Status get(const uint8_t* p, uint8_t* to, size_t n) const {
    if (device == nullptr) {
      std::memcpy(to, p, n);
      return Status();
    }
    FERRY_RETURN_IF_ERROR(platform::use_device(gpu));
    return platform::cuda().check(platform::cuda().memcpy(dptr(to), dptr(p), n), "cuMemcpy from the GPU");
  }
};

// Random bytes into [at, at+n) of src.
Status fill_src(const Buffers& b, size_t at, size_t n, uint64_t seed) {
  if (b.device == nullptr) {
    fill_random(b.src() + at, n, seed);
    return Status();
  }
  std::vector<uint8_t> tmp(n);
  fill_random(tmp.data(), n, seed);
  return b.put(b.src() + at, tmp.data(), n);
}

Result<uint64_t> hash_of(const Buffers& b, const uint8_t* p, size_t n) {
  if (b.device == nullptr) return fnv1a(p, n);
  std::vector<uint8_t> tmp(n);
  FERRY_RETURN_IF_ERROR(b.get(p, tmp.data(), n));
  return fnv1a(tmp.data(), n);
}

// Control messages travel through the control slice, as ferry messages.
Status send_text(Connection& c, const Buffers& b, const std::string& text, Clock::duration timeout = kOpTimeout) {
  if (text.size() > kControlBytes) {
    return Status(Code::kInvalidArgument,
                  "control message of " + std::to_string(text.size()) + " bytes exceeds " + human_bytes(kControlBytes));
  }
  std::memcpy(b.ctl(), text.data(), text.size());
  return c.send(b.ctl(), text.size(), after(timeout)).with_context("send control message");
}

// The next control message, by `by` and at most kOpTimeout from now.
Result<std::string> recv_text(Connection& c, const Buffers& b, Deadline by = kNoDeadline) {
  auto n = c.recv(b.ctl(), kControlBytes, std::min(by, after(kOpTimeout)));
  if (!n.ok()) return n.status().with_context("receive control message");
  return std::string(reinterpret_cast<const char*>(b.ctl()), *n);
}

// A session's start limit (`limit`) passed while the target waited for
// `what`: said so (the target logs it); any other failure as it is.
Status unless_started(const Status& s, Clock::duration limit, const std::string& what) {
  if (s.code() != Code::kDeadlineExceeded) return s;
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(limit).count();
  return Status(Code::kDeadlineExceeded, "the session did not start within " + std::to_string(secs) + " s: no " + what +
                                             " by then (a session that stays idle is closed, so that it "
                                             "holds none of the target's sessions)");
}

// "expected begin 4096, got 11 other bytes": what a peer sent is not quoted.
Status unexpected(const std::string& want, const std::string& got) {
  return Status(Code::kDataLoss,
                "protocol: expected \"" + want + "\", got " + std::to_string(got.size()) + " other bytes");
}

struct Descriptors {
  RemoteDescriptor src, dst;
  // --blocks, initiator: operation i writes batches[i % kBlockLayouts]
  // between the prepared pools (this side's src, the target's dst).
  BlockPools pools;
  std::vector<std::vector<Block>> batches;
};

std::string encode(const Descriptors& d) { return d.src.serialize() + d.dst.serialize(); }

// The peer's descriptors, which must cover `span` bytes each.
Result<Descriptors> decode(const std::string& s, uint64_t span) {
  if (s.size() != 96) {
    return Status(Code::kDataLoss, "descriptors: expected 96 bytes, got " + std::to_string(s.size()));
  }
  FERRY_ASSIGN_OR_RETURN(RemoteDescriptor src, RemoteDescriptor::parse(s.substr(0, 48)));
  FERRY_ASSIGN_OR_RETURN(RemoteDescriptor dst, RemoteDescriptor::parse(s.substr(48)));
  if (src.length < span || dst.length < span) {
    return Status(Code::kDataLoss, "descriptors: the peer exported " +
                                       std::to_string(std::min(src.length, dst.length)) +
                                       " bytes where the session needs " + std::to_string(span));
  }
  return Descriptors{src, dst, {}, {}};
}

Result<Descriptors> export_buffers(Engine& e, const Buffers& b) {
  // src and dst live in the GPU region when the buffers are on a GPU.
  const Region& r = b.device != nullptr ? b.device_region : b.region;
  FERRY_ASSIGN_OR_RETURN(RemoteDescriptor src, e.export_region(r, 0, b.max));
  FERRY_ASSIGN_OR_RETURN(RemoteDescriptor dst, e.export_region(r, b.max, b.max));
  return Descriptors{src, dst, {}, {}};
}

// Posts operation `i` of the directional workload of `op` (send, write or
// read) from this side.
Transfer post(Connection& c, const Buffers& b, const Descriptors& remote, const std::string& op, uint64_t size, int i) {
  if (!remote.batches.empty()) {
    return c.write_blocks_async(remote.pools, remote.batches[static_cast<size_t>(i) % remote.batches.size()]);
  }
  size_t at = b.at(i, size);
  if (op == "send") return c.send_async(b.src() + at, size);
  if (op == "write") return c.write_async(b.src() + at, size, remote.dst, at, {});
  return c.read_async(b.dst() + at, size, remote.src, at);
}

// Runs operations `first` to `first + count - 1` of the directional workload
// of `op` from this side (the initiator's forward direction, or the target's
// reverse one in --bidir), up to `inflight` at a time. Fills `lat_ns` with
// each operation's posting-to-completion time. Stops at the first failure.
Status drive(Connection& c, const Buffers& b, const Descriptors& remote, const std::string& op, uint64_t size,
             int first, int count, int inflight, std::vector<int64_t>* lat_ns) {
  struct Posted {
    Transfer t;
    Clock::time_point at;
  };
  std::deque<Posted> posted;
  std::string what = op + " of " + std::to_string(size) + " bytes";
  auto finish_oldest = [&]() -> Status {
    Status s = posted.front().t.wait(after(kOpTimeout));
    auto done = Clock::now();
    FERRY_RETURN_IF_ERROR(s.with_context(what));
    if (lat_ns != nullptr) {
      lat_ns->push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(done - posted.front().at).count());
    }
    posted.pop_front();
    return Status();
  };
  for (int i = first; i < first + count; ++i) {
    if (op == "pingpong") {
      size_t at = b.at(i, size);
      auto t0 = Clock::now();
      Status s = c.send(b.src() + at, size, after(kOpTimeout));
      if (s.ok()) s = c.recv(b.dst() + at, size, after(kOpTimeout)).status();
      auto t1 = Clock::now();
      FERRY_RETURN_IF_ERROR(s.with_context(what));
      if (lat_ns != nullptr) lat_ns->push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
      continue;
    }
    if (static_cast<int>(posted.size()) == inflight) FERRY_RETURN_IF_ERROR(finish_oldest());
    auto t0 = Clock::now();
    posted.push_back(Posted{post(c, b, remote, op, size, i), t0});
  }
  while (!posted.empty()) FERRY_RETURN_IF_ERROR(finish_oldest());
  return Status();
}

// The passive half of `op` for `count` operations: receives for send, echoes
// for pingpong, nothing for one-sided ops. Stops at the first failure.
Status serve_passive(Connection& c, const Buffers& b, const std::string& op, uint64_t size, int count, int inflight) {
  if (op == "write" || op == "read") return Status();
  if (op == "pingpong") {
    for (int i = 0; i < count; ++i) {
      size_t at = b.at(i, size);
      auto n = c.recv(b.dst() + at, size, after(kOpTimeout));
      if (!n.ok()) return n.status().with_context("pingpong receive");
      FERRY_RETURN_IF_ERROR(c.send(b.dst() + at, *n, after(kOpTimeout)).with_context("pingpong echo"));
    }
    return Status();
  }
  // One receive more than the sender keeps in flight, so the next message
  // always finds one posted.
  const size_t depth = static_cast<size_t>(std::max(inflight, 1)) + 1;
  std::deque<Transfer> posted;
  int next = 0;
  while (next < count && posted.size() < depth) {
    posted.push_back(c.recv_async(b.dst() + b.at(next, size), size));
    ++next;
  }
  while (!posted.empty()) {
    FERRY_RETURN_IF_ERROR(
        posted.front().wait(after(kOpTimeout)).with_context("receive of " + std::to_string(size) + " bytes"));
    posted.pop_front();
    if (next < count) {
      posted.push_back(c.recv_async(b.dst() + b.at(next, size), size));
      ++next;
    }
  }
  return Status();
}

// Runs `fn` on `t`; a thread the system cannot start is a status, not an abort.
template <typename Fn>
Status start(std::thread& t, Fn&& fn) {
  try {
    t = std::thread(std::forward<Fn>(fn));
  } catch (const std::system_error& e) {
    return Status(Code::kResourceExhausted, std::string("cannot start a thread: ") + e.what());
  }
  return Status();
}

// Checksums of src and dst where the last of `count` operations put its bytes.
// --blocks: the hashes of the last operation's blocks, gathered in order,
// from src (as the initiator read them) and from dst (as the target got them).
Result<std::string> block_checksums(const Buffers& b, const RunConfig& cfg, int count) {
  std::vector<uint8_t> src, dst, block(cfg.block_bytes);
  for (const BlockPlace& p : block_layout(cfg.blocks, cfg.block_bytes, cfg.scatter, count - 1)) {
    FERRY_RETURN_IF_ERROR(b.get(b.src() + p.src, block.data(), block.size()));
    src.insert(src.end(), block.begin(), block.end());
    FERRY_RETURN_IF_ERROR(b.get(b.dst() + p.dst, block.data(), block.size()));
    dst.insert(dst.end(), block.begin(), block.end());
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64 " %016" PRIx64, fnv1a(src.data(), src.size()),
                fnv1a(dst.data(), dst.size()));
  return std::string(buf);
}

Result<std::string> checksums(const Buffers& b, const RunConfig& cfg, uint64_t size, int count) {
  if (cfg.blocks > 0) return block_checksums(b, cfg, count);
  size_t at = b.at(count - 1, size);
  FERRY_ASSIGN_OR_RETURN(uint64_t src, hash_of(b, b.src() + at, size));
  FERRY_ASSIGN_OR_RETURN(uint64_t dst, hash_of(b, b.dst() + at, size));
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64 " %016" PRIx64, src, dst);
  return std::string(buf);
}

double percentile(std::vector<int64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return static_cast<double>(v[std::min(idx, v.size() - 1)]) / 1000.0;
}

// Bytes taken from a MemoryBudget for as long as this lives.
class Reservation {
 public:
  Reservation(MemoryBudget& budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
  ~Reservation() { budget_.release(bytes_); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  MemoryBudget& budget_;
  uint64_t bytes_;
};

// One size of an admitted session, target side.
// `begin_by`: when the first size's "begin" must have come (the start limit).
Status serve_size(Connection& c, const Buffers& b, const RunConfig& cfg, const Descriptors& remote, uint64_t size,
                  Deadline begin_by = kNoDeadline, Clock::duration start_limit = {}) {
  int count = cfg.warmup + cfg.iters;
  Result<std::string> got = recv_text(c, b, begin_by);
  if (!got.ok()) return unless_started(got.status(), start_limit, "\"begin\"");
  std::string begin = std::move(got).value();
  std::string want = "begin " + std::to_string(size);
  if (begin != want) return unexpected(want, begin);
  if (cfg.verify) FERRY_RETURN_IF_ERROR(fill_src(b, b.at(count - 1, size), size, size * 2 + 1));
  FERRY_RETURN_IF_ERROR(send_text(c, b, "ready"));
  Status reverse_status;
  std::thread reverse;
  if (cfg.bidir) {
    FERRY_RETURN_IF_ERROR(
        start(reverse, [&] { reverse_status = drive(c, b, remote, cfg.op, size, 0, count, cfg.inflight, nullptr); }));
  }
  Status passive = serve_passive(c, b, cfg.op, size, count, cfg.inflight);
  // Closing fails the reverse direction's operations too, so that the join
  // does not wait out their timeouts.
  if (!passive.ok()) c.close();
  if (reverse.joinable()) reverse.join();
  FERRY_RETURN_IF_ERROR(passive);
  FERRY_RETURN_IF_ERROR(reverse_status.with_context("reverse direction"));
  FERRY_ASSIGN_OR_RETURN(std::string end, recv_text(c, b));
  if (end != "end") return unexpected("end", end);
  FERRY_ASSIGN_OR_RETURN(std::string sums, checksums(b, cfg, size, count));
  return send_text(c, b, sums);
}

// An admitted session, target side, from the descriptors on.
Status serve_admitted(Engine& engine, Connection& c, const Buffers& boot, const RunConfig& cfg) {
  uint64_t max = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
  Buffers b(&engine);
  Status s = b.allocate(max, cfg.peer_gpu, cfg.footprint);
  Result<Descriptors> mine = s.ok() ? export_buffers(engine, b) : Result<Descriptors>(s);
  if (!mine.ok()) {
    (void)send_text(c, boot, "error: " + mine.status().to_string(), kReplyTimeout);
    return mine.status();
  }
  s = send_text(c, boot, encode(*mine));
  // The initiator now allocates and fills buffers as large as ours.
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  Clock::duration start_limit = kStartLimit + kStartPerGiB * static_cast<int64_t>((2 * b.max + kGiB - 1) / kGiB);
  Deadline begin_by = after(start_limit);
  Result<std::string> theirs = s.ok() ? recv_text(c, boot, begin_by) : Result<std::string>(s);
  if (!theirs.ok()) theirs = unless_started(theirs.status(), start_limit, "descriptors");
  Result<Descriptors> remote = theirs.ok() ? decode(*theirs, b.max) : Result<Descriptors>(theirs.status());
  s = remote.status();
  for (size_t i = 0; s.ok() && i < cfg.sizes.size(); ++i) {
    s = i == 0 ? serve_size(c, b, cfg, *remote, cfg.sizes[i], begin_by, start_limit)
               : serve_size(c, b, cfg, *remote, cfg.sizes[i]);
  }
  if (s.ok()) {
    auto bye = recv_text(c, boot);
    s = bye.status();
  }
  // Operations still pending fail now, before `b` goes away.
  if (!s.ok()) c.close();
  return s;
}

}  // namespace

MemoryBudget::MemoryBudget(uint64_t limit) : limit_(limit != 0 ? limit : available_memory() / 2) {}

Status MemoryBudget::reserve(uint64_t bytes, std::string_view what) {
  platform::MutexLock lock(mu_);
  if (bytes > limit_ || used_ > limit_ - bytes) {
    return Status(Code::kResourceExhausted,
                  std::string(what) + " need " + human_bytes(bytes) + " (" + std::to_string(bytes) +
                      " bytes) of host memory; at most " + human_bytes(limit_) + " may be held at once (" +
                      human_bytes(used_) + " in use; --max-memory, by default half the memory available at start)");
  }
  used_ += bytes;
  return Status();
}

void MemoryBudget::release(uint64_t bytes) {
  platform::MutexLock lock(mu_);
  used_ -= std::min(bytes, used_);
}

Status validate(const RunConfig& c) {
  if (c.op != "send" && c.op != "write" && c.op != "read" && c.op != "pingpong") {
    return Status(Code::kInvalidArgument, "op must be send, write, read or pingpong");
  }
  if (c.sizes.empty()) return Status(Code::kInvalidArgument, "sizes: the list is empty");
  for (uint64_t size : c.sizes) {
    if (size == 0) return Status(Code::kInvalidArgument, "sizes: 0 bytes; every size is 1 byte or more");
  }
  auto in = [](int v, int lo, int hi) { return v >= lo && v <= hi; };
  auto range = [](const char* name, int v, int lo, int hi) {
    return Status(Code::kInvalidArgument, std::string(name) + " is " + std::to_string(v) + "; it must be in [" +
                                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  if (!in(c.iters, 1, kMaxIters)) return range("iters", c.iters, 1, kMaxIters);
  if (!in(c.warmup, 0, kMaxIters)) return range("warmup", c.warmup, 0, kMaxIters);
  if (!in(c.inflight, 1, kMaxInflight)) return range("inflight", c.inflight, 1, kMaxInflight);
  if (c.op == "pingpong" && c.inflight != 1) {
    return Status(Code::kInvalidArgument, "op pingpong waits for each echo: inflight must be 1");
  }
  if (!in(c.gpu, -1, kMaxGpu)) return range("gpu", c.gpu, -1, kMaxGpu);
  if (!in(c.peer_gpu, -1, kMaxGpu)) return range("peer gpu", c.peer_gpu, -1, kMaxGpu);
  if (!in(c.group, 1, kMaxGroup)) return range("group", c.group, 1, kMaxGroup);
  if (c.blocks > 0) {
    if (c.op != "write") return Status(Code::kInvalidArgument, "blocks: a batch of blocks is a write (op write)");
    if (c.bidir) return Status(Code::kInvalidArgument, "blocks: one direction only (no bidir)");
    if (c.blocks > kMaxBlocks) {
      return Status(Code::kInvalidArgument, "blocks is " + std::to_string(c.blocks) + "; at most " +
                                                std::to_string(kMaxBlocks));
    }
    if (c.block_bytes == 0 || c.block_bytes > (uint64_t{1} << 30) / c.blocks) {
      return Status(Code::kInvalidArgument, "block_bytes is " + std::to_string(c.block_bytes) +
                                                "; blocks of 1 byte or more, at most 1 GiB in all");
    }
    if (c.sizes.size() != 1 || c.sizes[0] != c.blocks * c.block_bytes || c.footprint != 2 * c.sizes[0]) {
      return Status(Code::kInvalidArgument, "blocks: the size must be blocks x block_bytes and the footprint twice it");
    }
  } else if (c.block_bytes != 0 || c.scatter) {
    return Status(Code::kInvalidArgument, "block_bytes and scatter need blocks");
  }
  return Status();
}

Result<RunConfig> parse_config(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad_config("not valid JSON");
  if (!j.is_object()) return bad_config("not a JSON object");
  RunConfig c;
  auto op = j.find("op");
  if (op == j.end() || !op->is_string()) return bad_config("op must be a string");
  c.op = op->get<std::string>();
  auto sizes = j.find("sizes");
  if (sizes == j.end() || !sizes->is_array()) return bad_config("sizes must be a list of byte counts");
  for (size_t i = 0; i < sizes->size(); ++i) {
    uint64_t n = 0;
    FERRY_RETURN_IF_ERROR(get_bytes((*sizes)[i], "sizes[" + std::to_string(i) + "]", n));
    c.sizes.push_back(n);
  }
  FERRY_RETURN_IF_ERROR(get_int(j, "iters", 1, kMaxIters, std::nullopt, c.iters));
  FERRY_RETURN_IF_ERROR(get_int(j, "warmup", 0, kMaxIters, std::nullopt, c.warmup));
  FERRY_RETURN_IF_ERROR(get_int(j, "inflight", 1, kMaxInflight, 1, c.inflight));
  FERRY_RETURN_IF_ERROR(get_bool(j, "bidir", c.bidir));
  FERRY_RETURN_IF_ERROR(get_bool(j, "verify", c.verify));
  FERRY_RETURN_IF_ERROR(get_int(j, "gpu", -1, kMaxGpu, -1, c.peer_gpu));
  FERRY_RETURN_IF_ERROR(get_int(j, "group", 1, kMaxGroup, 1, c.group));
  if (auto f = j.find("footprint"); f != j.end()) FERRY_RETURN_IF_ERROR(get_bytes(*f, "footprint", c.footprint));
  if (auto f = j.find("blocks"); f != j.end()) FERRY_RETURN_IF_ERROR(get_bytes(*f, "blocks", c.blocks));
  if (auto f = j.find("block_bytes"); f != j.end()) FERRY_RETURN_IF_ERROR(get_bytes(*f, "block_bytes", c.block_bytes));
  if (j.contains("scatter")) FERRY_RETURN_IF_ERROR(get_bool(j, "scatter", c.scatter));
  Status v = validate(c);
  if (!v.ok()) return bad_config(v.message());
  return c;
}

uint64_t host_bytes(const RunConfig& cfg, int gpu) {
  uint64_t max = 1;
  for (uint64_t size : cfg.sizes) max = std::max(max, size);
  max = std::max(max, cfg.footprint);
  uint64_t boot = page_up(2 + kControlBytes);
  // On a GPU, --verify stages one size at a time through host memory.
  uint64_t main = gpu >= 0 ? add_sat(page_up(kControlBytes), cfg.verify ? max : 0)
                           : page_up(add_sat(mul_sat(2, max), kControlBytes));
  return add_sat(boot, main);
}

std::string printable(std::string_view text) {
  std::string out;
  for (char ch : text) {
    auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u < 0x7f) {
      out += ch;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    }
  }
  return out;
}

[[noreturn]] void die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "ferry bench: %s: %s\n", what.c_str(), printable(s.to_string()).c_str());
  std::exit(1);
}

Result<RunConfig> serve_session(Engine& engine, std::shared_ptr<Connection> conn, MemoryBudget& budget) {
  Deadline config_by = after(kStartLimit);
  Buffers boot(&engine);
  FERRY_RETURN_IF_ERROR(boot.allocate(1));
  Result<std::string> text = recv_text(*conn, boot, config_by);
  if (!text.ok()) return unless_started(text.status(), kStartLimit, "configuration");
  Result<RunConfig> cfg = parse_config(*text);
  uint64_t need = cfg.ok() ? host_bytes(*cfg, cfg->peer_gpu) : 0;
  Status admitted = cfg.ok() ? budget.reserve(need, "the session's buffers") : cfg.status();
  if (!admitted.ok()) {
    // An honest initiator prints the reason; one that never takes it costs kReplyTimeout.
    (void)send_text(*conn, boot, "error: " + admitted.to_string(), kReplyTimeout);
    return admitted;
  }
  Reservation held(budget, need);
  FERRY_RETURN_IF_ERROR(serve_admitted(engine, *conn, boot, *cfg));
  return cfg;
}

std::vector<SizeResult> run_initiator(Engine& engine, Connection& conn, const RunConfig& cfg) {
  must(validate(cfg), "configuration");
  std::shared_ptr<MemoryBudget> budget = cfg.budget != nullptr ? cfg.budget : std::make_shared<MemoryBudget>();
  uint64_t need = host_bytes(cfg, cfg.gpu);
  must(budget->reserve(need, "this side's buffers"), "buffers");
  Reservation held(*budget, need);
  Buffers boot(&engine);
  must(boot.allocate(1), "control buffer");
  must(send_text(conn, boot, to_json(cfg).dump()), "configuration");
  std::string reply = must(recv_text(conn, boot), "the target's descriptors");
  if (reply.rfind("error: ", 0) == 0) {
    std::fprintf(stderr, "ferry bench: the target refused the session: %s\n", printable(reply.substr(7)).c_str());
    std::exit(1);
  }
  uint64_t max = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
  Buffers b(&engine);
  must(b.allocate(max, cfg.gpu, cfg.footprint), "buffers");
  Descriptors remote = must(decode(reply, b.max), "the target's descriptors");
  // --blocks: the contiguous anchor writes through `plain`, the batches through `remote`.
  const Descriptors plain = remote;
  if (cfg.blocks > 0) {
    const Region& mine = b.device != nullptr ? b.device_region : b.region;
    const uint64_t src_at = static_cast<uint64_t>(b.src() - static_cast<uint8_t*>(mine.base));
    remote.pools = must(conn.prepare_blocks(std::span(&mine, 1), std::span(&remote.dst, 1)), "prepare the pools");
    for (int k = 0; k < kBlockLayouts; ++k) {
      std::vector<Block>& blocks = remote.batches.emplace_back();
      for (const BlockPlace& p : block_layout(cfg.blocks, cfg.block_bytes, cfg.scatter, k)) {
        blocks.push_back({0, 0, src_at + p.src, p.dst, cfg.block_bytes});
      }
    }
  }
  must(send_text(conn, boot, encode(must(export_buffers(engine, b), "export buffers"))), "descriptors");
  std::vector<SizeResult> results;
  int count = cfg.warmup + cfg.iters;
  size_t n = 0;
  for (uint64_t size : cfg.sizes) {
    if (cfg.stop != nullptr && cfg.stop->load()) break;
    ++n;
    if (cfg.verify) {
      must(cfg.blocks > 0 ? fill_src(b, 0, b.max, size * 2) : fill_src(b, b.at(count - 1, size), size, size * 2),
           "fill the source");
    }
    must(send_text(conn, b, "begin " + std::to_string(size)), "begin");
    std::string ready = must(recv_text(conn, b), "ready");
    if (ready != "ready") die("ready", unexpected("ready", ready));
    std::vector<int64_t> lat;
    lat.reserve(static_cast<size_t>(count));
    Status reverse_status;
    std::thread reverse;
    if (cfg.bidir) {
      must(start(reverse, [&] { reverse_status = serve_passive(conn, b, cfg.op, size, count, cfg.inflight); }),
           "reverse direction");
    }
    SizeResult contiguous{};
    if (cfg.blocks > 0) {
      must(drive(conn, b, plain, cfg.op, size, 0, cfg.warmup, cfg.inflight, nullptr), "contiguous warmup");
    }
    must(drive(conn, b, remote, cfg.op, size, 0, cfg.warmup, cfg.inflight, nullptr), "warmup");
    if (cfg.sync) cfg.sync();  // every GPU's session starts its timed phase together
    const uint64_t cpu0 = process_cpu_ns();
    const uint64_t peer_cpu0 = cfg.peer_cpu_ns ? cfg.peer_cpu_ns() : 0;
    auto t0 = Clock::now();
    double secs = 0;
    if (cfg.blocks > 0) {
      // The anchor: the same bytes as one contiguous write over the same
      // connection, in slices taken in turn with the batches', so that a
      // host whose speed wanders (a shared virtual machine's cores) slows
      // both alike. The last operation is a batch (what verify checks).
      std::vector<int64_t> anchor;
      double a_secs = 0;
      const int slices = std::min(kBlockSlices, cfg.iters);
      for (int k = 0; k < slices; ++k) {
        int lo = cfg.warmup + cfg.iters * k / slices, hi = cfg.warmup + cfg.iters * (k + 1) / slices;
        auto a0 = Clock::now();
        must(drive(conn, b, plain, cfg.op, size, lo, hi - lo, cfg.inflight, &anchor), "contiguous phase");
        auto a1 = Clock::now();
        must(drive(conn, b, remote, cfg.op, size, lo, hi - lo, cfg.inflight, &lat), "timed phase");
        a_secs += std::chrono::duration<double>(a1 - a0).count();
        secs += std::chrono::duration<double>(Clock::now() - a1).count();
      }
      contiguous.bytes_per_s = a_secs > 0 ? static_cast<double>(size) * cfg.iters / a_secs : 0;
      contiguous.p50_us = percentile(anchor, 0.5);
    } else {
      must(drive(conn, b, remote, cfg.op, size, cfg.warmup, cfg.iters, cfg.inflight, &lat), "timed phase");
    }
    if (reverse.joinable()) reverse.join();
    must(reverse_status, "reverse direction");
    auto t1 = Clock::now();
    const uint64_t cpu1 = process_cpu_ns();
    const uint64_t peer_cpu1 = cfg.peer_cpu_ns ? cfg.peer_cpu_ns() : 0;
    if (cfg.sync) cfg.sync();
    if (cfg.blocks == 0) secs = std::chrono::duration<double>(t1 - t0).count();
    must(send_text(conn, b, "end"), "end");
    std::string theirs = must(recv_text(conn, b), "the target's checksums");
    SizeResult r{size, cfg.iters, 0, percentile(lat, 0.5), percentile(lat, 0.99), "", t0, t1,
                 contiguous.bytes_per_s, contiguous.p50_us};
    r.cpu_us_per_op = static_cast<double>(cpu1 - cpu0) / 1e3 / cfg.iters;
    if (cfg.peer_cpu_ns) r.peer_cpu_us_per_op = static_cast<double>(peer_cpu1 - peer_cpu0) / 1e3 / cfg.iters;
    double moved = static_cast<double>(size) * cfg.iters * (cfg.bidir ? 2 : 1);
    if (cfg.op == "pingpong") moved *= 2;
    r.bytes_per_s = secs > 0 ? moved / secs : 0;
    if (cfg.verify) {
      char their_src[17] = {}, their_dst[17] = {};
      std::sscanf(theirs.c_str(), "%16s %16s", their_src, their_dst);
      std::string mine = must(checksums(b, cfg, size, count), "checksums");
      std::string my_src = mine.substr(0, 16), my_dst = mine.substr(17);
      bool ok = true;
      if (cfg.op == "read")
        ok = my_dst == their_src;
      else
        ok = their_dst == my_src;
      if (cfg.op == "pingpong") ok = ok && my_dst == my_src;
      if (cfg.bidir && cfg.op != "pingpong") ok = ok && (cfg.op == "read" ? their_dst == my_src : my_dst == their_src);
      r.verified = ok ? "ok" : "FAILED";
    }
    if (!cfg.quiet) {
      std::fprintf(stderr, "[%zu/%zu] %s %s: %.3f GB/s, p50 %.1f us%s%s\n", n, cfg.sizes.size(), cfg.op.c_str(),
                   format_bytes(size).c_str(), r.bytes_per_s / 1e9, r.p50_us, r.verified.empty() ? "" : ", verify ",
                   r.verified.c_str());
    }
    results.push_back(r);
  }
  must(send_text(conn, boot, "bye"), "bye");
  return results;
}

}  // namespace ferry::cli
