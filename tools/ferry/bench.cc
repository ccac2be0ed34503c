// `ferry bench`: measures ferry between two engines — a target (--listen) and
// an initiator (--peer) — or both on this host (--local, the main job: the
// target runs as a child process). Prints a table (size, GB/s, p50/p99
// latency) on stdout, progress on stderr, and optionally JSON.
//
// The two sides agree on the run over the ferry connection itself: the
// initiator sends the configuration, both exchange descriptors, and each size
// is bracketed by "begin"/"end" messages that carry checksums for --verify.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "ferry/bench_sizes.h"
#include "ferry/commands.h"
#include "ferry/ferry.h"

extern char** environ;

namespace ferry::cli {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kOpTimeout = 120s;
constexpr size_t kControlBytes = 64 * 1024;

struct BenchFlags {
  bool local = false;
  std::string listen;
  std::string peer;
  std::string op = "send";
  std::string sizes = "4K:64M:x4";
  int iters = 20;
  int warmup = 3;
  int streams = 0;
  std::string chunk;
  int window = 0;
  bool bidir = false;
  bool verify = false;
  bool once = false;
  std::string json_out;
};

struct RunConfig {
  std::string op;
  std::vector<uint64_t> sizes;
  int iters = 0;
  int warmup = 0;
  bool bidir = false;
  bool verify = false;
};

json to_json(const RunConfig& c) {
  return json{{"op", c.op},         {"sizes", c.sizes}, {"iters", c.iters},
              {"warmup", c.warmup}, {"bidir", c.bidir}, {"verify", c.verify}};
}

RunConfig from_json(const json& j) {
  RunConfig c;
  c.op = j.at("op").get<std::string>();
  c.sizes = j.at("sizes").get<std::vector<uint64_t>>();
  c.iters = j.at("iters").get<int>();
  c.warmup = j.at("warmup").get<int>();
  c.bidir = j.at("bidir").get<bool>();
  c.verify = j.at("verify").get<bool>();
  return c;
}

[[noreturn]] void die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "ferry bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  std::exit(1);
}

template <typename T>
T must(Result<T> r, const std::string& what) {
  if (!r.ok()) die(what, r.status());
  return std::move(r).value();
}

void must(const Status& s, const std::string& what) {
  if (!s.ok()) die(what, s);
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  // Eight bytes at a time keeps checksumming 64 MiB well under the transfer time.
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void fill_random(uint8_t* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = rng();
    std::memcpy(p + i, &w, 8);
  }
  uint64_t w = rng();
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(w >> (8 * (i % 8)));
}

// One side's memory: [src | dst | control], registered once, page aligned.
struct Buffers {
  Engine* engine = nullptr;
  uint8_t* base = nullptr;
  size_t max = 0;
  Region region;
  uint8_t* src() const { return base; }
  uint8_t* dst() const { return base + max; }
  uint8_t* ctl() const { return base + 2 * max; }

  Buffers(Engine* e, size_t max_size) : engine(e), max(std::max<size_t>(max_size, 1)) {
    size_t total = 2 * max + kControlBytes;
    total = (total + 4095) & ~size_t{4095};
    base = static_cast<uint8_t*>(std::aligned_alloc(4096, total));
    if (base == nullptr) die("allocate", Status(Code::kResourceExhausted, std::to_string(total) + " bytes"));
    std::memset(base, 0, total);
    region = must(engine->reg(base, total), "register buffers");
  }
  ~Buffers() {
    (void)engine->dereg(region);
    std::free(base);
  }
};

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
  return Descriptors{must(e.export_region(b.region, 0, b.max), "export src"),
                     must(e.export_region(b.region, b.max, b.max), "export dst")};
}

// Runs `count` operations of the directional workload of `op` from this side
// (the initiator's forward direction, or the target's reverse one in --bidir).
// Fills `lat_ns` with each operation's posting-to-completion time.
void drive(Connection& c, const Buffers& b, const Descriptors& remote, const std::string& op, uint64_t size, int count,
           std::vector<int64_t>* lat_ns) {
  for (int i = 0; i < count; ++i) {
    auto t0 = Clock::now();
    Status s;
    if (op == "send") {
      s = c.send(b.src(), size, after(kOpTimeout));
    } else if (op == "write") {
      s = c.write(b.src(), size, remote.dst, 0, {}, after(kOpTimeout));
    } else if (op == "read") {
      s = c.read(b.dst(), size, remote.src, 0, after(kOpTimeout));
    } else {  // pingpong
      s = c.send(b.src(), size, after(kOpTimeout));
      if (s.ok()) s = c.recv(b.dst(), size, after(kOpTimeout)).status();
    }
    auto t1 = Clock::now();
    must(s, op + " of " + std::to_string(size) + " bytes");
    if (lat_ns != nullptr) lat_ns->push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  }
}

// The passive half of `op` for `count` operations: receives for send, echoes
// for pingpong, nothing for one-sided ops.
void serve_passive(Connection& c, const Buffers& b, const std::string& op, uint64_t size, int count) {
  if (op == "write" || op == "read") return;
  if (op == "pingpong") {
    for (int i = 0; i < count; ++i) {
      size_t n = must(c.recv(b.dst(), size, after(kOpTimeout)), "pingpong receive");
      must(c.send(b.dst(), n, after(kOpTimeout)), "pingpong echo");
    }
    return;
  }
  // Two receives in flight so the next message always finds one posted.
  std::deque<Transfer> posted;
  int next = 0;
  while (next < count && posted.size() < 2) {
    posted.push_back(c.recv_async(b.dst(), size));
    ++next;
  }
  while (!posted.empty()) {
    must(posted.front().wait(after(kOpTimeout)), "receive of " + std::to_string(size) + " bytes");
    posted.pop_front();
    if (next < count) {
      posted.push_back(c.recv_async(b.dst(), size));
      ++next;
    }
  }
}

std::string checksums(const Buffers& b, uint64_t size) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64 " %016" PRIx64, fnv1a(b.src(), size), fnv1a(b.dst(), size));
  return buf;
}

// ---- target -------------------------------------------------------------------

void serve_session(Engine& engine, std::shared_ptr<Connection> conn) {
  Buffers boot(&engine, 1);
  RunConfig cfg = from_json(json::parse(recv_text(*conn, boot)));
  uint64_t max = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
  Buffers b(&engine, max);
  send_text(*conn, boot, encode(export_buffers(engine, b)));
  Descriptors remote = decode(recv_text(*conn, boot));
  int count = cfg.warmup + cfg.iters;
  for (uint64_t size : cfg.sizes) {
    std::string begin = recv_text(*conn, b);
    if (begin != "begin " + std::to_string(size))
      die("protocol", Status(Code::kDataLoss, "expected begin, got " + begin));
    if (cfg.verify) fill_random(b.src(), size, size * 2 + 1);
    send_text(*conn, b, "ready");
    std::thread reverse;
    if (cfg.bidir) reverse = std::thread([&] { drive(*conn, b, remote, cfg.op, size, count, nullptr); });
    serve_passive(*conn, b, cfg.op, size, count);
    if (reverse.joinable()) reverse.join();
    std::string end = recv_text(*conn, b);
    if (end != "end") die("protocol", Status(Code::kDataLoss, "expected end, got " + end));
    send_text(*conn, b, checksums(b, size));
  }
  std::string bye = recv_text(*conn, boot);
  (void)bye;
}

int run_target(const BenchFlags& f, const Options& options) {
  Options o = options;
  o.listen = f.listen;
  auto engine = must(Engine::create(o), "create engine");
  std::printf("ferry bench target listening on %s\n", engine->address().c_str());
  std::fflush(stdout);
  do {
    auto conn = must(engine->accept(kNoDeadline), "accept");
    serve_session(*engine, conn);
    conn->close();
  } while (!f.once);
  return 0;
}

// ---- initiator ------------------------------------------------------------------

struct SizeResult {
  uint64_t bytes;
  int iters;
  double bytes_per_s;
  double p50_us, p99_us;
  std::string verified;  // "ok", "FAILED", or "" when not checked
};

double percentile(std::vector<int64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return static_cast<double>(v[std::min(idx, v.size() - 1)]) / 1000.0;
}

std::vector<SizeResult> run_initiator(Engine& engine, Connection& conn, const RunConfig& cfg) {
  Buffers boot(&engine, 1);
  send_text(conn, boot, to_json(cfg).dump());
  uint64_t max = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
  Buffers b(&engine, max);
  Descriptors remote = decode(recv_text(conn, boot));
  send_text(conn, boot, encode(export_buffers(engine, b)));
  std::vector<SizeResult> results;
  int count = cfg.warmup + cfg.iters;
  size_t n = 0;
  for (uint64_t size : cfg.sizes) {
    ++n;
    if (cfg.verify) fill_random(b.src(), size, size * 2);
    send_text(conn, b, "begin " + std::to_string(size));
    std::string ready = recv_text(conn, b);
    if (ready != "ready") die("protocol", Status(Code::kDataLoss, "expected ready, got " + ready));
    std::vector<int64_t> lat;
    lat.reserve(static_cast<size_t>(count));
    std::thread reverse;
    if (cfg.bidir) reverse = std::thread([&] { serve_passive(conn, b, cfg.op, size, count); });
    drive(conn, b, remote, cfg.op, size, cfg.warmup, nullptr);
    auto t0 = Clock::now();
    drive(conn, b, remote, cfg.op, size, cfg.iters, &lat);
    if (reverse.joinable()) reverse.join();
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    send_text(conn, b, "end");
    std::string theirs = recv_text(conn, b);
    SizeResult r{size, cfg.iters, 0, percentile(lat, 0.5), percentile(lat, 0.99), ""};
    double moved = static_cast<double>(size) * cfg.iters * (cfg.bidir ? 2 : 1);
    if (cfg.op == "pingpong") moved *= 2;
    r.bytes_per_s = secs > 0 ? moved / secs : 0;
    if (cfg.verify) {
      char their_src[17] = {}, their_dst[17] = {};
      std::sscanf(theirs.c_str(), "%16s %16s", their_src, their_dst);
      std::string mine = checksums(b, size);
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
pid_t spawn_local_target(const BenchFlags& f, std::string& address) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) die("pipe", Status(Code::kResourceExhausted, std::strerror(errno)));
  std::vector<std::string> args = {"ferry", "bench", "--listen", "127.0.0.1:0", "--once"};
  if (f.streams > 0) {
    args.push_back("--streams");
    args.push_back(std::to_string(f.streams));
  }
  if (!f.chunk.empty()) {
    args.push_back("--chunk");
    args.push_back(f.chunk);
  }
  if (f.window > 0) {
    args.push_back("--window");
    args.push_back(std::to_string(f.window));
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) die("start the local target", Status(Code::kUnavailable, std::strerror(rc)));
  std::string line;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(fds[0]);
  auto at = line.rfind(' ');
  if (at == std::string::npos) die("local target", Status(Code::kUnavailable, "did not report its address"));
  address = line.substr(at + 1);
  return pid;
}

void print_table(const RunConfig& cfg, const std::vector<SizeResult>& rs) {
  std::printf("%-12s %10s %12s %12s%s\n", "size", "GB/s", "p50_us", "p99_us", cfg.verify ? "   verify" : "");
  for (const auto& r : rs) {
    std::printf("%-12s %10.3f %12.1f %12.1f%s%s\n", format_bytes(r.bytes).c_str(), r.bytes_per_s / 1e9, r.p50_us,
                r.p99_us, cfg.verify ? "   " : "", r.verified.c_str());
  }
}

void write_json(const BenchFlags& f, const RunConfig& cfg, const Options& o, const std::vector<SizeResult>& rs) {
  json config = to_json(cfg);
  config["streams"] = o.streams;
  config["chunk_bytes"] = o.chunk_bytes;
  config["window"] = o.window;
  config["transport"] = "tcp";
  config["peer"] = f.local ? "local" : f.peer;
  json results = json::array();
  for (const auto& r : rs) {
    json j{{"op", cfg.op},
           {"bytes", r.bytes},
           {"iters", r.iters},
           {"bytes_per_s", r.bytes_per_s},
           {"lat_us", {{"p50", r.p50_us}, {"p99", r.p99_us}}}};
    if (!r.verified.empty()) j["verified"] = r.verified == "ok";
    results.push_back(j);
  }
  std::string text = json{{"config", config}, {"results", results}}.dump(2) + "\n";
  if (f.json_out == "-") {
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream out(f.json_out);
    out << text;
    if (!out) die("write " + f.json_out, Status(Code::kUnavailable, "cannot write"));
  }
}

int run_bench(const BenchFlags& f) {
  int modes = (f.local ? 1 : 0) + (!f.listen.empty() ? 1 : 0) + (!f.peer.empty() ? 1 : 0);
  if (modes != 1) {
    std::fprintf(stderr, "ferry bench: give exactly one of --local, --listen ADDR, --peer ADDR\n");
    return 2;
  }
  Options o;
  if (f.streams > 0) o.streams = f.streams;
  if (!f.chunk.empty()) o.chunk_bytes = must(parse_bytes(f.chunk), "--chunk");
  if (f.window > 0) o.window = f.window;
  if (!f.listen.empty()) return run_target(f, o);

  RunConfig cfg;
  cfg.op = f.op;
  cfg.sizes = must(parse_sizes(f.sizes), "--sizes");
  cfg.iters = f.iters;
  cfg.warmup = f.warmup;
  cfg.bidir = f.bidir;
  cfg.verify = f.verify;
  if (cfg.iters < 1 || cfg.warmup < 0) {
    std::fprintf(stderr, "ferry bench: --iters must be >= 1 and --warmup >= 0\n");
    return 2;
  }
  std::string peer = f.peer;
  pid_t child = -1;
  if (f.local) child = spawn_local_target(f, peer);
  auto engine = must(Engine::create(o), "create engine");
  auto conn = must(engine->connect(peer, after(10s)), "connect to " + peer);
  std::fprintf(stderr, "ferry bench: %s to %s, %d streams, chunk %s, window %d\n", cfg.op.c_str(), peer.c_str(),
               engine->options().streams, format_bytes(engine->options().chunk_bytes).c_str(),
               engine->options().window);
  auto results = run_initiator(*engine, *conn, cfg);
  conn->close();
  if (child > 0) {
    int status = 0;
    for (int i = 0; i < 100 && ::waitpid(child, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(50ms);
    if (::waitpid(child, &status, WNOHANG) == 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
    }
  }
  if (f.json_out != "-") print_table(cfg, results);
  if (!f.json_out.empty()) write_json(f, cfg, engine->options(), results);
  bool bad = std::any_of(results.begin(), results.end(), [](const SizeResult& r) { return r.verified == "FAILED"; });
  return bad ? 3 : 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* b = app.add_subcommand("bench", "measure transfers between two engines");
  b->add_flag("--local", f->local, "start a target and an initiator on this host (the main job)");
  b->add_option("--listen", f->listen, "run as target, listening on ADDR (host:port)");
  b->add_option("--peer", f->peer, "run as initiator against the target at ADDR");
  b->add_option("--op", f->op, "send, write, read or pingpong")
      ->check(CLI::IsMember({"send", "write", "read", "pingpong"}));
  b->add_option("--sizes", f->sizes, "sizes: list and ranges, e.g. 4K,1M or 1K:256M:x4")->capture_default_str();
  b->add_option("--iters", f->iters, "timed operations per size")->capture_default_str();
  b->add_option("--warmup", f->warmup, "untimed operations per size first")->capture_default_str();
  b->add_option("--streams", f->streams, "data streams per connection (default: FERRY_STREAMS or 2)");
  b->add_option("--chunk", f->chunk, "chunk size, e.g. 512K");
  b->add_option("--window", f->window, "chunks in flight per stream");
  b->add_flag("--bidir", f->bidir, "both sides move data at once");
  b->add_flag("--verify", f->verify, "fill with random bytes and compare checksums end to end");
  b->add_flag("--once", f->once, "target: serve one initiator, then exit");
  b->add_option("--json", f->json_out, "also write results as JSON to FILE, or - for stdout");
  b->callback([f] { std::exit(run_bench(*f)); });
}

}  // namespace ferry::cli
