// ResidentGather: the mailbox, the kernel's launches and the answers read.
#include "gpu/resident_gather.h"

#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>

#include "gpu/stream_signals.h"

namespace ferry::platform {
namespace {

// The mailbox, laid out as gather_kernel.cu's ResidentBox.
struct Mailbox {
  uint64_t request;  // (generation << 32) | number of the newest batch, from 1
  uint64_t table;
  uint64_t count;
  uint64_t pad0[5];
  uint64_t done;  // (generation << 32) | number of the last batch in place
  uint64_t pad1[7];
  uint64_t zero[4];  // copied over the relay before each launch
};
static_assert(offsetof(Mailbox, done) == 64 && sizeof(Mailbox) == 160,
              "the mailbox is laid out as gather_kernel.cu's ResidentBox, then the relay's zeros");

uint64_t load_acquire(uint64_t& word) { return std::atomic_ref<uint64_t>(word).load(std::memory_order_acquire); }
void store_release(uint64_t& word, uint64_t v) { std::atomic_ref<uint64_t>(word).store(v, std::memory_order_release); }

// Relay the kernel keeps in device memory (gather_kernel.cu's ResidentRelay).
constexpr size_t kRelayBytes = 32;
// Mapped pinned memory: the kernel reads and writes the mailbox directly.
constexpr unsigned kHostAllocDeviceMap = 2;
constexpr std::chrono::milliseconds kStreamAskEvery{1};

}  // namespace

struct ResidentGather::Device {
  Mailbox* box = nullptr;
  cu::DevicePtr relay = 0;
  cu::Stream stream = nullptr;
  uint32_t generation = 0;  // of the newest launch (0: none yet)
  uint32_t launches = 0;    // of the kernel on this GPU
  uint32_t number = 0;      // batches handed to it
  uint64_t serial = 0;      // batches posted to this GPU
  // The batch in hand (pending: the answer it awaits; 0: none), kept to hand
  // it over again should the kernel have left without it.
  uint64_t pending = 0;
  const GatherPiece* table = nullptr;
  unsigned count = 0;
  // A batch posted before this finds the kernel still there: it lingers
  // `linger` after finishing the last batch, which was posted at least
  // that long before; half of it is left as margin.
  std::chrono::steady_clock::time_point alive_until{};
  // When finished() last asked the stream whether the kernel is still
  // there: a driver call, so once a millisecond.
  std::chrono::steady_clock::time_point stream_asked{};
};

ResidentGather::ResidentGather(std::shared_ptr<GatherKernels> kernels, std::chrono::microseconds linger, Clock now)
    : kernels_(std::move(kernels)),
      linger_(linger),
      now_(now ? std::move(now) : Clock([] { return std::chrono::steady_clock::now(); })) {}

ResidentGather::~ResidentGather() {
  const CudaDriver& d = cuda();
  MutexLock lock(mu_);
  for (size_t i = 0; i < devices_.size(); ++i) {
    Device* dev = devices_[i].get();
    if (dev == nullptr) continue;
    DeviceScope on(static_cast<int>(i));
    if (dev->generation != 0) {
      store_release(dev->box->request, static_cast<uint64_t>(dev->generation + 1) << 32);  // leave
      d.stream_synchronize(dev->stream);
    }
    if (dev->stream != nullptr) d.stream_destroy(dev->stream);
    if (dev->relay != 0) d.mem_free(dev->relay);
    if (dev->box != nullptr) d.mem_free_host(dev->box);
  }
}

Result<ResidentGather::Device*> ResidentGather::device_state(int device) {
  if (device < 0 || device >= kMaxDevices) return Status(Code::kInvalidArgument, "no GPU " + std::to_string(device));
  if (devices_[device] != nullptr) return devices_[device].get();
  const CudaDriver& d = cuda();
  auto dev = std::make_unique<Device>();
  void* box = nullptr;
  FERRY_RETURN_IF_ERROR(d.check(d.mem_host_alloc(&box, sizeof(Mailbox), cu::kHostAllocPortable | kHostAllocDeviceMap),
                                "cuMemHostAlloc (resident gather mailbox)", Code::kResourceExhausted));
  dev->box = static_cast<Mailbox*>(box);
  std::memset(dev->box, 0, sizeof(Mailbox));
  Status s =
      d.check(d.mem_alloc(&dev->relay, kRelayBytes), "cuMemAlloc (resident gather relay)", Code::kResourceExhausted);
  if (s.ok()) {
    s = d.check(d.create_own_stream(&dev->stream), "cuStreamCreateWithPriority (resident gather)",
                Code::kResourceExhausted);
  }
  if (!s.ok()) {
    if (dev->relay != 0) d.mem_free(dev->relay);
    d.mem_free_host(dev->box);
    return s;
  }
  devices_[device] = std::move(dev);
  return devices_[device].get();
}

Status ResidentGather::launch(int device, Device& d) {
  const CudaDriver& driver = cuda();
  uint32_t generation = d.generation + 1 == 0 ? 1 : d.generation + 1;
  // An earlier kernel still lingering sees another generation and leaves;
  // this one, queued behind it on the stream, starts once it has.
  store_release(d.box->request, static_cast<uint64_t>(generation) << 32);
  FERRY_RETURN_IF_ERROR(driver.check(driver.memcpy_htod_async(d.relay, d.box->zero, kRelayBytes, d.stream),
                                     "cuMemcpyHtoDAsync (resident gather relay)"));
  const uint64_t linger_ns = static_cast<uint64_t>(linger_.count()) * 1000;
  FERRY_RETURN_IF_ERROR(
      kernels_->launch_resident(device, d.stream, d.box, d.relay, generation, linger_ns, kGrid, kThreads));
  d.generation = generation;
  d.number = 0;
  ++d.launches;
  return Status();
}

void ResidentGather::hand_over(Device& d, std::chrono::steady_clock::time_point now) {
  d.box->table = reinterpret_cast<uint64_t>(d.table);
  d.box->count = d.count;
  d.pending = (static_cast<uint64_t>(d.generation) << 32) | ++d.number;
  store_release(d.box->request, d.pending);
  d.alive_until = now + linger_ / 2;
}

Result<ResidentGather::Ticket> ResidentGather::post(int device, const GatherPiece* table, unsigned count) {
  MutexLock lock(mu_);
  FERRY_ASSIGN_OR_RETURN(Device * d, device_state(device));
  if (d->pending != 0) {
    if (load_acquire(d->box->done) != d->pending) {
      return Status(Code::kUnavailable,
                    "the resident gather kernel on GPU " + std::to_string(device) + " has a batch in hand");
    }
    d->pending = 0;
  }
  const auto now = now_();
  if (d->generation == 0 || now >= d->alive_until || d->number == UINT32_MAX) {
    FERRY_RETURN_IF_ERROR(launch(device, *d));
  }
  d->table = table;
  d->count = count;
  hand_over(*d, now);
  return Ticket{device, ++d->serial};
}

uint32_t ResidentGather::launches(int device) {
  MutexLock lock(mu_);
  if (device < 0 || device >= kMaxDevices || devices_[device] == nullptr) return 0;
  return devices_[device]->launches;
}

Result<bool> ResidentGather::finished(const Ticket& ticket) {
  MutexLock lock(mu_);
  if (ticket.device < 0 || ticket.device >= kMaxDevices || devices_[ticket.device] == nullptr) {
    return Status(Code::kInvalidArgument,
                  "resident gather: no batch was posted to GPU " + std::to_string(ticket.device));
  }
  Device& d = *devices_[ticket.device];
  // A later batch is posted only once the one before is in place.
  if (ticket.serial != d.serial || d.pending == 0) return true;
  // One batch at a time: the kernel's answer is this batch's or an older
  // one's (equality, not order: generations wrap).
  if (load_acquire(d.box->done) == d.pending) return true;
  const auto now = std::chrono::steady_clock::now();
  if (now - d.stream_asked < kStreamAskEvery) return false;
  d.stream_asked = now;
  const CudaDriver& driver = cuda();
  cu::Result r = driver.stream_query(d.stream);
  if (r == cu::kNotReady) return false;
  if (load_acquire(d.box->done) == d.pending) return true;  // it answered, then left
  if (r != cu::kSuccess) return driver.check(r, "resident gather kernel (cuStreamQuery)");
  // The kernel lingered out before the batch's request reached it. It is
  // launched again in the application's context, so only while no stream of
  // the process waits there (a launch behind the wait would hold the batch,
  // and with it what the wait waits for): else the batch fails, naming why.
  QueueGate::Pass app(StreamSignals::app_queue_gate());
  DeviceScope on(ticket.device);
  Status relaunched = !app.clear() ? Status(Code::kUnavailable,
                                            "the resident gather kernel ended before taking a batch, and a CUDA stream "
                                            "of this process waits on the GPU: it cannot be launched again now")
                      : on.ok()    ? launch(ticket.device, d)
                                   : on.status();
  if (!relaunched.ok()) {
    // The batch fails; the next post launches afresh.
    d.pending = 0;
    d.alive_until = {};
    return relaunched;
  }
  hand_over(d, now_());
  return false;
}

}  // namespace ferry::platform
