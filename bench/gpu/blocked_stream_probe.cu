// blocked_stream_probe: which CUDA driver calls wait for a stream that is
// itself waiting on the host (cuStreamWaitValue32 on mapped pinned memory).
//
// Why it exists: a GPU-side wait for a transfer (a stream waits until ferry
// writes a word when the transfer ends) deadlocks if the thread that would
// end the transfer first makes a driver call that waits for every stream of
// the context. This tool finds those calls on the host at hand instead of
// guessing from the documentation's list of "implicit synchronisation".
//
// For each kind of waiting stream (the legacy default stream, a blocking
// stream, a non-blocking one) and each call, a second thread makes the call
// while the stream waits; after LIMIT ms the word is written, releasing the
// stream. A call that returned before the release is "free"; one that
// returned only after it "waits".
//
//   nvcc -O2 -std=c++17 bench/gpu/blocked_stream_probe.cu -o blocked_stream_probe -lcuda
//   blocked_stream_probe [LIMIT_MS]
//
// One line a (stream kind, call): KIND CALL free|waits|error ms
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "driver_check.cuh"

namespace {

struct Fixture {
  CUcontext ctx = nullptr;
  CUipcMemHandle peer_handle{};  // a child process's allocation
  CUdeviceptr opened = 0;        // peer_handle, opened here
  CUfunction loaded = nullptr;   // a function loaded before the wait
  CUfunction gotten = nullptr;   // looked up before the wait, never launched
  CUstream own = nullptr;  // non-blocking, the caller's own
  CUdeviceptr dev = 0;     // 1 MiB
  void* pinned = nullptr;  // 1 MiB, cuMemHostAlloc
  CUmodule module = nullptr;
  CUfunction poke = nullptr;
};

std::string check(CUresult r) {
  if (r == CUDA_SUCCESS) return "";
  const char* n = nullptr;
  cuGetErrorName(r, &n);
  return n ? n : "?";
}

// One granule of device memory made, mapped and made accessible (VMM).
struct Granule {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  size_t size = 0;
};

std::string map_granule(Granule& m) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  cuMemGetAllocationGranularity(&m.size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  std::string e = check(cuMemCreate(&m.handle, m.size, &prop, 0));
  if (e.empty()) e = check(cuMemAddressReserve(&m.va, m.size, 0, 0, 0));
  if (e.empty()) e = check(cuMemMap(m.va, m.size, 0, m.handle, 0));
  CUmemAccessDesc a{};
  a.location = prop.location;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (e.empty()) e = check(cuMemSetAccess(m.va, m.size, &a, 1));
  return e;
}

void host_fn_mark(void* p) { static_cast<std::atomic<bool>*>(p)->store(true); }

}  // namespace

// The child: allocates 2 MiB, writes its IPC handle to stdout, and keeps the
// allocation until its stdin closes.
int child() {
  use_primary_context();
  CUdeviceptr p;
  CU(cuMemAlloc(&p, 2 << 20));
  CUipcMemHandle h;
  CU(cuIpcGetMemHandle(&h, p));
  if (write(1, &h, sizeof(h)) != static_cast<ssize_t>(sizeof(h))) return 1;
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "child") == 0) return child();
  const int limit_ms = argc > 1 ? std::atoi(argv[1]) : 1500;
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return 1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  posix_spawn_file_actions_addclose(&fa, to_child[1]);
  posix_spawn_file_actions_addclose(&fa, from_child[0]);
  char self[] = "/proc/self/exe";
  char arg[] = "child";
  char* child_argv[] = {self, arg, nullptr};
  pid_t pid;
  if (posix_spawn(&pid, self, &fa, nullptr, child_argv, environ) != 0) return 1;
  close(to_child[0]);
  close(from_child[1]);
  Fixture f;
  f.ctx = use_primary_context();
  CU(cuStreamCreate(&f.own, CU_STREAM_NON_BLOCKING));
  CU(cuMemAlloc(&f.dev, 1 << 20));
  CU(cuMemHostAlloc(&f.pinned, 1 << 20, CU_MEMHOSTALLOC_PORTABLE));
  uint32_t* word = nullptr;
  CU(cuMemHostAlloc(reinterpret_cast<void**>(&word), 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr word_dev;
  CU(cuMemHostGetDevicePointer(&word_dev, word, 0));
  if (read(from_child[0], &f.peer_handle, sizeof(f.peer_handle)) != static_cast<ssize_t>(sizeof(f.peer_handle))) {
    std::fprintf(stderr, "no IPC handle from the child\n");
    return 1;
  }

  using Call = std::function<std::string(Fixture&)>;
  std::vector<std::pair<const char*, Call>> calls = {
      {"cuMemHostAlloc", [](Fixture&) {
         void* p = nullptr;
         std::string e = check(cuMemHostAlloc(&p, 4 << 20, CU_MEMHOSTALLOC_PORTABLE));
         if (p) cuMemFreeHost(p);  // measured on its own below
         return e;
       }},
      {"cuMemHostAlloc_only", [](Fixture&) {
         void* p = nullptr;
         return check(cuMemHostAlloc(&p, 4 << 20, CU_MEMHOSTALLOC_PORTABLE));  // leaked on purpose
       }},
      {"cuMemFreeHost", [](Fixture& f) {
         std::string e = check(cuMemFreeHost(f.pinned));
         f.pinned = nullptr;
         return e;
       }},
      {"cuMemHostRegister", [](Fixture&) {
         void* p = std::aligned_alloc(4096, 4 << 20);
         return check(cuMemHostRegister(p, 4 << 20, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
       }},
      {"cuMemHostRegister+Unregister", [](Fixture&) {
         void* p = std::aligned_alloc(4096, 4 << 20);
         std::string e = check(cuMemHostRegister(p, 4 << 20, CU_MEMHOSTREGISTER_PORTABLE));
         if (e.empty()) e = check(cuMemHostUnregister(p));
         return e;
       }},
      {"cuMemAlloc", [](Fixture&) {
         CUdeviceptr p;
         return check(cuMemAlloc(&p, 4 << 20));  // leaked on purpose
       }},
      {"cuMemFree", [](Fixture& f) {
         std::string e = check(cuMemFree(f.dev));
         f.dev = 0;
         return e;
       }},
      {"cuMemcpyHtoD(sync)", [](Fixture& f) {
         if (!f.dev) return std::string("no buffer");
         return check(cuMemcpyHtoD(f.dev, f.pinned ? f.pinned : &f, 64));
       }},
      {"cuMemcpyHtoDAsync(own)+StreamSync", [](Fixture& f) {
         static char src[64];
         CUdeviceptr p;
         cuMemAlloc(&p, 64);
         std::string e = check(cuMemcpyHtoDAsync(p, src, 64, f.own));
         if (e.empty()) e = check(cuStreamSynchronize(f.own));
         return e;
       }},
      {"cuMemsetD8Async(own)+StreamSync", [](Fixture& f) {
         CUdeviceptr p;
         cuMemAlloc(&p, 64);
         std::string e = check(cuMemsetD8Async(p, 1, 64, f.own));
         if (e.empty()) e = check(cuStreamSynchronize(f.own));
         return e;
       }},
      {"cuStreamCreate(nonblocking)", [](Fixture&) {
         CUstream s;
         return check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
       }},
      {"cuStreamDestroy", [](Fixture&) {
         CUstream s;
         std::string e = check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
         if (e.empty()) e = check(cuStreamDestroy(s));
         return e;
       }},
      {"cuEventCreate+Record(own)+Sync", [](Fixture& f) {
         CUevent ev;
         std::string e = check(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
         if (e.empty()) e = check(cuEventRecord(ev, f.own));
         if (e.empty()) e = check(cuEventSynchronize(ev));
         if (e.empty()) e = check(cuEventDestroy(ev));
         return e;
       }},
      {"cuModuleLoadData", [](Fixture& f) {
         CUmodule m;
         std::string e = check(cuModuleLoadData(&m, kPokePtx));
         if (e.empty()) f.module = m;
         return e;
       }},
      {"cuLaunchKernel(own)+StreamSync", [](Fixture& f) {
         if (!f.module) return std::string("no module");
         CUfunction fn;
         std::string e = check(cuModuleGetFunction(&fn, f.module, "poke"));
         CUdeviceptr p;
         cuMemAlloc(&p, 64);
         void* args[] = {&p};
         if (e.empty()) e = check(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, f.own, args, nullptr));
         if (e.empty()) e = check(cuStreamSynchronize(f.own));
         return e;
       }},
      {"cuModuleUnload", [](Fixture& f) {
         if (!f.module) return std::string("no module");
         std::string e = check(cuModuleUnload(f.module));
         f.module = nullptr;
         return e;
       }},
      {"cuLaunchHostFunc(own)+wait", [](Fixture& f) {
         std::atomic<bool> ran{false};
         std::string e = check(cuLaunchHostFunc(f.own, host_fn_mark, &ran));
         if (!e.empty()) return e;
         while (!ran.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));  // probe: waits for the mark
         return std::string();
       }},
      {"cuIpcGetMemHandle", [](Fixture&) {
         CUdeviceptr p;
         cuMemAlloc(&p, 2 << 20);
         CUipcMemHandle h;
         return check(cuIpcGetMemHandle(&h, p));
       }},
      {"cuPointerGetAttribute", [](Fixture& f) {
         CUdeviceptr p;
         cuMemAlloc(&p, 64);
         int ordinal = 0;
         return check(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
       }},
      {"cuModuleGetFunction(loaded module)", [](Fixture& f) {
         return check(cuModuleGetFunction(&f.gotten, f.module, "poke"));
       }},
      {"cuFuncLoad", [](Fixture& f) { return check(cuFuncLoad(f.gotten)); }},
      {"cuLaunchKernel(gotten, first)", [](Fixture& f) {
         static CUdeviceptr p = 0;
         if (!p) cuMemAlloc(&p, 64);
         void* args[] = {&p};
         std::string e = check(cuLaunchKernel(f.gotten, 1, 1, 1, 1, 1, 1, 0, f.own, args, nullptr));
         if (e.empty()) e = check(cuStreamSynchronize(f.own));
         return e;
       }},
      {"cuLaunchKernel(loaded, again)", [](Fixture& f) {
         static CUdeviceptr p = 0;
         if (!p) cuMemAlloc(&p, 64);
         void* args[] = {&p};
         std::string e = check(cuLaunchKernel(f.loaded, 1, 1, 1, 1, 1, 1, 0, f.own, args, nullptr));
         if (e.empty()) e = check(cuStreamSynchronize(f.own));
         return e;
       }},
      {"cuIpcOpenMemHandle", [](Fixture& f) {
         return check(cuIpcOpenMemHandle(&f.opened, f.peer_handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
       }},
      {"cuMemcpyDtoDAsync(opened)+StreamSync", [](Fixture& f) {
         if (!f.opened) return std::string("not opened");
         std::string e = check(cuMemcpyDtoDAsync(f.dev, f.opened, 4096, f.own));
         if (e.empty()) e = check(cuStreamSynchronize(f.own));
         return e;
       }},
      {"cuIpcCloseMemHandle", [](Fixture& f) {
         if (!f.opened) return std::string("not opened");
         std::string e = check(cuIpcCloseMemHandle(f.opened));
         f.opened = 0;
         return e;
       }},
      {"cuMemCreate+Map+SetAccess", [](Fixture&) {
         Granule m;
         return map_granule(m);
       }},
      {"cuMemCreate+Map+SetAccess+Unmap+Release+AddressFree", [](Fixture&) {
         Granule m;  // mapped after the wait began too: the unmap is what differs from the case above
         std::string e = map_granule(m);
         if (e.empty()) e = check(cuMemUnmap(m.va, m.size));
         if (e.empty()) e = check(cuMemRelease(m.handle));
         if (e.empty()) e = check(cuMemAddressFree(m.va, m.size));
         return e;
       }},
      {"cuStreamQuery(own)", [](Fixture& f) {
         CUresult r = cuStreamQuery(f.own);
         return r == CUDA_ERROR_NOT_READY ? std::string() : check(r);
       }},
      {"cuCtxSynchronize", [](Fixture&) { return check(cuCtxSynchronize()); }},
  };

  struct Kind {
    const char* name;
    unsigned flags;
    bool legacy;
  };
  const Kind kinds[] = {{"legacy", 0, true}, {"blocking", CU_STREAM_DEFAULT, false},
                        {"nonblocking", CU_STREAM_NON_BLOCKING, false}};
  uint32_t value = 0;
  for (const Kind& k : kinds) {
    CUstream waiting = nullptr;
    if (!k.legacy) CU(cuStreamCreate(&waiting, k.flags));
    for (auto& named : calls) {
      const char* name = named.first;
      const Call& call = named.second;
      // Fresh resources for the calls that consume them.
      if (!f.module) CU(cuModuleLoadData(&f.module, kPokePtx));
      if (!f.loaded) {
        CUmodule kept;  // never unloaded
        CU(cuModuleLoadData(&kept, kPokePtx));
        CU(cuModuleGetFunction(&f.loaded, kept, "poke"));
        CU(cuFuncLoad(f.loaded));
      }
      if (!f.dev) CU(cuMemAlloc(&f.dev, 1 << 20));
      if (!f.pinned) CU(cuMemHostAlloc(&f.pinned, 1 << 20, CU_MEMHOSTALLOC_PORTABLE));
      if (std::strcmp(name, "cuModuleGetFunction(loaded module)") == 0) {
        CUmodule fresh;  // a module of its own, loaded before the wait
        CU(cuModuleLoadData(&fresh, kPokePtx));
        f.module = fresh;
      }
      ++value;
      CU(cuStreamWaitValue32(waiting, word_dev, value, CU_STREAM_WAIT_VALUE_GEQ));
      std::atomic<bool> done{false};
      std::string error;
      auto t0 = std::chrono::steady_clock::now();
      double took_ms = 0;
      std::thread t([&] {
        cuCtxSetCurrent(f.ctx);
        error = call(f);
        took_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        done.store(true);
      });
      auto deadline = t0 + std::chrono::milliseconds(limit_ms);
      // Probe: polls its own flag every millisecond until the limit.
      while (!done.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      const bool before_release = done.load();
      __atomic_store_n(word, value, __ATOMIC_RELEASE);
      t.join();
      CU(cuStreamSynchronize(waiting));
      std::printf("%-12s %-36s %-6s %8.2f %s\n", k.name, name,
                  !error.empty() ? "error" : (before_release ? "free" : "waits"), took_ms, error.c_str());
      std::fflush(stdout);
    }
    if (waiting) CU(cuStreamDestroy(waiting));
  }
  close(to_child[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  return 0;
}
