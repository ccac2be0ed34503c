// Writes the seed corpora of the harnesses from real traffic: two real
// engines of this process exchange every kind of operation, over TCP through
// a recording proxy and over the local transport with the shared channel
// read alongside, and the frames each side sent become the inputs of the
// stateful harnesses (the second engine plays the engine under test, the
// first the peer) and of the decoders. The parsers of user input get the
// fixture trees' files and the strings the documentation uses.
//
//   ferry_fuzz_record_seeds OUT_DIR     (OUT_DIR/<harness>/seed-*)
//
// Run it after a protocol change and commit what it writes to
// tests/fuzz/corpus (scripts/fuzz.sh --record does both steps' first half).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "diag/snapshot.h"
#include "diag/snapshot_json.h"
#include "fuzz_peer.h"
#include "transport/local/shared_span.h"
#include "transport/local/shm_channel.h"
#include "tune/apply.h"
#include "tune/plan.h"
#include "tune/plan_json.h"
#include "wire/metadata.h"

namespace {

namespace fs = std::filesystem;
using namespace ferry;
using namespace ferry::fuzz;
using wire::FrameType;

std::string out_dir;
std::map<std::string, int> written;

void seed(const std::string& harness, const std::string& bytes, const std::string& name = "") {
  fs::create_directories(out_dir + "/" + harness);
  std::string file = name.empty() ? "seed-" + std::to_string(++written[harness]) : name;
  std::ofstream f(out_dir + "/" + harness + "/" + file, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void check(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "record_seeds: %s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

FrameType type_of(const std::string& frame) { return static_cast<FrameType>(static_cast<uint8_t>(frame[4])); }
bool handshake(FrameType t) { return static_cast<uint8_t>(t) <= static_cast<uint8_t>(FrameType::kReady); }

// A field of a frame header (a at 24, b at 32) replaced when it holds `from`.
void retag(std::string& frame, size_t at, uint64_t from, uint64_t to) {
  auto* p = reinterpret_cast<uint8_t*>(frame.data());
  if (wire::get_u64(p + at) == from) wire::put_u64(p + at, to);
}

// One side of a recorded exchange: an engine with the harnesses' memory.
struct Side {
  std::unique_ptr<Engine> engine;
  GuardedBuffer memory{kTargetBytes};
  RemoteDescriptor exported;
  explicit Side(Options o) {
    auto e = Engine::create(std::move(o));
    check(e.status(), "engine");
    engine = std::move(e).value();
    auto r = engine->reg(memory.data(), memory.size());
    check(r.status(), "reg");
    auto d = engine->export_region(*r);
    check(d.status(), "export");
    exported = *d;
  }
};

// What both sides do in a scenario: the target posts `target_ops`, then the
// peer `peer_ops` (post_setup's operations, each against the other's export);
// every operation finishes and every notification is taken.
void exchange(Connection& target, Side& t, uint8_t target_ops, Connection& peer, Side& p, uint8_t peer_ops) {
  std::vector<Transfer> a = post_setup(target, target_ops, t.memory.data(), p.exported);
  std::vector<Transfer> b = post_setup(peer, peer_ops, p.memory.data(), t.exported);
  for (Transfer& x : a) check(x.wait(after(10s)), "target's operation");
  for (Transfer& x : b) check(x.wait(after(10s)), "peer's operation");
  auto notes = [](uint8_t ops) { return ((ops & kSetupWrite) ? 1 : 0) + ((ops & kSetupNotify) ? 1 : 0); };
  for (int i = 0; i < notes(peer_ops); ++i) check(target.wait_notification(after(5s)).status(), "target's note");
  for (int i = 0; i < notes(target_ops); ++i) check(peer.wait_notification(after(5s)).status(), "peer's note");
}

// The scenarios: the target's operations and the peer's that answer them.
struct Scenario {
  uint8_t target, peer;
};
constexpr uint8_t kAllOps = 0xff;
constexpr uint8_t kOneSided = kSetupWrite | kSetupRead | kSetupNotify | kSetupWriteLarge;
const Scenario kScenarios[] = {
    {kSetupRecvSmall | kSetupRecvLarge, kSetupSendEager | kSetupSendLarge},
    {kSetupSendEager | kSetupSendLarge, kSetupRecvSmall | kSetupRecvLarge},
    {kOneSided, 0},
    {0, kOneSided},
    {kAllOps, kAllOps},
};

// ---- TCP, through a proxy that records every frame ----------------------------------

struct Event {
  bool to_target;
  int stream;  // 0 control, 1 + i data stream i
  std::string frame;
};

class Proxy {
 public:
  explicit Proxy(std::string target) : target_(std::move(target)) {
    auto l = platform::listen_tcp({"127.0.0.1", 0});
    check(l.status(), "proxy listen");
    listener_ = std::move(l).value();
    address_ = "127.0.0.1:" + std::to_string(platform::local_port(listener_).value());
    threads_.emplace_back([this] { accept_loop(); });
  }
  ~Proxy() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  const std::string& address() const { return address_; }
  std::vector<Event> take() {
    std::lock_guard lock(mu_);
    return std::move(log_);
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listener_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      auto hp = platform::parse_host_port(target_);
      auto up = platform::connect_tcp(*hp, after(5s));
      check(up.status(), "proxy connect");
      auto stream = std::make_shared<std::atomic<int>>(-1);
      int ufd = up->release();
      threads_.emplace_back([this, fd, ufd, stream] { pump(fd, ufd, true, stream); });
      threads_.emplace_back([this, fd, ufd, stream] { pump(ufd, fd, false, stream); });
    }
  }

  // Moves whole frames from `from` to `to`, logging each; the acceptor's
  // WELCOME is made to name the proxy, so that data streams come here too.
  void pump(int from, int to, bool to_target, std::shared_ptr<std::atomic<int>> stream) {
    FrameSplitter in(true);
    char buf[65536];
    for (;;) {
      pollfd p{from, POLLIN, 0};
      if (::poll(&p, 1, 20) == 0) {
        if (stop_) break;
        continue;
      }
      ssize_t n = ::recv(from, buf, sizeof buf, 0);
      if (n <= 0) break;
      in.feed(buf, static_cast<size_t>(n));
      for (std::string& f : in.take_frames()) {
        auto h = wire::decode_header(reinterpret_cast<const uint8_t*>(f.data()), f.size());
        std::string aux = f.substr(wire::kHeaderSize, h->aux_len);
        if (h->type == FrameType::kHello) {
          auto hello = wire::decode_hello(*h, aux);
          stream->store(hello->role == wire::StreamRole::kControl ? 0 : 1 + static_cast<int>(hello->stream_index));
        }
        if (h->type == FrameType::kWelcome) {
          auto w = wire::decode_welcome(*h, aux);
          w->addresses = {address_};
          wire::EncodedFrame e = wire::encode(*w);
          wire::HeaderBytes hb;
          wire::encode_header(e.header, hb);
          f.assign(reinterpret_cast<const char*>(hb.data()), hb.size());
          f += e.aux;
        }
        {
          std::lock_guard lock(mu_);
          log_.push_back({to_target, stream->load(), f});
        }
        if (::send(to, f.data(), f.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(f.size())) break;
      }
    }
    ::shutdown(to, SHUT_WR);
    std::lock_guard lock(mu_);
    if (++closed_[std::min(from, to)] == 2) {
      ::close(from);
      ::close(to);
    }
  }

  std::string target_;
  platform::Socket listener_;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Event> log_;
  std::map<int, int> closed_;
  std::vector<std::thread> threads_;
};

std::map<FrameType, std::string> headers;   // one frame header of each type seen
std::vector<std::string> handshake_frames;  // header and aux

void record_tcp(bool streams_one) {
  for (const Scenario& s : kScenarios) {
    Options o = target_options("tcp");
    o.streams = streams_one ? 1 : 2;
    Side target(target_options("tcp")), peer(o);
    std::vector<Event> log;
    {
      Proxy proxy(target.engine->address());
      auto c = peer.engine->connect(proxy.address(), after(5s));
      check(c.status(), "connect through the proxy");
      auto a = target.engine->accept(after(5s));
      check(a.status(), "accept");
      exchange(**a, target, s.target, **c, peer, s.peer);
      std::this_thread::sleep_for(50ms);
      log = proxy.take();
      (*c)->close();
      (*a)->close();
    }
    InputWriter w;
    w.u8(s.target);
    w.u8(streams_one ? 0 : 1);
    std::vector<uint8_t> pending_syncs;
    for (Event& e : log) {
      FrameType t = type_of(e.frame);
      if (!headers.count(t)) headers[t] = e.frame.substr(0, wire::kHeaderSize);
      if (handshake(t)) {
        if (!streams_one) handshake_frames.push_back(e.frame);
        continue;
      }
      if (t == FrameType::kHeartbeat) continue;
      if (!e.to_target) {
        pending_syncs.push_back(static_cast<uint8_t>(t));
        continue;
      }
      for (uint8_t p : pending_syncs) w.sync(p);
      pending_syncs.clear();
      if (t == FrameType::kWrite || t == FrameType::kReadReq) {
        retag(e.frame, 24, target.exported.export_id, kExportTag);
        retag(e.frame, 32, target.exported.key, kKeyTag);
      }
      uint8_t kind = e.stream <= 0 ? 0 : static_cast<uint8_t>(1 | ((e.stream - 1) << 1));
      for (size_t off = 0; off < e.frame.size(); off += 0xffff)
        w.send(kind, std::string_view(e.frame).substr(off, 0xffff));
    }
    for (uint8_t p : pending_syncs) w.sync(p);  // the peer hangs up once the last answer came
    seed("fuzz_tcp_connection", w.out);
    if (!streams_one) seed("fuzz_notification", w.out.substr(0, 512));
  }
}

// A handshake with a shared secret: AUTH and ACCEPTED carry proofs.
void record_tcp_secret() {
  Options o = target_options("tcp");
  o.auth_token = "seed-secret";
  Side target(o), peer(o);
  Proxy proxy(target.engine->address());
  auto before = handshake_frames.size();
  auto c = peer.engine->connect(proxy.address(), after(5s));
  check(c.status(), "connect with a secret");
  auto a = target.engine->accept(after(5s));
  check(a.status(), "accept with a secret");
  for (Event& e : proxy.take()) {
    if (handshake(type_of(e.frame))) handshake_frames.push_back(e.frame);
  }
  (*c)->close();
  (*a)->close();
  if (handshake_frames.size() == before) check(Status(Code::kInternal, "no frames"), "secret handshake");
}

// ---- local transport, the shared channel read alongside -------------------------------

// Reads both rings of a channel file as they fill (this process's two
// engines consume them; their bytes stay until the ring wraps, which the
// scenarios never make it do).
class RingReader {
 public:
  struct Message {
    int ring;  // 0: connector (the peer) to acceptor (the target)
    std::string bytes;
  };

  explicit RingReader(int fd) {
    struct stat st {};
    check(::fstat(fd, &st) == 0 ? Status() : Status(Code::kInternal, "fstat"), "channel file");
    bytes_ = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    check(p != MAP_FAILED ? Status() : Status(Code::kInternal, "mmap"), "channel file");
    base_ = static_cast<const uint8_t*>(p);
    std::memcpy(&ring_bytes_, base_ + 16, 8);
    uint64_t nonce;
    std::memcpy(&nonce, base_ + 8, 8);
    auto view = local::ShmChannel::attach(::dup(fd), nonce);  // for the offsets only
    check(view.status(), "channel layout");
    data_[0] = view->data_offset(0);
    data_[1] = view->data_offset(1);
    thread_ = std::thread([this] {
      while (!stop_) {
        poll_once();
        std::this_thread::yield();
      }
      poll_once();
    });
  }
  ~RingReader() { ::munmap(const_cast<uint8_t*>(base_), bytes_); }

  std::vector<Message> stop() {
    stop_ = true;
    thread_.join();
    return std::move(log_);
  }

 private:
  void poll_once() {
    for (int r = 0; r < 2; ++r) {
      uint64_t head;
      std::memcpy(&head, base_ + local::ShmChannel::head_offset(r), 8);
      while (at_[r] < head) {
        size_t at = at_[r] % ring_bytes_;
        uint32_t n;
        std::memcpy(&n, base_ + data_[r] + at, 4);
        if (n == 0xffffffffu) {
          at_[r] += ring_bytes_ - at;
          continue;
        }
        log_.push_back({r, std::string(reinterpret_cast<const char*>(base_ + data_[r] + at + 4), n)});
        at_[r] += (4 + size_t{n} + 7) & ~size_t{7};
      }
    }
  }

  const uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  uint64_t ring_bytes_ = 0;
  size_t data_[2] = {0, 0};
  uint64_t at_[2] = {0, 0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<Message> log_;
};

int find_channel_fd() {
  int found = -1;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    std::string target = fs::read_symlink(e.path(), ec).string();
    if (!ec && target.find("memfd:ferry-local") != std::string::npos) found = std::stoi(e.path().filename());
  }
  return found;
}

bool carries_spans(FrameType t) {
  return t == FrameType::kLocalRts || t == FrameType::kLocalCts || t == FrameType::kLocalExport ||
         t == FrameType::kLocalPull || t == FrameType::kLocalPush;
}

void record_local() {
  for (const Scenario& s : kScenarios) {
    Side target(target_options("local")), peer(target_options("local"));
    std::thread accepting;
    Result<std::shared_ptr<Connection>> a = Status();
    accepting = std::thread([&] { a = target.engine->accept(after(5s)); });
    auto c = peer.engine->connect(target.engine->address(), after(5s));
    accepting.join();
    check(c.status(), "local connect");
    check(a.status(), "local accept");
    int fd = find_channel_fd();
    check(fd >= 0 ? Status() : Status(Code::kNotFound, "no channel file"), "local channel");
    RingReader reader(fd);
    exchange(**a, target, s.target, **c, peer, s.peer);
    std::this_thread::sleep_for(20ms);
    std::vector<RingReader::Message> log = reader.stop();
    (*c)->close();
    (*a)->close();

    InputWriter w;
    w.u8(s.target);
    w.u8(0);
    std::vector<uint8_t> pending_syncs;
    auto base = reinterpret_cast<uint64_t>(peer.memory.data());
    for (RingReader::Message& m : log) {
      FrameType t = type_of(m.bytes);
      if (!headers.count(t)) headers[t] = m.bytes.substr(0, wire::kHeaderSize);
      if (t == FrameType::kClose) continue;  // the harness closes itself
      if (m.ring == 1) {
        pending_syncs.push_back(static_cast<uint8_t>(t));
        continue;
      }
      for (uint8_t p : pending_syncs) w.sync(p);
      pending_syncs.clear();
      auto h = wire::decode_header(reinterpret_cast<const uint8_t*>(m.bytes.data()), m.bytes.size());
      if (t == FrameType::kLocalOpen || t == FrameType::kLocalPull || t == FrameType::kLocalPush) {
        retag(m.bytes, 24, target.exported.export_id, kExportTag);
        retag(m.bytes, 32, target.exported.key, kKeyTag);
      }
      if (t == FrameType::kLocalExport) {
        retag(m.bytes, 24, peer.exported.export_id, kPeerExportTag);
        retag(m.bytes, 32, peer.exported.key, kPeerKeyTag);
      }
      if (carries_spans(t)) {
        size_t at = wire::kHeaderSize + h->aux_len;
        std::string_view payload(m.bytes.data() + at, h->payload_len);
        seed("fuzz_shared_span", std::string(payload));
        auto spans = local::decode_spans(payload);
        // The peer's addresses become offsets into the harness's peer memory.
        for (local::SharedSpan& sp : *spans) {
          if (!sp.gpu() && sp.address >= base) sp.address -= base;
        }
        std::string encoded;
        local::encode_spans(*spans, encoded);
        m.bytes.replace(at, encoded.size(), encoded);
      }
      w.send(0, m.bytes);
    }
    for (uint8_t p : pending_syncs) w.sync(p);
    seed("fuzz_local_connection", w.out);
    seed("fuzz_shm_channel", w.out.substr(0, 1024));
  }
}

// ---- the decoders' and parsers' seeds ---------------------------------------------------

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string first_lines(const std::string& text, int n) {
  size_t at = 0;
  for (int i = 0; i < n && at != std::string::npos; ++i) at = text.find('\n', at + 1);
  return at == std::string::npos ? text : text.substr(0, at + 1);
}

void record_decoders() {
  for (const auto& [type, header] : headers) seed("fuzz_frame_header", header);
  // One of each kind (type, flags, aux length): nonces differ, shapes do not.
  std::map<std::string, std::string> distinct;
  for (const std::string& f : handshake_frames) distinct.emplace(f.substr(4, 4), f);
  for (const auto& [kind, f] : distinct) seed("fuzz_handshake", f);
  {
    wire::EncodedFrame r = wire::encode(wire::Rejected{Code::kUnauthenticated, "the shared secret does not match"});
    wire::HeaderBytes hb;
    wire::encode_header(r.header, hb);
    seed("fuzz_handshake", std::string(reinterpret_cast<const char*>(hb.data()), hb.size()) + r.aux);
  }

  Side side(target_options("tcp"));
  seed("fuzz_metadata", side.engine->metadata());
  wire::EngineMetadata m;
  m.engine_id = 0x1234;
  m.host_id = "host-a";
  m.addresses = {"10.0.0.2:7000", "10.0.1.2:7000", "[fe80::1]:7000"};
  seed("fuzz_metadata", wire::encode_metadata(m));
  seed("fuzz_descriptor", side.exported.serialize());
  RemoteDescriptor gpu = side.exported;
  gpu.kind = MemoryKind::kCuda;
  gpu.device = 1;
  seed("fuzz_descriptor", gpu.serialize());

  const std::string fixtures = FERRY_FIXTURES;
  for (const char* f : {"/vm/proc/interrupts", "/vm/proc/stat", "/a3high/proc/stat"}) {
    seed("fuzz_proc_files", slurp(fixtures + f));
  }
  seed("fuzz_proc_files", first_lines(slurp(fixtures + "/a3high/proc/interrupts"), 12));
  auto snap = diag::take_snapshot(fixtures + "/vm");
  check(snap.status(), "snapshot of the vm fixture");
  seed("fuzz_proc_files", diag::snapshot_to_json(*snap));
  auto plan = tune::make_plan(fixtures + "/vm", {});
  check(plan.status(), "plan of the vm fixture");
  seed("fuzz_proc_files", tune::plan_to_json(*plan));
  tune::Backup b;
  b.entries = {{"/proc/irq/45/smp_affinity_list", "0-207\n"}, {"/proc/sys/net/core/rmem_max", "212992\n"}};
  seed("fuzz_proc_files", tune::format_backup(b));
  for (const char* s :
       {"txrx", "spread", "10.0.0.2", "gve-ntfy-blk3@pci:0000:0c:00.0", "mlx5_comp12@pci:0000:0c:00.0"}) {
    seed("fuzz_proc_files", s);
  }

  for (const char* s : {"eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177",
                        "eth1:22-35,126-139;", "0-3,8,10-11", "0-207\n", "0,104", " 1 - 3 , 5 "}) {
    seed("fuzz_cpu_binding", s);
  }
  for (const char* s :
       {"4096", "64K", "1M,4M", "1K:256M:x4", "1K:8K:+1K", "1,4095,1M,8M", "7,65537,4M", "1G", "3KiB"}) {
    seed("fuzz_bench_sizes", s);
  }

  // Each tunable at its default, as `ferry config` prints it (the harness
  // reads a value from the front and the variable's number from the end).
  std::vector<TunableInfo> tunables = describe_tunables(target_options("tcp"));
  for (size_t i = 0; i < tunables.size(); i += 3) {
    seed("fuzz_environment", tunables[i].value + "\\\n" + static_cast<char>(i));
  }

  // The fixture trees as they are, one with each policy override, and the
  // VM with the GPU host's interrupts and CPU list.
  std::string vm = fixtures + "/vm";
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(vm); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_regular_file() && !it->is_symlink()) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  seed("fuzz_sysfs_tree", std::string("\x00\x00", 2));
  seed("fuzz_sysfs_tree", std::string("\xa3\x00", 2));
  seed("fuzz_sysfs_tree", std::string("\x00\x3f", 2));
  for (const char* f : {"/proc/interrupts", "/sys/devices/system/cpu/online"}) {
    auto it = std::find(files.begin(), files.end(), vm + f);
    if (it == files.end()) continue;
    InputWriter w;
    w.u8(0);
    w.u8(0);
    w.u16(static_cast<uint16_t>(it - files.begin()));
    std::string text =
        std::string(f) == "/proc/interrupts" ? first_lines(slurp(fixtures + "/a3high" + f), 8) : std::string("0-3,6\n");
    w.u16(static_cast<uint16_t>(text.size()));
    w.out += text;
    seed("fuzz_sysfs_tree", w.out);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  record_tcp(false);
  record_tcp(true);
  record_tcp_secret();
  record_local();
  record_decoders();
  for (const auto& [harness, n] : written) std::printf("%s: %d seeds\n", harness.c_str(), n);
  return 0;
}
