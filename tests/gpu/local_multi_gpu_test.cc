// One engine serves every GPU of its process: process A drives half of the
// host's GPUs (up to four) and talks, over one connection, to process B
// driving the other half (GPUs 0-3 and 4-7 on a host of eight, 0,1 and 2,3 on
// four; both processes on GPUs 0 and 1 on a host of two). Every pair of A's
// and B's GPUs moves random bytes both ways by send/recv, by write with a
// notification and by read, at odd sizes and offsets, first one pair at a
// time and then all pairs at once; the receiving process verifies every
// byte; neither process may hold a context (or memory) on a GPU it does not
// use. The transport is the local one, or FERRY_TRANSPORT's (tcp: the same
// over loopback, staged through host memory). Exits 77 (skipped) with fewer
// than two GPUs, 1 on any failure.
//
// Usage: ferry_local_multi_gpu_test                         (process A)
//        ferry_local_multi_gpu_test peer ADDR DEV0 DEV1...  (process B)
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ferry/engine.h"
#include "gpu/gpu_memory.h"

using namespace ferry;
using namespace ferry::testing;
using namespace std::chrono_literals;

namespace {

constexpr size_t kBytes = (16u << 20) + 4096;  // per GPU
constexpr size_t kSkip = 64;                   // regions start inside their allocation
constexpr size_t kOffset = 5;                  // transfers at odd offsets in them
const std::vector<size_t> kSizes = {1, 4095, (1u << 20) + 3, (8u << 20) + 7};

Deadline soon() { return after(60s); }

struct Process {
  bool is_a = false;
  std::unique_ptr<Engine> engine;
  std::shared_ptr<Connection> conn;
  std::vector<int> devices;
  std::vector<GpuBuffer> buffers;             // one per device
  std::vector<RemoteDescriptor> peer_exports;  // the peer's, one per its device
  std::vector<uint8_t> ctl = std::vector<uint8_t>(64);
  int failures = 0;

  uint8_t* at(size_t d) { return buffers[d].ptr + kSkip + kOffset; }
};

void fail(Process& p, const std::string& what) {
  std::fprintf(stderr, "FAIL %s: %s\n", p.is_a ? "A" : "B", what.c_str());
  ++p.failures;
}

// The receiver sends its verdict; both sides count a failure.
void verdict(Process& p, bool i_verify, const std::string& problem, const std::string& what) {
  if (i_verify) {
    p.ctl[0] = problem.empty() ? 1 : 0;
    if (!problem.empty()) fail(p, what + ": " + problem);
    (void)p.conn->send(p.ctl.data(), 1, soon());
  } else {
    auto n = p.conn->recv(p.ctl.data(), 1, soon());
    if (!n.ok() || p.ctl[0] != 1) fail(p, what + ": the receiver says no");
  }
}

void barrier(Process& p) {
  uint8_t* b = p.ctl.data() + 8;
  if (p.is_a) {
    (void)p.conn->send(b, 1, soon());
    (void)p.conn->recv(b, 1, soon());
  } else {
    (void)p.conn->recv(b, 1, soon());
    (void)p.conn->send(b, 1, soon());
  }
}

// A's device index `ia` and B's `ib`, one operation, `n` bytes.
void one_pair(Process& p, const std::string& op, bool a_to_b, size_t ia, size_t ib, size_t n, uint64_t seed) {
  size_t mine = p.is_a ? ia : ib;
  size_t theirs = p.is_a ? ib : ia;
  bool i_send = p.is_a == a_to_b;
  std::string what = op + (a_to_b ? " A->B" : " B->A") + ", A's GPU #" + std::to_string(ia) + " and B's GPU #" +
                     std::to_string(ib) + ", " + std::to_string(n) + " B";
  if (op == "send") {
    if (i_send) {
      fill(p.at(mine), n, seed);
      Status s = p.conn->send(p.at(mine), n, soon());
      if (!s.ok()) fail(p, what + ": " + s.to_string());
      verdict(p, false, "", what);
    } else {
      poison(p.at(mine), n);
      auto got = p.conn->recv(p.at(mine), n, soon());
      verdict(p, true, !got.ok() ? got.status().to_string() : check(p.at(mine), n, seed), what);
    }
  } else if (op == "write") {
    std::string note = "n" + std::to_string(seed);
    // Nothing orders a write after the receiver's poisoning but this barrier.
    if (i_send) {
      fill(p.at(mine), n, seed);
      barrier(p);
      Status s = p.conn->write(p.at(mine), n, p.peer_exports[theirs], kOffset, note, soon());
      if (!s.ok()) fail(p, what + ": " + s.to_string());
      verdict(p, false, "", what);
    } else {
      poison(p.at(mine), n);
      barrier(p);
      auto got = p.conn->wait_notification(soon());
      std::string problem = !got.ok() ? got.status().to_string()
                            : *got != note ? "notification '" + *got + "'"
                                           : check(p.at(mine), n, seed);
      verdict(p, true, problem, what);
    }
  } else {  // read: the receiving side reads the sending side's export
    if (i_send) {
      fill(p.at(mine), n, seed);
      barrier(p);
      verdict(p, false, "", what);
    } else {
      poison(p.at(mine), n);
      barrier(p);
      Status s = p.conn->read(p.at(mine), n, p.peer_exports[theirs], kOffset, soon());
      verdict(p, true, s.ok() ? check(p.at(mine), n, seed) : s.to_string(), what);
    }
  }
}

// Every pair at once: A writes from each of its GPUs into each of B's, all
// posted before any is waited for; B checks each range after the last
// notification. Each pair lands in its own slice of B's buffer.
void all_pairs_at_once(Process& p, uint64_t seed) {
  const size_t pairs = p.devices.size() * p.devices.size();
  const size_t slice = (kBytes - kSkip - kOffset) / p.devices.size();
  const size_t n = slice - 4096 - 3;
  if (p.is_a) {
    barrier(p);  // B has poisoned its buffers
    std::vector<Transfer> ts;
    for (size_t ia = 0; ia < p.devices.size(); ++ia) {
      for (size_t ib = 0; ib < p.devices.size(); ++ib) {
        uint8_t* src = p.at(ia) + ib * slice;
        fill(src, n, seed + ia * 16 + ib);
        ts.push_back(p.conn->write_async(src, n, p.peer_exports[ib], kOffset + ia * slice, "all"));
      }
    }
    for (auto& t : ts) {
      Status s = t.wait(soon());
      if (!s.ok()) fail(p, "all pairs at once: " + s.to_string());
    }
    verdict(p, false, "", "all pairs at once");
  } else {
    for (size_t ib = 0; ib < p.devices.size(); ++ib) poison(p.at(ib), kBytes - kSkip - kOffset);
    barrier(p);
    std::string problem;
    for (size_t i = 0; i < pairs; ++i) {
      auto got = p.conn->wait_notification(soon());
      if (!got.ok()) problem += got.status().to_string() + "; ";
    }
    for (size_t ia = 0; ia < p.devices.size(); ++ia) {
      for (size_t ib = 0; ib < p.devices.size(); ++ib) {
        std::string c = check(p.at(ib) + ia * slice, n, seed + ia * 16 + ib);
        if (!c.empty()) problem += "A" + std::to_string(ia) + "->B" + std::to_string(ib) + ": " + c + "; ";
      }
    }
    verdict(p, true, problem, "all pairs at once");
  }
}

int run(Process& p) {
  std::string mine;
  for (int d : p.devices) {
    p.buffers.push_back(gpu_alloc(d, kBytes));
    if (p.buffers.back().ptr == nullptr) {
      fail(p, "cannot allocate on GPU " + std::to_string(d));
      return 1;
    }
    auto r = p.engine->reg(p.buffers.back().ptr + kSkip, kBytes - kSkip);
    if (!r.ok() || r->kind != MemoryKind::kCuda || r->device != d) {
      fail(p, "registration on GPU " + std::to_string(d) + ": " + (r.ok() ? "wrong kind or device" : r.status().to_string()));
      return 1;
    }
    mine += p.engine->export_region(*r).value().serialize();
  }
  auto cr = p.engine->reg(p.ctl.data(), p.ctl.size());
  std::string theirs(mine.size(), '\0');
  auto mr = p.engine->reg(mine.data(), mine.size());
  auto tr = p.engine->reg(theirs.data(), theirs.size());
  if (p.is_a) {
    (void)p.conn->send(mine.data(), mine.size(), soon());
    (void)p.conn->recv(theirs.data(), theirs.size(), soon());
  } else {
    (void)p.conn->recv(theirs.data(), theirs.size(), soon());
    (void)p.conn->send(mine.data(), mine.size(), soon());
  }
  const size_t each = theirs.size() / p.devices.size();
  for (size_t d = 0; d < p.devices.size(); ++d) {
    auto desc = RemoteDescriptor::parse(theirs.substr(d * each, each));
    if (!desc.ok()) {
      fail(p, "peer export " + std::to_string(d) + ": " + desc.status().to_string());
      return 1;
    }
    p.peer_exports.push_back(*desc);
  }
  if (p.conn->transport_name() != to_string(p.engine->options().transport)) {
    fail(p, "the connection uses the " + std::string(p.conn->transport_name()) + " transport, not " +
                std::string(to_string(p.engine->options().transport)));
    return 1;
  }
  // FERRY_TEST_PAIRS="10,01" limits the pairs (A's index, B's index) to try.
  const char* only = std::getenv("FERRY_TEST_PAIRS");
  auto wanted = [only](size_t ia, size_t ib) {
    return only == nullptr || std::string(only).find(std::to_string(ia) + std::to_string(ib)) != std::string::npos;
  };
  uint64_t seed = 1;
  for (const char* op : {"send", "write", "read"}) {
    for (size_t ia = 0; ia < p.devices.size(); ++ia) {
      for (size_t ib = 0; ib < p.devices.size(); ++ib) {
        if (!wanted(ia, ib)) continue;
        for (size_t n : kSizes) {
          for (bool a_to_b : {true, false}) one_pair(p, op, a_to_b, ia, ib, n, seed++);
        }
      }
    }
  }
  all_pairs_at_once(p, 1000);
  // Nothing of this process may live on the other side's GPUs: no context
  // there, so no memory either (a context is what any allocation needs).
  if (gpu_count() >= 4) {
    const auto& d = platform::cuda();
    for (int g = 0; g < gpu_count(); ++g) {
      if (std::find(p.devices.begin(), p.devices.end(), g) != p.devices.end()) continue;
      unsigned flags = 0;
      int active = 0;
      if (d.primary_ctx_get_state(g, &flags, &active) != cu::kSuccess) {
        fail(p, "cannot ask for GPU " + std::to_string(g) + "'s context");
      } else if (active != 0) {
        fail(p, "the engine made a context on GPU " + std::to_string(g) + ", which this process does not use");
      }
    }
  }
  barrier(p);
  return p.failures == 0 ? 0 : 1;
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int d : v) s += (s.empty() ? "" : ",") + std::to_string(d);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int gpus = gpu_count();
  if (gpus < 2) {
    std::printf("skip: needs two GPUs, found %d\n", gpus);
    return 77;
  }
  Options o;
  const char* transport = std::getenv("FERRY_TRANSPORT");
  o.transport = parse_transport(transport != nullptr && *transport != '\0' ? transport : "local").value();
  Process p;
  p.engine = Engine::create(o).value();
  if (argc >= 5 && std::string(argv[1]) == "peer") {
    for (int i = 3; i < argc; ++i) p.devices.push_back(std::atoi(argv[i]));
    auto c = p.engine->connect(argv[2], soon());
    if (!c.ok()) {
      std::fprintf(stderr, "FAIL B connect: %s\n", c.status().to_string().c_str());
      return 1;
    }
    p.conn = *c;
    return run(p);
  }
  p.is_a = true;
  const int half = gpus >= 4 ? std::min(gpus / 2, 4) : 2;
  std::vector<int> peer;
  for (int i = 0; i < half; ++i) {
    p.devices.push_back(i);
    peer.push_back(gpus >= 4 ? half + i : i);
  }
  std::vector<std::string> args = {argv[0], "peer", p.engine->address()};
  for (int d : peer) args.push_back(std::to_string(d));
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t child = ::fork();
  if (child == 0) {
    ::execv("/proc/self/exe", cargs.data());
    _exit(127);
  }
  auto c = p.engine->accept(soon());
  if (!c.ok()) {
    std::fprintf(stderr, "FAIL A accept: %s\n", c.status().to_string().c_str());
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return 1;
  }
  p.conn = *c;
  auto t0 = std::chrono::steady_clock::now();
  int rc = run(p);
  int status = 0;
  ::waitpid(child, &status, 0);
  bool child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("multi-GPU test (%s): A on GPUs %s <-> B on GPUs %s, one engine each: %s (process B %s), %.1f s\n",
              std::string(to_string(o.transport)).c_str(), list(p.devices).c_str(), list(peer).c_str(),
              rc == 0 ? "passed" : "FAILED", child_ok ? "passed" : "FAILED", secs);
  return rc == 0 && child_ok ? 0 : 1;
}
