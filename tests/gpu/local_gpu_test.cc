// Two processes on one host move GPU memory through the local transport:
// every operation, GPU->GPU both ways, host->GPU and GPU->host, sizes from
// 1 B to 1 GiB (odd ones, odd offsets, regions inside larger allocations),
// data verified by the receiving process; batches of thousands of scattered
// blocks of odd sizes and alignments GPU->GPU (the gather kernel's batches:
// pieces cut, several launches, bytes copied one by one where the two ends
// disagree modulo 16), every byte of the target checked; memory from CUDA's virtual memory
// API split over several physical allocations; a region deregistered while
// the peer holds its handle; memory allocated again at a freed address while
// a failed connection still holds the old mapping; and no memory taken on a
// GPU a process does not use. Exits 77 (skipped) without a GPU, 1 on any failure.
//
// Usage: ferry_local_gpu_test            (process A, spawns process B)
//        ferry_local_gpu_test peer ADDR DEVICE   (process B)
#include <execinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ferry/engine.h"
#include "gpu/gpu_memory.h"
#include "gpu/memory_kind.h"

using namespace ferry;
using namespace ferry::testing;
using namespace std::chrono_literals;

namespace {

constexpr size_t kGpuBytes = (1ull << 30) + 4096;
constexpr size_t kHostBytes = (64ull << 20) + 4096;
constexpr size_t kRegionSkip = 64;  // regions start inside their allocation
constexpr size_t kOffset = 3;       // and transfers at odd offsets in them

int failures = 0;
#define EXPECT_OK(expr, what)                                                                   \
  do {                                                                                          \
    auto _s = (expr);                                                                           \
    if (!_s.ok()) {                                                                             \
      std::fprintf(stderr, "FAIL %s: %s\n", std::string(what).c_str(), _s.to_string().c_str()); \
      ++failures;                                                                               \
    }                                                                                           \
  } while (0)

Deadline soon() { return after(60s); }

RemoteDescriptor parse_or_empty(const std::string& bytes) {
  auto r = RemoteDescriptor::parse(bytes);
  return r.ok() ? *r : RemoteDescriptor{};
}

struct Side {
  std::unique_ptr<Engine> engine;
  std::shared_ptr<Connection> conn;
  GpuBuffer gpu;
  std::vector<uint8_t> host;
  uint8_t* gpu_base = nullptr;   // registered GPU region start
  uint8_t* host_base = nullptr;  // registered host region start
  RemoteDescriptor peer_gpu, peer_host;
  bool is_a = false;
  std::string a_address;                                // B: where A listens
  pid_t peer_pid = 0;
  int peer_device = 0;
  std::vector<uint8_t> ctl = std::vector<uint8_t>(64);  // registered; results and barriers travel through it
};

// The receiving side reports whether the data checked out; both sides learn it.
bool report(Side& s, bool i_verify, const std::string& problem, const std::string& what) {
  bool ok;
  if (i_verify) {
    s.ctl[0] = problem.empty() ? 1 : 0;
    Status st = s.conn->send(s.ctl.data(), 1, soon());
    ok = s.ctl[0] == 1 && st.ok();
  } else {
    auto n = s.conn->recv(s.ctl.data(), 1, soon());
    ok = n.ok() && s.ctl[0] == 1;
  }
  if (!ok) {
    std::fprintf(stderr, "FAIL %s%s%s\n", what.c_str(), problem.empty() ? "" : ": ", problem.c_str());
    ++failures;
  }
  return ok;
}

void sync(Side& s) {
  uint8_t* b = s.ctl.data() + 8;
  if (s.is_a) {
    s.conn->send(b, 1, soon());
    (void)s.conn->recv(b, 1, soon());
  } else {
    (void)s.conn->recv(b, 1, soon());
    s.conn->send(b, 1, soon());
  }
}

// B registers [ptr, ptr+size) and sends its export to A, through `desc` (a
// registered buffer); A returns what it received. `region` keeps B's region.
RemoteDescriptor share_region(Side& s, std::string& desc, uint8_t* ptr, size_t size, std::optional<Region>& region) {
  if (!s.is_a) {
    region.reset();
    auto r = s.engine->reg(ptr, size);
    if (r.ok()) {
      region = *r;
      desc.replace(0, desc.size(), s.engine->export_region(*r).value().serialize());
    }
    s.conn->send(desc.data(), desc.size(), soon());
    return {};
  }
  s.conn->recv(desc.data(), desc.size(), soon());
  return parse_or_empty(desc);
}

uint8_t* mem(Side& s, bool gpu) { return (gpu ? s.gpu_base : s.host_base) + kOffset; }

void one_case(Side& s, const char* op, bool a_sends, bool src_gpu, bool dst_gpu, size_t n, uint64_t seed) {
  bool i_send = s.is_a == a_sends;
  std::string what = std::string(op) + (a_sends ? " A->B " : " B->A ") + (src_gpu ? "gpu" : "host") + "->" +
                     (dst_gpu ? "gpu" : "host") + " " + std::to_string(n) + " B";
  if (!src_gpu || !dst_gpu) {
    if (n > kHostBytes - kRegionSkip - kOffset) return;
  }
  std::string op_s(op);
  if (op_s == "send") {
    if (i_send) {
      fill(mem(s, src_gpu), n, seed);
      EXPECT_OK(s.conn->send(mem(s, src_gpu), n, soon()), what);
      report(s, false, "", what);
    } else {
      poison(mem(s, dst_gpu), n);
      auto got = s.conn->recv(mem(s, dst_gpu), n + 1, soon());
      std::string problem = !got.ok()   ? got.status().to_string()
                            : *got != n ? "size " + std::to_string(*got)
                                        : check(mem(s, dst_gpu), n, seed);
      report(s, true, problem, what);
    }
  } else if (op_s == "write") {
    // The sender writes into the receiver's export, with a notification.
    const RemoteDescriptor& far = dst_gpu ? s.peer_gpu : s.peer_host;
    std::string note = "w" + std::to_string(seed);
    // Nothing orders a write after the receiver's poisoning but this sync.
    if (i_send) {
      fill(mem(s, src_gpu), n, seed);
      sync(s);
      EXPECT_OK(s.conn->write(mem(s, src_gpu), n, far, kOffset, note, soon()), what);
      report(s, false, "", what);
    } else {
      poison(mem(s, dst_gpu), n);
      sync(s);
      auto got = s.conn->wait_notification(soon());
      std::string problem = !got.ok()      ? got.status().to_string()
                            : *got != note ? "notification '" + *got + "'"
                                           : check(mem(s, dst_gpu), n, seed);
      report(s, true, problem, what);
    }
  } else {
    // read: the receiver reads the sender's export.
    const RemoteDescriptor& far = src_gpu ? s.peer_gpu : s.peer_host;
    if (i_send) {
      fill(mem(s, src_gpu), n, seed);
      sync(s);
      report(s, false, "", what);
    } else {
      poison(mem(s, dst_gpu), n);
      sync(s);
      Status st = s.conn->read(mem(s, dst_gpu), n, far, kOffset, soon());
      report(s, true, st.ok() ? check(mem(s, dst_gpu), n, seed) : st.to_string(), what);
    }
  }
}

// Block writes into the peer's GPU region: A writes batches of scattered
// blocks (both sides draw the same layout from `seed`), B checks its whole
// target span, blocks and the gaps between them.
void block_batches(Side& s, const Region& gpu_region) {
  constexpr size_t kSpan = 64u << 20;
  std::optional<BlockPools> pools;
  if (s.is_a) {
    auto p = s.conn->prepare_blocks(std::span(&gpu_region, 1), std::span(&s.peer_gpu, 1));
    EXPECT_OK(p.status(), "prepare_blocks");
    if (p.ok()) pools = *p;
  }
  struct Shape {
    size_t count;
    uint64_t hi;    // sizes 1..hi, or exactly hi when `exact`
    bool exact;
    uint64_t align; // offsets are multiples of this
  };
  uint64_t seed = 4000;
  for (Shape shape : {Shape{256, 16384, true, 16}, Shape{1024, 4096, true, 4096}, Shape{2500, 9000, false, 1},
                      Shape{40, 300000, false, 16}}) {
    ++seed;
    std::mt19937_64 rng(seed);
    const uint64_t slot = (shape.hi + 64 + shape.align - 1) / shape.align * shape.align;
    std::vector<uint64_t> a(kSpan / slot), b(kSpan / slot);
    for (size_t i = 0; i < a.size(); ++i) a[i] = b[i] = i;
    std::shuffle(a.begin(), a.end(), rng);
    std::shuffle(b.begin(), b.end(), rng);
    std::vector<Block> blocks;
    for (size_t i = 0; i < shape.count && i < a.size(); ++i) {
      uint64_t wiggle = shape.align == 1 ? 64 : 1;  // odd offsets on either side, independently
      uint64_t n = shape.exact ? shape.hi : 1 + rng() % shape.hi;
      blocks.push_back({0, 0, a[i] * slot + rng() % wiggle, b[i] * slot + rng() % wiggle, n});
    }
    std::string what = "block write of " + std::to_string(blocks.size()) + " blocks up to " +
                       std::to_string(shape.hi) + " B GPU->GPU";
    std::string note = "blocks" + std::to_string(seed);
    if (s.is_a) {
      fill(s.gpu_base, kSpan, seed);
      sync(s);
      if (pools) EXPECT_OK(s.conn->write_blocks_async(*pools, blocks, note).wait(soon()), what);
      report(s, false, "", what);
    } else {
      poison(s.gpu_base, kSpan);
      sync(s);
      auto got = s.conn->wait_notification(soon());
      std::string problem;
      if (!got.ok() || *got != note) {
        problem = got.ok() ? "notification '" + *got + "'" : got.status().to_string();
      } else {
        std::vector<uint8_t> expect(kSpan, 0), have(kSpan);
        for (const Block& k : blocks) {
          for (uint64_t i = 0; i < k.size; ++i) expect[k.remote_offset + i] = pattern_byte(seed, k.local_offset + i);
        }
        if (!copy_to(have.data(), s.gpu_base, kSpan)) problem = "copy back failed";
        auto diff = std::mismatch(expect.begin(), expect.end(), have.begin());
        if (problem.empty() && diff.first != expect.end()) {
          problem = "byte " + std::to_string(diff.first - expect.begin()) + " of the target is " +
                    std::to_string(*diff.second) + ", expected " + std::to_string(*diff.first);
        }
      }
      report(s, true, problem, what);
    }
  }
}

// MiB that process `pid` holds on GPU `device`, as the driver lists compute
// processes (nvidia-smi): 0 when it is not listed there, -1 when nvidia-smi
// cannot say (absent, or listing nothing). Per process, not the device's free memory, which other
// programs using the same GPU at the same time would move.
long long process_gpu_mib(int device, pid_t pid) {
  std::string bus = platform::gpu_pci_address(device);
  FILE* f = ::popen(
      "nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv,noheader,nounits 2>/dev/null", "r");
  if (f == nullptr || bus.empty()) {
    if (f != nullptr) ::pclose(f);
    return -1;
  }
  long long mib = 0;
  bool listed_any = false;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    long long p = 0, used = 0;
    char id[64] = {};
    if (std::sscanf(line, "%lld, %63[^,], %lld", &p, id, &used) != 3) continue;
    listed_any = true;
    std::string b(id);
    for (char& c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (b.size() > 12 && b.find(':') == 8) b = b.substr(4);  // the 8-digit domain, as gpu_pci_address shortens it
    if (p == pid && b == bus) mib += used;
  }
  int rc = ::pclose(f);
  return rc == 0 && listed_any ? mib : -1;
}

int run(Side& s, int device) {
  s.gpu = gpu_alloc(device, kGpuBytes);
  if (s.gpu.ptr == nullptr) {
    std::fprintf(stderr, "FAIL cannot allocate %zu bytes on GPU %d\n", kGpuBytes, device);
    return 1;
  }
  s.host.resize(kHostBytes);
  s.gpu_base = s.gpu.ptr + kRegionSkip;
  s.host_base = s.host.data() + kRegionSkip;
  auto gr = s.engine->reg(s.gpu_base, kGpuBytes - kRegionSkip);
  auto hr = s.engine->reg(s.host_base, kHostBytes - kRegionSkip);
  auto cr = s.engine->reg(s.ctl.data(), s.ctl.size());
  if (!gr.ok() || !hr.ok() || gr->kind != MemoryKind::kCuda || gr->device != device) {
    std::fprintf(stderr, "FAIL registration: %s\n", gr.ok() ? "wrong kind" : gr.status().to_string().c_str());
    return 1;
  }
  // Exchange exports (A first).
  std::string mine =
      s.engine->export_region(*gr).value().serialize() + s.engine->export_region(*hr).value().serialize();
  std::string theirs(mine.size(), '\0');
  std::vector<uint8_t> tmp(mine.size());
  auto swap_descriptors = [&] {
    if (s.is_a) {
      s.conn->send(mine.data(), mine.size(), soon());
      s.conn->recv(theirs.data(), theirs.size(), soon());
    } else {
      s.conn->recv(theirs.data(), theirs.size(), soon());
      s.conn->send(mine.data(), mine.size(), soon());
    }
  };
  auto dr = s.engine->reg(mine.data(), mine.size());
  auto dt = s.engine->reg(theirs.data(), theirs.size());
  swap_descriptors();
  size_t half = theirs.size() / 2;
  s.peer_gpu = RemoteDescriptor::parse(theirs.substr(0, half)).value();
  s.peer_host = RemoteDescriptor::parse(theirs.substr(half)).value();
  if (s.conn->transport_name() != "local") {
    std::fprintf(stderr, "FAIL the connection uses %s, not the local transport\n",
                 std::string(s.conn->transport_name()).c_str());
    return 1;
  }
  long long mine_before = process_gpu_mib(device, ::getpid());
  std::fprintf(stderr, "%s: GPU %d ready, this process holds %lld MiB on it\n", s.is_a ? "A" : "B", device, mine_before);

  const std::vector<size_t> sizes = {1, 7, 4095, 4096, (1u << 20) + 3, (64u << 20) + 5, 1u << 30};
  uint64_t seed = 1;
  for (const char* op : {"send", "write", "read"}) {
    for (size_t n : sizes) {
      for (bool a_sends : {true, false}) {
        one_case(s, op, a_sends, true, true, n, seed++);
        if (n <= (64u << 20) + 5) {
          one_case(s, op, a_sends, false, true, n, seed++);
          one_case(s, op, a_sends, true, false, n, seed++);
        }
      }
    }
  }

  block_batches(s, *gr);

  // sendv/recvv with parts in both kinds of memory on both sides.
  {
    size_t a = 1000003, b = 77;
    if (s.is_a) {
      fill(s.gpu_base, a, 901);
      fill(s.host_base, b, 902);
      ConstBuffer parts[] = {{s.gpu_base, a}, {s.host_base, b}};
      EXPECT_OK(s.conn->sendv(parts, soon()), "sendv gpu+host");
      report(s, false, "", "sendv gpu+host -> recvv gpu+gpu");
    } else {
      poison(s.gpu_base, a + b + 64);
      MutableBuffer parts[] = {{s.gpu_base, a}, {s.gpu_base + a + 64, b}};
      auto got = s.conn->recvv(parts, soon());
      std::string problem =
          !got.ok() ? got.status().to_string() : check(s.gpu_base, a, 901) + check(s.gpu_base + a + 64, b, 902);
      report(s, true, problem, "sendv gpu+host -> recvv gpu+gpu");
    }
  }

  // Memory from the virtual memory API, three physical pieces, written across
  // the piece boundaries and read back.
  {
    GpuBuffer v;
    std::string desc(48, '\0');
    auto dd = s.engine->reg(desc.data(), desc.size());
    std::optional<Region> vr;
    if (!s.is_a) {
      v = gpu_alloc_vmm(device, 2u << 20, 3);
      if (v.ptr == nullptr) {
        std::fprintf(stderr, "FAIL cuMemCreate allocation\n");
        ++failures;
      }
    }
    RemoteDescriptor far = share_region(s, desc, v.ptr, v.size, vr);
    size_t n = (5u << 20) + 1, at = (1u << 20) - 1;  // to the very end, across both piece boundaries
    if (s.is_a) {
      fill(s.gpu_base, n, 777);
      EXPECT_OK(s.conn->write(s.gpu_base, n, far, at, {}, soon()), "write into virtual-memory allocation");
      poison(s.gpu_base + n + 64, n);
      EXPECT_OK(s.conn->read(s.gpu_base + n + 64, n, far, at, soon()), "read from virtual-memory allocation");
      std::string problem = check(s.gpu_base + n + 64, n, 777);
      report(s, true, problem, "virtual-memory allocation round trip");
    } else {
      report(s, false, "", "virtual-memory allocation round trip");
      std::string problem = v.ptr ? check(v.ptr + at, n, 777) : "no allocation";
      report(s, true, problem, "virtual-memory allocation holds the written bytes");
      if (vr) s.engine->dereg(*vr);
    }
    if (s.is_a) report(s, false, "", "virtual-memory allocation holds the written bytes");
  }

  // A region deregistered while the peer holds its handle: a clear error.
  {
    std::string desc(48, '\0');
    auto dd = s.engine->reg(desc.data(), desc.size());
    uint8_t* small = s.gpu_base + (512u << 20);
    std::optional<Region> r;
    RemoteDescriptor far = share_region(s, desc, small, 4096, r);
    if (s.is_a) EXPECT_OK(s.conn->write(s.gpu_base, 4096, far, 0, {}, soon()), "write before dereg");
    sync(s);
    if (!s.is_a && r) EXPECT_OK(s.engine->dereg(*r), "dereg while the peer holds the handle");
    sync(s);
    if (s.is_a) {
      Status st = s.conn->write(s.gpu_base, 4096, far, 0, {}, soon());
      if (st.code() != Code::kNotFound) {
        std::fprintf(stderr, "FAIL write after the peer's dereg: want not_found, got %s\n", st.to_string().c_str());
        ++failures;
      } else {
        std::printf("write after dereg: %s\n", st.to_string().c_str());
      }
    }
    sync(s);
  }

  // A mapping that a failed connection (not closed yet) still holds must not
  // stand in for memory the peer allocated again at the same address after
  // deregistering the old: A writes into B's allocation over both of two
  // connections, B closes the second, deregisters, puts new memory at the
  // same address and registers it again; A's next write must land there.
  {
    std::shared_ptr<Connection> second;
    auto c = s.is_a ? s.engine->accept(soon()) : s.engine->connect(s.a_address, soon());
    if (c.ok()) {
      second = *c;
    } else {
      std::fprintf(stderr, "FAIL second connection: %s\n", c.status().to_string().c_str());
      return 1;
    }
    std::string desc(48, '\0');
    auto dd = s.engine->reg(desc.data(), desc.size());
    GpuBuffer v;
    std::optional<Region> vr;
    RemoteDescriptor far;
    const size_t n = (64u << 10) + 5, at = 3;
    if (!s.is_a) v = gpu_alloc_vmm(device, 2u << 20, 1);
    far = share_region(s, desc, v.ptr, v.size, vr);
    if (s.is_a) {
      fill(s.gpu_base, n, 1201);
      EXPECT_OK(s.conn->write(s.gpu_base, n, far, at, {}, soon()), "write over the first connection");
      EXPECT_OK(second->write(s.gpu_base, n, far, at, {}, soon()), "write over the second connection");
    }
    sync(s);
    if (!s.is_a) {
      second->close();
    } else {
      auto until = soon();
      while (second->health().ok() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      if (second->health().ok()) {
        std::fprintf(stderr, "FAIL the second connection did not fail when the peer closed it\n");
        ++failures;
      }
    }
    sync(s);
    if (!s.is_a) {
      if (vr) EXPECT_OK(s.engine->dereg(*vr), "dereg before allocating again");
      if (!gpu_vmm_replace(v)) {
        std::fprintf(stderr, "FAIL new memory at the same address\n");
        ++failures;
      }
      poison(v.ptr, v.size);
    }
    far = share_region(s, desc, v.ptr, v.size, vr);
    if (s.is_a) {
      fill(s.gpu_base, n, 1202);
      EXPECT_OK(s.conn->write(s.gpu_base, n, far, at, {}, soon()), "write into memory allocated again");
      sync(s);
      report(s, false, "", "memory allocated again at a freed address holds the write");
      second->close();
    } else {
      sync(s);
      report(s, true, check(v.ptr + at, n, 1202), "memory allocated again at a freed address holds the write");
      if (vr) s.engine->dereg(*vr);
    }
  }

  // The peer's traffic took no memory on this GPU (a context made here by the
  // other process would take hundreds of MiB).
  // The transfers took no memory on this GPU: none in this process beyond
  // what it held when ready, and, where the peer uses another GPU, no
  // context of the peer here (which would take hundreds of MiB).
  long long mine_after = process_gpu_mib(device, ::getpid());
  // Not listed at all, though it holds a GiB there: nvidia-smi sees another
  // PID namespace, and cannot say.
  if (mine_before <= 0 || mine_after <= 0) {
    std::printf("%s: GPU %d memory per process not checked: nvidia-smi does not list this process\n",
                s.is_a ? "A" : "B", device);
  } else {
    std::printf("%s: this process's memory on GPU %d changed by %lld MiB during the transfers\n", s.is_a ? "A" : "B",
                device, mine_after - mine_before);
    if (mine_after - mine_before > 64) {
      std::fprintf(stderr, "FAIL %lld MiB taken on GPU %d during the run\n", mine_after - mine_before, device);
      ++failures;
    }
    long long peer_here = s.peer_device == device ? 0 : process_gpu_mib(device, s.peer_pid);
    if (peer_here != 0) {
      std::fprintf(stderr, "FAIL the peer (pid %d) holds %lld MiB on GPU %d, which it does not use\n",
                   static_cast<int>(s.peer_pid), peer_here, device);
      ++failures;
    }
  }
  sync(s);
  return failures == 0 ? 0 : 1;
}

// A crash in either process is reported with its stack, not as silence.
void on_crash(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  char line[64];
  int len = std::snprintf(line, sizeof(line), "FAIL pid %d: signal %d\n", static_cast<int>(getpid()), sig);
  (void)!write(2, line, static_cast<size_t>(len));
  backtrace_symbols_fd(frames, n, 2);
  _exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, on_crash);
  int gpus = gpu_count();
  if (gpus == 0) {
    std::printf("skip: no GPU\n");
    return 77;
  }
  Options o;
  o.transport = TransportChoice::kLocal;
  Side s;
  if (argc >= 4 && std::string(argv[1]) == "peer") {
    s.is_a = false;
    s.a_address = argv[2];
    s.engine = Engine::create(o).value();
    auto c = s.engine->connect(argv[2], soon());
    if (!c.ok()) {
      std::fprintf(stderr, "FAIL B connect: %s\n", c.status().to_string().c_str());
      return 1;
    }
    s.conn = *c;
    s.peer_pid = ::getppid();
    s.peer_device = 0;
    return run(s, std::atoi(argv[3]));
  }
  s.is_a = true;
  s.engine = Engine::create(o).value();
  int peer_device = gpus > 1 ? 1 : 0;
  pid_t child = ::fork();
  if (child == 0) {
    std::string addr = s.engine->address(), dev = std::to_string(peer_device);
    ::execl("/proc/self/exe", argv[0], "peer", addr.c_str(), dev.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  auto c = s.engine->accept(soon());
  if (!c.ok()) {
    std::fprintf(stderr, "FAIL A accept: %s\n", c.status().to_string().c_str());
    return 1;
  }
  s.conn = *c;
  s.peer_pid = child;
  s.peer_device = peer_device;
  auto t0 = std::chrono::steady_clock::now();
  int rc = run(s, 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  bool child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!child_ok) {
    std::printf("process B: %s %d\n", WIFSIGNALED(status) ? "killed by signal" : "exit status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("local GPU test: GPU 0 <-> GPU %d, %s (process B %s), %.1f s\n", peer_device,
              rc == 0 ? "passed" : "FAILED", child_ok ? "passed" : "FAILED", secs);
  return rc == 0 && child_ok ? 0 : 1;
}
