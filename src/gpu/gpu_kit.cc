// GpuKit and GpuReserve: making, lending and, at the engine's end,
// freeing the driver objects of gpu/gpu_kit.h.
#include "gpu/gpu_kit.h"

#include "gpu/stream_signals.h"
#include "platform/log.h"
#include "platform/page_lender.h"

namespace ferry::platform {
namespace {

Result<cu::Stream> make_stream(int device, GpuContext ctx) {
  const CudaDriver& d = cuda();
  DeviceScope scope(device, ctx);
  FERRY_RETURN_IF_ERROR(scope.status());
  cu::Stream s = nullptr;
  FERRY_RETURN_IF_ERROR(d.check(d.create_own_stream(&s), "cuStreamCreateWithPriority", Code::kResourceExhausted));
  return s;
}

Result<cu::Event> make_event(int device, GpuContext ctx) {
  const CudaDriver& d = cuda();
  DeviceScope scope(device, ctx);
  FERRY_RETURN_IF_ERROR(scope.status());
  cu::Event e = nullptr;
  FERRY_RETURN_IF_ERROR(
      d.check(d.event_create(&e, cu::kEventDisableTiming), "cuEventCreate", Code::kResourceExhausted));
  return e;
}

Result<void*> make_block(PinnedKind kind, size_t bytes, int device) {
  const CudaDriver& d = cuda();
  DeviceScope scope(device < 0 ? 0 : device);
  FERRY_RETURN_IF_ERROR(scope.status());
  if (kind == PinnedKind::kPlain) {
    void* p = nullptr;
    // Portable: a block may serve copies to and from any device.
    FERRY_RETURN_IF_ERROR(
        d.check(d.mem_host_alloc(&p, bytes, cu::kHostAllocPortable), "cuMemHostAlloc", Code::kResourceExhausted));
    return p;
  }
  // Ordinary pages, page-locked. Portable: any device copies into it;
  // mapped: the staging and gather kernels write it.
  FERRY_ASSIGN_OR_RETURN(void* p, map_lendable(bytes));
  Status pinned = d.check(d.mem_host_register(p, bytes, cu::kHostRegisterPortable | cu::kHostRegisterDeviceMap),
                          "cuMemHostRegister", Code::kResourceExhausted);
  if (!pinned.ok()) {
    unmap_lendable(p, bytes);
    return pinned;
  }
  return p;
}

template <class T>
bool pop(std::vector<T>& v, T& out) {
  if (v.empty()) return false;
  out = v.back();
  v.pop_back();
  return true;
}

template <class K, class T>
void move_all(std::map<K, std::vector<T>>& from, std::map<K, std::vector<T>>& to) {
  for (auto& [key, items] : from) to[key].insert(to[key].end(), items.begin(), items.end());
  from.clear();
}

}  // namespace

GpuReserve::~GpuReserve() {
  const CudaDriver& d = cuda();
  MutexLock lock(mu_);
  for (auto& [lane, streams] : streams_) {
    if (streams.empty()) continue;  // (a scope of ferry's context would make it)
    DeviceScope scope(lane.first, lane.second);
    for (cu::Stream s : streams) d.stream_destroy(s);
  }
  for (auto& [lane, events] : events_) {
    if (events.empty()) continue;
    DeviceScope scope(lane.first, lane.second);
    for (cu::Event e : events) d.event_destroy(e);
  }
  for (auto& [key, blocks] : blocks_) {
    for (void* p : blocks) {
      if (key.first == PinnedKind::kPlain) {
        d.mem_free_host(p);
      } else {
        d.mem_host_unregister(p);
        unmap_lendable(p, key.second);
      }
    }
  }
}

GpuKit::GpuKit(std::shared_ptr<GpuReserve> reserve, std::shared_ptr<StreamSignals> signals)
    : reserve_(std::move(reserve)), signals_(std::move(signals)) {}

GpuKit::~GpuKit() {
  MutexLock lock(mu_);
  MutexLock back(reserve_->mu_);
  move_all(streams_, reserve_->streams_);
  move_all(events_, reserve_->events_);
  move_all(blocks_, reserve_->blocks_);
}

Status GpuKit::fill(const GpuKitSize& size) {
  std::vector<int> devices = active_devices();
  MutexLock lock(mu_);
  bool all_filled = true;
  for (int device : devices) all_filled = all_filled && filled_.count(device) != 0;
  if (all_filled) return Status();
  // No stream is armed until the kit is full. Where one waits already
  // (quiet.ok() false) they are made all the same: this is an application
  // thread, which the driver may hold until that wait ends, and the threads
  // that end it take from kits filled before.
  StreamSignals::Quiet quiet(signals_.get());
  for (int device : devices) {
    if (filled_.count(device) != 0) continue;
    FERRY_RETURN_IF_ERROR(top_up(device, size).with_context("making CUDA objects before a stream waits"));
    filled_.insert(device);
  }
  return Status();
}

Status GpuKit::top_up(int device, const GpuKitSize& size) {
  FERRY_RETURN_IF_ERROR(top_up_lane(Lane{device, GpuContext::kApplication}, size));
  FERRY_RETURN_IF_ERROR(top_up_lane(Lane{device, GpuContext::kFerry}, size));
  {
    // First what earlier connections gave back.
    MutexLock from(reserve_->mu_);
    for (const auto& [key, want] : size.blocks) {
      std::vector<void*>& mine = blocks_[key];
      std::vector<void*>& spare = reserve_->blocks_[key];
      void* p = nullptr;
      while (static_cast<int>(mine.size()) < want && pop(spare, p)) mine.push_back(p);
    }
  }
  for (const auto& [key, want] : size.blocks) {
    std::vector<void*>& mine = blocks_[key];
    while (static_cast<int>(mine.size()) < want) {
      FERRY_ASSIGN_OR_RETURN(void* p, make_block(key.first, key.second, device));
      mine.push_back(p);
    }
  }
  return Status();
}

Status GpuKit::top_up_lane(Lane lane, const GpuKitSize& size) {
  std::vector<cu::Stream>& streams = streams_[lane];
  std::vector<cu::Event>& events = events_[lane];
  {
    // First what earlier connections gave back.
    MutexLock from(reserve_->mu_);
    std::vector<cu::Stream>& spare_streams = reserve_->streams_[lane];
    cu::Stream s = nullptr;
    while (static_cast<int>(streams.size()) < size.streams && pop(spare_streams, s)) streams.push_back(s);
    std::vector<cu::Event>& spare_events = reserve_->events_[lane];
    cu::Event e = nullptr;
    while (static_cast<int>(events.size()) < size.events && pop(spare_events, e)) events.push_back(e);
  }
  while (static_cast<int>(streams.size()) < size.streams) {
    FERRY_ASSIGN_OR_RETURN(cu::Stream s, make_stream(lane.first, lane.second));
    streams.push_back(s);
  }
  while (static_cast<int>(events.size()) < size.events) {
    FERRY_ASSIGN_OR_RETURN(cu::Event e, make_event(lane.first, lane.second));
    events.push_back(e);
  }
  return Status();
}

template <class Key, class T>
std::optional<T> GpuKit::take_spare(std::map<Key, std::vector<T>> GpuKit::*spares, const Key& key, const char* what) {
  bool first_late = false;
  {
    MutexLock lock(mu_);
    T item{};
    if (pop((this->*spares)[key], item)) return item;
    first_late = !filled_.empty() && !warned_late_;
    warned_late_ = warned_late_ || first_late;
  }
  reserve_->made_late_.fetch_add(1, std::memory_order_relaxed);
  // After a fill, a kit that runs dry is sized wrong: say what ran out, once.
  if (first_late) {
    FERRY_LOG(kWarn, "cuda",
              "a transfer thread had to make a %s its connection's kit had run out of: a CUDA stream waiting on "
              "this connection may hold it up (gpu_objects_made_late counts them)",
              what);
  }
  return std::nullopt;
}

Result<cu::Stream> GpuKit::take_stream(int device, GpuContext ctx) {
  if (auto s = take_spare(&GpuKit::streams_, Lane{device, ctx}, "CUDA stream")) return *s;
  return make_stream(device, ctx);
}

void GpuKit::give_stream(int device, cu::Stream s, GpuContext ctx) {
  MutexLock lock(mu_);
  streams_[Lane{device, ctx}].push_back(s);
}

Result<cu::Event> GpuKit::take_event(int device, GpuContext ctx) {
  if (auto e = take_spare(&GpuKit::events_, Lane{device, ctx}, "CUDA event")) return *e;
  return make_event(device, ctx);
}

void GpuKit::give_event(int device, cu::Event e, GpuContext ctx) {
  MutexLock lock(mu_);
  events_[Lane{device, ctx}].push_back(e);
}

Result<void*> GpuKit::take_block(PinnedKind kind, size_t bytes, int device) {
  if (auto p = take_spare(&GpuKit::blocks_, BlockKey{kind, bytes},
                          kind == PinnedKind::kPlain ? "page-locked block" : "lendable page-locked block")) {
    return *p;
  }
  return make_block(kind, bytes, device);
}

void GpuKit::give_block(PinnedKind kind, size_t bytes, void* p) {
  MutexLock lock(mu_);
  blocks_[{kind, bytes}].push_back(p);
}

std::vector<int> active_devices() {
  const CudaDriver& d = cuda();
  std::vector<int> out;
  int count = 0;
  if (!d.available() || d.device_get_count(&count) != cu::kSuccess) return out;
  for (int i = 0; i < count; ++i) {
    unsigned flags = 0;
    int active = 0;
    if (d.primary_ctx_get_state(i, &flags, &active) == cu::kSuccess && active) out.push_back(i);
  }
  return out;
}

}  // namespace ferry::platform
