// A local peer that names another peer's engine id must not reach that
// peer's GPU memory through the mappings the engine opened for it.
//
// Three processes on one GPU. The owner (an honest peer) exports GPU memory
// with a secret pattern; the victim (this process) reads it, which opens the
// owner's allocation here. The impostor then connects to the victim with the
// owner's engine id, holds GPU memory of its own at the very address of the
// owner's allocation (and under the same allocation id: each engine numbers
// its first export 1), and writes it into a host export of the victim. That
// write is copied by the victim (its host memory, the impostor's GPU memory),
// which looks the impostor's allocation up among its mappings: keyed by what
// the peer says, it would find the owner's and copy the owner's secret into
// the export, where the impostor can read it. The export must hold the
// impostor's bytes.
//
// Exits 77 (skipped) without a GPU or if the impostor cannot place its
// memory at the owner's address, 1 on any failure.
//
// Usage: ferry_local_gpu_impersonation_test                           (victim)
//        ferry_local_gpu_impersonation_test owner ADDR                 (owner)
//        ferry_local_gpu_impersonation_test impostor ADDR ID BASE      (impostor)
#include <sys/personality.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/engine_context.h"
#include "ferry/engine.h"
#include "gpu/gpu_memory.h"
#include "platform/crypto.h"
#include "platform/memory_kind.h"
#include "platform/socket.h"
#include "transport/local/gpu_sharing.h"
#include "transport/bootstrap/dialer.h"

using namespace ferry;
using namespace ferry::testing;
using namespace std::chrono_literals;

namespace {

constexpr size_t kBytes = 2u << 20;
constexpr uint64_t kSecret = 7, kImpostor = 9;

int fail(const std::string& what) {
  std::fprintf(stderr, "FAIL %s\n", what.c_str());
  return 1;
}

// The peers run without address-space randomisation, so that the same
// steps give the same addresses in both and the impostor can take, in its
// own process, the address of the owner's allocation (an attacker may learn
// it any way it likes; the test only makes that reliable).
pid_t spawn(std::vector<std::string> args) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::personality(ADDR_NO_RANDOMIZE);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid, std::chrono::seconds limit) {
  auto until = Clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(10ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The honest peer: exports GPU memory holding the secret, tells the victim
// where it is, and stays connected until told to go.
int owner(const std::string& address) {
  Options o;
  o.transport = TransportChoice::kLocal;
  auto engine = Engine::create(o).value();
  GpuBuffer gpu = gpu_alloc_vmm(0, kBytes, 1);
  if (gpu.ptr == nullptr || !fill(gpu.ptr, kBytes, kSecret)) return fail("owner: GPU memory");
  auto region = engine->reg(gpu.ptr, kBytes);
  if (!region.ok()) return fail("owner: reg: " + region.status().to_string());
  auto conn = engine->connect(address, after(30s));
  if (!conn.ok()) return fail("owner: connect: " + conn.status().to_string());
  std::string who = std::to_string(engine->id()) + " " + std::to_string(reinterpret_cast<uint64_t>(gpu.ptr));
  std::string desc = engine->export_region(*region).value().serialize();
  if (!(*conn)->notify(who, after(30s)).ok() || !(*conn)->notify(desc, after(30s)).ok()) {
    return fail("owner: telling the victim");
  }
  auto bye = (*conn)->wait_notification(after(120s));
  return bye.ok() ? 0 : fail("owner: no goodbye: " + bye.status().to_string());
}

// The hostile peer, built from the engine's parts so that it can name the
// owner's engine id in its handshake.
int impostor(const std::string& address, uint64_t owner_id, uint64_t owner_base) {
  auto ctx = std::make_shared<core::EngineContext>();
  ctx->options.transport = TransportChoice::kLocal;
  ctx->engine_id = owner_id;
  ctx->host_id = std::string(platform::host_id());
  ctx->gpu_exports = std::make_shared<local::GpuExports>();
  ctx->gpu_imports = std::make_shared<local::GpuImports>();
  auto to = platform::parse_host_port(address);
  if (!to.ok()) return fail("impostor: address");
  auto dialed = bootstrap::dial(ctx, *to, after(30s), [] { return uint64_t{1}; });
  if (!dialed.ok()) return fail("impostor: dial: " + dialed.status().to_string());
  std::shared_ptr<transport::ConnectionCore> conn = dialed->connection;
  // No engine drives this connection's heartbeat: a thread of its own does,
  // or the victim would find the impostor silent and drop it.
  std::atomic<bool> done{false};
  std::thread beats([&] {
    while (!done.load()) {
      conn->tick(Clock::now());
      std::this_thread::sleep_for(20ms);
    }
  });
  struct Join {
    std::atomic<bool>& done;
    std::thread& t;
    ~Join() {
      done = true;
      t.join();
    }
  } join{done, beats};
  GpuBuffer gpu = gpu_alloc_vmm(0, kBytes, 1, owner_base);
  if (gpu.ptr == nullptr || !fill(gpu.ptr, kBytes, kImpostor)) return fail("impostor: GPU memory");
  if (reinterpret_cast<uint64_t>(gpu.ptr) != owner_base) {
    std::fprintf(stderr, "impostor: memory landed at %p, not at the owner's 0x%" PRIx64 "\n",
                 static_cast<void*>(gpu.ptr), owner_base);
    (void)conn->notify("skip", after(30s));
    return 77;
  }
  if (!ctx->registry.add(gpu.ptr, kBytes, platform::classify_pointer(gpu.ptr)).ok()) return fail("impostor: reg");
  auto desc_note = conn->wait_notification(after(30s));
  if (!desc_note.ok()) return fail("impostor: no descriptor: " + desc_note.status().to_string());
  auto desc = RemoteDescriptor::parse(*desc_note);
  if (!desc.ok()) return fail("impostor: descriptor: " + desc.status().to_string());
  Status s = conn->write(gpu.ptr, kBytes, *desc, 0, "written", after(60s));
  if (!s.ok()) return fail("impostor: write: " + s.to_string());
  auto bye = conn->wait_notification(after(60s));
  conn->close();
  return bye.ok() ? 0 : fail("impostor: no goodbye");
}

int victim() {
  Options o;
  o.transport = TransportChoice::kLocal;
  auto engine = Engine::create(o).value();
  std::vector<uint8_t> read_into(kBytes), target(kBytes, 0);
  auto r1 = engine->reg(read_into.data(), kBytes);
  auto r2 = engine->reg(target.data(), kBytes);
  if (!r1.ok() || !r2.ok()) return fail("victim: reg");

  pid_t owner_pid = spawn({"test", "owner", engine->address()});
  auto to_owner = engine->accept(after(60s));
  if (!to_owner.ok()) return fail("victim: owner did not connect: " + to_owner.status().to_string());
  auto who = (*to_owner)->wait_notification(after(60s));
  auto owner_desc = (*to_owner)->wait_notification(after(60s));
  if (!who.ok() || !owner_desc.ok()) return fail("victim: owner's details");
  auto desc = RemoteDescriptor::parse(*owner_desc);
  if (!desc.ok()) return fail("victim: owner's descriptor");
  // Reading opens the owner's allocation in this process.
  Status rs = (*to_owner)->read(read_into.data(), kBytes, *desc, 0, after(60s));
  if (!rs.ok()) return fail("victim: read from the owner: " + rs.to_string());
  // This process has host memory only (no CUDA context): compared here.
  const std::vector<uint8_t> secret = pattern(kSecret, kBytes), impostors = pattern(kImpostor, kBytes);
  if (read_into != secret) return fail("victim: the owner's bytes did not arrive");

  std::string owner_id = who->substr(0, who->find(' ')), owner_base = who->substr(who->find(' ') + 1);
  pid_t impostor_pid = spawn({"test", "impostor", engine->address(), owner_id, owner_base});
  auto to_impostor = engine->accept(after(60s));
  if (!to_impostor.ok()) return fail("victim: impostor did not connect: " + to_impostor.status().to_string());
  if ((*to_impostor)->peer_engine_id() != std::stoull(owner_id)) return fail("victim: the impostor's id");
  if (!(*to_impostor)->notify(engine->export_region(*r2).value().serialize(), after(30s)).ok()) {
    return fail("victim: giving the impostor an export");
  }
  auto note = (*to_impostor)->wait_notification(after(60s));
  if (!note.ok()) return fail("victim: the impostor said nothing: " + note.status().to_string());
  int result = 0;
  if (*note == "skip") {
    result = 77;
  } else if (*note != "written") {
    result = fail("victim: unexpected note from the impostor");
  } else if (target == secret) {
    result = fail("the impostor's write copied the owner's secret into the victim's export");
  } else if (target != impostors) {
    result = fail("the export does not hold the impostor's bytes");
  } else {
    std::printf("the impostor reached only its own memory\n");
  }
  (void)(*to_impostor)->notify("bye", after(10s));
  (void)(*to_owner)->notify("bye", after(10s));
  int impostor_rc = wait_exit(impostor_pid, 60s), owner_rc = wait_exit(owner_pid, 60s);
  if (result == 0 && (impostor_rc != 0 || owner_rc != 0)) {
    result = fail("peers exited with " + std::to_string(impostor_rc) + " and " + std::to_string(owner_rc));
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (gpu_count() == 0) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  std::string role = argc > 1 ? argv[1] : "";
  if (role == "owner" && argc == 3) return owner(argv[2]);
  if (role == "impostor" && argc == 5) return impostor(argv[2], std::stoull(argv[3]), std::stoull(argv[4]));
  if (role.empty()) return victim();
  std::fprintf(stderr, "usage: %s [owner ADDR | impostor ADDR ID BASE]\n", argv[0]);
  return 2;
}
