// Benchmark sessions: what initiator and target do over the ferry connection.
#include "ferry/bench_session.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/pattern.h"
#include "ferry/bench_sizes.h"
#include "platform/cuda_driver.h"

namespace ferry::cli {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kOpTimeout = 120s;
constexpr size_t kControlBytes = 64 * 1024;

json to_json(const RunConfig& c) {
  return json{
      {"op", c.op},       {"sizes", c.sizes},   {"iters", c.iters},  {"warmup", c.warmup}, {"inflight", c.inflight},
      {"bidir", c.bidir}, {"verify", c.verify}, {"gpu", c.peer_gpu}, {"group", c.group},   {"footprint", c.footprint}};
}

RunConfig from_json(const json& j) {
  RunConfig c;
  c.op = j.at("op").get<std::string>();
  c.sizes = j.at("sizes").get<std::vector<uint64_t>>();
  c.iters = j.at("iters").get<int>();
  c.warmup = j.at("warmup").get<int>();
  c.inflight = j.value("inflight", 1);
  c.bidir = j.at("bidir").get<bool>();
  c.verify = j.at("verify").get<bool>();
  c.peer_gpu = j.value("gpu", -1);
  c.group = j.value("group", 1);
  c.footprint = j.value("footprint", uint64_t{0});
  return c;
}

using core::fill_random;
using core::fnv1a;

platform::cu::DevicePtr dptr(const void* p) {
  return static_cast<platform::cu::DevicePtr>(reinterpret_cast<uintptr_t>(p));
}

// One side's memory: [src | dst | control] in host memory, registered once,
// page aligned; or, on a GPU, [src | dst] in device memory and the control
// slice in host memory. src and dst span the largest size, or the
// footprint where that is larger (RunConfig::footprint).
struct Buffers {
  Engine* engine = nullptr;
  uint8_t* base = nullptr;    // host memory
  uint8_t* device = nullptr;  // GPU memory (src, dst) or null
  size_t max = 0;             // bytes of src, and of dst
  bool rotate = false;        // operations take turns through slots of src and dst
  int gpu = -1;
  Region region, device_region;
  uint8_t* src() const { return device != nullptr ? device : base; }
  uint8_t* dst() const { return src() + max; }
  uint8_t* ctl() const { return device != nullptr ? base : base + 2 * max; }

  // Where operation `i` of `size` bytes starts in src and in dst (and in the
  // peer's, which has the same span).
  size_t at(int i, uint64_t size) const {
    return rotate ? static_cast<size_t>(rotating_offset(static_cast<uint64_t>(i), size, max)) : 0;
  }

  Buffers(Engine* e, size_t max_size, int on_gpu = -1, uint64_t footprint = 0)
      : engine(e), max(std::max<size_t>({max_size, footprint, 1})), rotate(footprint > 0), gpu(on_gpu) {
    size_t total = (gpu >= 0 ? 0 : 2 * max) + kControlBytes;
    total = (total + 4095) & ~size_t{4095};
    base = static_cast<uint8_t*>(std::aligned_alloc(4096, total));
    if (base == nullptr) die("allocate", Status(Code::kResourceExhausted, std::to_string(total) + " bytes"));
    std::memset(base, 0, total);
    region = must(engine->reg(base, total), "register buffers");
    if (gpu >= 0) {
      const platform::CudaDriver& d = platform::cuda();
      must(platform::use_device(gpu), "use GPU " + std::to_string(gpu));
      platform::cu::DevicePtr p = 0;
      must(d.check(d.mem_alloc(&p, 2 * max), "cuMemAlloc", Code::kResourceExhausted),
           "allocate " + std::to_string(2 * max) + " bytes on GPU " + std::to_string(gpu));
      device = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(p));
      device_region = must(engine->reg(device, 2 * max), "register GPU buffers");
    }
  }
  ~Buffers() {
    (void)engine->dereg(region);
    std::free(base);
    if (device != nullptr) {
      (void)engine->dereg(device_region);
      (void)platform::use_device(gpu);
      platform::cuda().mem_free(dptr(device));
    }
  }

  // Host bytes into / out of [p, p+n) of src or dst, wherever they live.
  void put(uint8_t* p, const uint8_t* from, size_t n) const {
    if (device == nullptr) {
      std::memcpy(p, from, n);
      return;
    }
    (void)platform::use_device(gpu);
    must(platform::cuda().check(platform::cuda().memcpy(dptr(p), dptr(from), n), "cuMemcpy"), "copy to the GPU");
  }
  void get(const uint8_t* p, uint8_t* to, size_t n) const {
    if (device == nullptr) {
      std::memcpy(to, p, n);
      return;
    }
    (void)platform::use_device(gpu);
    must(platform::cuda().check(platform::cuda().memcpy(dptr(to), dptr(p), n), "cuMemcpy"), "copy from the GPU");
  }
};

// Random bytes into [at, at+n) of src.
void fill_src(const Buffers& b, size_t at, size_t n, uint64_t seed) {
  if (b.device == nullptr) {
    fill_random(b.src() + at, n, seed);
    return;
  }
  std::vector<uint8_t> tmp(n);
  fill_random(tmp.data(), n, seed);
  b.put(b.src() + at, tmp.data(), n);
}

uint64_t hash_of(const Buffers& b, const uint8_t* p, size_t n) {
  if (b.device == nullptr) return fnv1a(p, n);
  std::vector<uint8_t> tmp(n);
  b.get(p, tmp.data(), n);
  return fnv1a(tmp.data(), n);
}

// Control messages travel through the control slice, as ferry messages.
void send_text(Connection& c, const Buffers& b, const std::string& text) {
  if (text.size() > kControlBytes) die("control message", Status(Code::kInternal, "too large"));
  std::memcpy(b.ctl(), text.data(), text.size());
  must(c.send(b.ctl(), text.size(), after(kOpTimeout)), "send control message");
}

std::string recv_text(Connection& c, const Buffers& b) {
  size_t n = must(c.recv(b.ctl(), kControlBytes, after(kOpTimeout)), "receive control message");
  return std::string(reinterpret_cast<const char*>(b.ctl()), n);
}

struct Descriptors {
  RemoteDescriptor src, dst;
};

std::string encode(const Descriptors& d) { return d.src.serialize() + d.dst.serialize(); }
Descriptors decode(const std::string& s) {
  if (s.size() != 96) die("descriptors", Status(Code::kDataLoss, "expected 96 bytes"));
  return Descriptors{must(RemoteDescriptor::parse(s.substr(0, 48)), "parse descriptor"),
                     must(RemoteDescriptor::parse(s.substr(48)), "parse descriptor")};
}

Descriptors export_buffers(Engine& e, const Buffers& b) {
  // src and dst live in the GPU region when the buffers are on a GPU.
  const Region& r = b.device != nullptr ? b.device_region : b.region;
  return Descriptors{must(e.export_region(r, 0, b.max), "export src"),
                     must(e.export_region(r, b.max, b.max), "export dst")};
}

// Posts operation `i` of the directional workload of `op` (send, write or
// read) from this side.
Transfer post(Connection& c, const Buffers& b, const Descriptors& remote, const std::string& op, uint64_t size, int i) {
  size_t at = b.at(i, size);
  if (op == "send") return c.send_async(b.src() + at, size);
  if (op == "write") return c.write_async(b.src() + at, size, remote.dst, at, {});
  return c.read_async(b.dst() + at, size, remote.src, at);
}

// Runs operations `first` to `first + count - 1` of the directional workload
// of `op` from this side (the initiator's forward direction, or the target's
// reverse one in --bidir), up to `inflight` at a time. Fills `lat_ns` with
// each operation's posting-to-completion time.
void drive(Connection& c, const Buffers& b, const Descriptors& remote, const std::string& op, uint64_t size, int first,
           int count, int inflight, std::vector<int64_t>* lat_ns) {
  struct Posted {
    Transfer t;
    Clock::time_point at;
  };
  std::deque<Posted> posted;
  auto finish_oldest = [&] {
    Status s = posted.front().t.wait(after(kOpTimeout));
    auto done = Clock::now();
    must(s, op + " of " + std::to_string(size) + " bytes");
    if (lat_ns != nullptr) {
      lat_ns->push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(done - posted.front().at).count());
    }
    posted.pop_front();
  };
  for (int i = first; i < first + count; ++i) {
    if (op == "pingpong") {
      size_t at = b.at(i, size);
      auto t0 = Clock::now();
      Status s = c.send(b.src() + at, size, after(kOpTimeout));
      if (s.ok()) s = c.recv(b.dst() + at, size, after(kOpTimeout)).status();
      auto t1 = Clock::now();
      must(s, op + " of " + std::to_string(size) + " bytes");
      if (lat_ns != nullptr) lat_ns->push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
      continue;
    }
    if (static_cast<int>(posted.size()) == inflight) finish_oldest();
    auto t0 = Clock::now();
    posted.push_back(Posted{post(c, b, remote, op, size, i), t0});
  }
  while (!posted.empty()) finish_oldest();
}

// The passive half of `op` for `count` operations: receives for send, echoes
// for pingpong, nothing for one-sided ops.
void serve_passive(Connection& c, const Buffers& b, const std::string& op, uint64_t size, int count, int inflight) {
  if (op == "write" || op == "read") return;
  if (op == "pingpong") {
    for (int i = 0; i < count; ++i) {
      size_t at = b.at(i, size);
      size_t n = must(c.recv(b.dst() + at, size, after(kOpTimeout)), "pingpong receive");
      must(c.send(b.dst() + at, n, after(kOpTimeout)), "pingpong echo");
    }
    return;
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
    must(posted.front().wait(after(kOpTimeout)), "receive of " + std::to_string(size) + " bytes");
    posted.pop_front();
    if (next < count) {
      posted.push_back(c.recv_async(b.dst() + b.at(next, size), size));
      ++next;
    }
  }
}

// Checksums of src and dst where the last of `count` operations put its bytes.
std::string checksums(const Buffers& b, uint64_t size, int count) {
  size_t at = b.at(count - 1, size);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64 " %016" PRIx64, hash_of(b, b.src() + at, size),
                hash_of(b, b.dst() + at, size));
  return buf;
}

double percentile(std::vector<int64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return static_cast<double>(v[std::min(idx, v.size() - 1)]) / 1000.0;
}

}  // namespace

[[noreturn]] void die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "ferry bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  std::exit(1);
}

RunConfig serve_session(Engine& engine, std::shared_ptr<Connection> conn) {
  Buffers boot(&engine, 1);
  RunConfig cfg = from_json(json::parse(recv_text(*conn, boot)));
  uint64_t max = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
  Buffers b(&engine, max, cfg.peer_gpu, cfg.footprint);
  send_text(*conn, boot, encode(export_buffers(engine, b)));
  Descriptors remote = decode(recv_text(*conn, boot));
  int count = cfg.warmup + cfg.iters;
  for (uint64_t size : cfg.sizes) {
    std::string begin = recv_text(*conn, b);
    if (begin != "begin " + std::to_string(size))
      die("protocol", Status(Code::kDataLoss, "expected begin, got " + begin));
    if (cfg.verify) fill_src(b, b.at(count - 1, size), size, size * 2 + 1);
    send_text(*conn, b, "ready");
    std::thread reverse;
    if (cfg.bidir) {
      reverse = std::thread([&] { drive(*conn, b, remote, cfg.op, size, 0, count, cfg.inflight, nullptr); });
    }
    serve_passive(*conn, b, cfg.op, size, count, cfg.inflight);
    if (reverse.joinable()) reverse.join();
    std::string end = recv_text(*conn, b);
    if (end != "end") die("protocol", Status(Code::kDataLoss, "expected end, got " + end));
    send_text(*conn, b, checksums(b, size, count));
  }
  std::string bye = recv_text(*conn, boot);
  (void)bye;
  return cfg;
}

std::vector<SizeResult> run_initiator(Engine& engine, Connection& conn, const RunConfig& cfg) {
  Buffers boot(&engine, 1);
  send_text(conn, boot, to_json(cfg).dump());
  uint64_t max = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
  Buffers b(&engine, max, cfg.gpu, cfg.footprint);
  Descriptors remote = decode(recv_text(conn, boot));
  send_text(conn, boot, encode(export_buffers(engine, b)));
  std::vector<SizeResult> results;
  int count = cfg.warmup + cfg.iters;
  size_t n = 0;
  for (uint64_t size : cfg.sizes) {
    ++n;
    if (cfg.verify) fill_src(b, b.at(count - 1, size), size, size * 2);
    send_text(conn, b, "begin " + std::to_string(size));
    std::string ready = recv_text(conn, b);
    if (ready != "ready") die("protocol", Status(Code::kDataLoss, "expected ready, got " + ready));
    std::vector<int64_t> lat;
    lat.reserve(static_cast<size_t>(count));
    std::thread reverse;
    if (cfg.bidir) reverse = std::thread([&] { serve_passive(conn, b, cfg.op, size, count, cfg.inflight); });
    drive(conn, b, remote, cfg.op, size, 0, cfg.warmup, cfg.inflight, nullptr);
    if (cfg.sync) cfg.sync();  // every GPU's session starts its timed phase together
    auto t0 = Clock::now();
    drive(conn, b, remote, cfg.op, size, cfg.warmup, cfg.iters, cfg.inflight, &lat);
    if (reverse.joinable()) reverse.join();
    auto t1 = Clock::now();
    if (cfg.sync) cfg.sync();
    double secs = std::chrono::duration<double>(t1 - t0).count();
    send_text(conn, b, "end");
    std::string theirs = recv_text(conn, b);
    SizeResult r{size, cfg.iters, 0, percentile(lat, 0.5), percentile(lat, 0.99), "", t0, t1};
    double moved = static_cast<double>(size) * cfg.iters * (cfg.bidir ? 2 : 1);
    if (cfg.op == "pingpong") moved *= 2;
    r.bytes_per_s = secs > 0 ? moved / secs : 0;
    if (cfg.verify) {
      char their_src[17] = {}, their_dst[17] = {};
      std::sscanf(theirs.c_str(), "%16s %16s", their_src, their_dst);
      std::string mine = checksums(b, size, count);
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
    std::fprintf(stderr, "[%zu/%zu] %s %s: %.3f GB/s, p50 %.1f us%s%s\n", n, cfg.sizes.size(), cfg.op.c_str(),
                 format_bytes(size).c_str(), r.bytes_per_s / 1e9, r.p50_us, r.verified.empty() ? "" : ", verify ",
                 r.verified.c_str());
    results.push_back(r);
  }
  send_text(conn, boot, "bye");
  return results;
}

// Starts this binary as the target of --local; returns its pid and address.
}  // namespace ferry::cli
