// A local peer that names another peer's engine id must not reach that
// peer's GPU memory through the mappings the engine opened for it.
//
// Three processes on one GPU. The owner (an honest peer) exports GPU memory
// with a secret pattern; the victim (this process) reads it, which opens the
// owner's allocation here. The impostor then dials the victim naming the
// owner's engine id: keyed by what the peer says, the victim's mappings
// would hand the impostor the owner's allocation. Since engine ids are
// proven in the handshake (a signature by the engine's identity key), the
// victim refuses the impostor before it holds any connection; the mappings
// are also keyed by the peer's pid (the kernel's word), a second wall this
// test no longer reaches.
//
// Exits 77 (skipped) without a GPU, 1 on any failure.
//
// Usage: ferry_local_gpu_impersonation_test                           (victim)
//        ferry_local_gpu_impersonation_test owner ADDR                 (owner)
//        ferry_local_gpu_impersonation_test impostor ADDR ID           (impostor)
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
#include "gpu/memory_kind.h"
#include "platform/crypto.h"
#include "platform/identity.h"
#include "platform/socket.h"
#include "transport/bootstrap/dialer.h"
#include "transport/local/gpu_sharing.h"

using namespace ferry;
using namespace ferry::testing;
using namespace std::chrono_literals;

namespace {

constexpr size_t kBytes = 2u << 20;
constexpr uint64_t kSecret = 7;

int fail(const std::string& what) {
  std::fprintf(stderr, "FAIL %s\n", what.c_str());
  return 1;
}

pid_t spawn(std::vector<std::string> args) {
  pid_t pid = ::fork();
  if (pid == 0) {
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
// owner's engine id in its handshake. It holds a key of its own, not the
// owner's: the victim must refuse it (engine ids are proven since protocol
// version 5). Exits 0 when refused, 1 when it got in.
int impostor(const std::string& address, uint64_t owner_id) {
  auto ctx = std::make_shared<core::EngineContext>();
  ctx->options.transport = TransportChoice::kLocal;
  auto key = platform::IdentityKey::generate();
  if (!key.ok()) return fail("impostor: key: " + key.status().to_string());
  ctx->identity = std::move(key).value();
  ctx->engine_id = owner_id;
  ctx->host_id = std::string(platform::host_id());
  ctx->gpu_exports = std::make_shared<local::GpuExports>();
  ctx->gpu_imports = std::make_shared<local::GpuImports>();
  auto to = platform::parse_host_port(address);
  if (!to.ok()) return fail("impostor: address");
  auto dialed = bootstrap::dial(ctx, *to, after(30s), [] { return uint64_t{1}; });
  if (dialed.ok()) {
    dialed->connection->close();
    return fail("impostor: connected under the owner's engine id");
  }
  if (dialed.status().code() != Code::kUnauthenticated) {
    return fail("impostor: refused for another reason: " + dialed.status().to_string());
  }
  std::printf("impostor refused: %s\n", dialed.status().to_string().c_str());
  return 0;
}

int victim() {
  Options o;
  o.transport = TransportChoice::kLocal;
  auto engine = Engine::create(o).value();
  std::vector<uint8_t> read_into(kBytes);
  auto r1 = engine->reg(read_into.data(), kBytes);
  if (!r1.ok()) return fail("victim: reg");

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
  const std::vector<uint8_t> secret = pattern(kSecret, kBytes);
  if (read_into != secret) return fail("victim: the owner's bytes did not arrive");

  std::string owner_id = who->substr(0, who->find(' '));
  pid_t impostor_pid = spawn({"test", "impostor", engine->address(), owner_id});
  int result = wait_exit(impostor_pid, 60s) == 0 ? 0 : fail("the impostor was not refused");
  auto to_impostor = engine->accept(after(1s));
  if (to_impostor.ok()) result = fail("the victim holds a connection from the impostor");
  if (result == 0) std::printf("the impostor was refused at the handshake\n");
  (void)(*to_owner)->notify("bye", after(10s));
  int owner_rc = wait_exit(owner_pid, 60s);
  if (result == 0 && owner_rc != 0) result = fail("the owner exited with " + std::to_string(owner_rc));
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
  if (role == "impostor" && argc == 4) return impostor(argv[2], std::stoull(argv[3]));
  if (role.empty()) return victim();
  std::fprintf(stderr, "usage: %s [owner ADDR | impostor ADDR ID]\n", argv[0]);
  return 2;
}
