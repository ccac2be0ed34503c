// GpuCopyLanes and the copy and completion calls beside it, through the
// driver table.
#include "gpu/copy_lanes.h"

#include <optional>

#include "gpu/stream_signals.h"

namespace ferry::platform {

GpuCopyLanes::GpuCopyLanes(std::shared_ptr<GpuKit> kit)
    : kit_(kit ? std::move(kit) : std::make_shared<GpuKit>(std::make_shared<GpuReserve>(), nullptr)) {}

GpuCopyLanes::~GpuCopyLanes() {
  for (auto& [lane, s] : streams_) kit_->give_stream(lane.first, s, lane.second);
  for (auto& [lane, events] : spare_) {
    for (cu::Event e : events) kit_->give_event(lane.first, e, lane.second);
  }
}

Result<cu::Stream> GpuCopyLanes::stream(int device, GpuContext ctx) {
  cu::Stream& s = streams_[GpuLane{device, ctx}];
  if (s == nullptr) {
    Result<cu::Stream> made = kit_->take_stream(device, ctx);
    if (!made.ok()) {
      streams_.erase(GpuLane{device, ctx});
      return made.status();
    }
    s = made.value();
  }
  auto [at, first] = in_use_.try_emplace(device, ctx);
  if (!first && at->second != ctx) {
    // Waited for, so that copies stay in the order queued. It ends: ferry's
    // context holds no wait, and what the application's holds was queued
    // before any wait (under a clear LaneChoice).
    auto left = streams_.find(GpuLane{device, at->second});
    if (left != streams_.end()) {
      FERRY_RETURN_IF_ERROR(
          wait_stream(device, at->second, left->second).with_context("changing a GPU copy's context"));
    }
    at->second = ctx;
  }
  return s;
}

cu::Stream GpuCopyLanes::stream_if_made(GpuLane lane) const {
  auto it = streams_.find(lane);
  return it == streams_.end() ? nullptr : it->second;
}

Result<GpuCopyLanes::Mark> GpuCopyLanes::mark(GpuLane lane) {
  const auto& d = cuda();
  cu::Stream s = stream_if_made(lane);
  if (s == nullptr) return Status(Code::kInternal, "a GPU copy's completion asked of a device it never used");
  Mark m{lane, s, nullptr};
  // In the application's context while a stream waits, an event would queue
  // behind the wait: the stream is asked instead (nothing is queued on it
  // until the wait ends).
  std::optional<QueueGate::Pass> app;
  if (lane.second == GpuContext::kApplication) {
    app.emplace(StreamSignals::app_queue_gate());
    if (!app->clear()) return m;
  }
  DeviceScope on(lane.first, lane.second);
  FERRY_RETURN_IF_ERROR(on.status());
  auto& spare = spare_[lane];
  if (!spare.empty()) {
    m.event = spare.back();
    spare.pop_back();
  } else {
    FERRY_ASSIGN_OR_RETURN(m.event, kit_->take_event(lane.first, lane.second));
  }
  Status recorded = d.check(d.event_record(m.event, s), "cuEventRecord");
  if (!recorded.ok()) {
    spare.push_back(m.event);
    return recorded;
  }
  return m;
}

Result<bool> GpuCopyLanes::reached(const Mark& m) {
  DeviceScope on(m.lane.first, m.lane.second);
  FERRY_RETURN_IF_ERROR(on.status());
  return m.event != nullptr ? event_reached(m.event) : stream_idle(m.stream);
}

void GpuCopyLanes::recycle(const Mark& m) {
  if (m.event != nullptr) spare_[m.lane].push_back(m.event);
}

void GpuCopyLanes::synchronize_all() {
  for (auto& [lane, s] : streams_) (void)wait_stream(lane.first, lane.second, s);
}

bool gpu_driver_available() { return cuda().available(); }

Status queue_copy(cu::Stream stream, void* dst, const void* src, size_t n, CopyDirection direction) {
  const auto& d = cuda();
  cu::Result r;
  switch (direction) {
    case CopyDirection::kHostToDevice:
      r = d.memcpy_htod_async(reinterpret_cast<cu::DevicePtr>(dst), src, n, stream);
      break;
    case CopyDirection::kDeviceToHost:
      r = d.memcpy_dtoh_async(dst, reinterpret_cast<cu::DevicePtr>(src), n, stream);
      break;
    default:
      r = d.memcpy_dtod_async(reinterpret_cast<cu::DevicePtr>(dst), reinterpret_cast<cu::DevicePtr>(src), n, stream);
      break;
  }
  return d.check(r, "cuMemcpyAsync", Code::kInternal);
}

bool can_queue_batch() { return cuda().has_memcpy_batch(); }

Status queue_batch(cu::Stream stream, std::span<const cu::DevicePtr> dsts, std::span<const cu::DevicePtr> srcs,
                   std::span<const size_t> sizes) {
  const auto& d = cuda();
  // The driver's signature takes non-const arrays it does not write.
  return d.check(d.memcpy_batch(const_cast<cu::DevicePtr*>(dsts.data()), const_cast<cu::DevicePtr*>(srcs.data()),
                                const_cast<size_t*>(sizes.data()), sizes.size(), stream),
                 "cuMemcpyBatchAsync", Code::kInternal);
}

Result<bool> stream_idle(cu::Stream stream) {
  const auto& d = cuda();
  cu::Result r = d.stream_query(stream);
  if (r == cu::kNotReady) return false;
  if (r != cu::kSuccess) return d.check(r, "GPU copy (cuStreamQuery)", Code::kInternal);
  return true;
}

Result<bool> event_reached(cu::Event event) {
  const auto& d = cuda();
  cu::Result r = d.event_query(event);
  if (r == cu::kNotReady) return false;
  if (r != cu::kSuccess) return d.check(r, "GPU copy (cuEventQuery)", Code::kInternal);
  return true;
}

Status wait_stream(int device, GpuContext ctx, cu::Stream stream) {
  DeviceScope on(device, ctx);
  FERRY_RETURN_IF_ERROR(on.status());
  const auto& d = cuda();
  return d.check(d.stream_synchronize(stream), "GPU copy (cuStreamSynchronize)", Code::kInternal);
}

int first_active_device(int preferred) {
  const auto& d = cuda();
  int count = 0;
  if (preferred >= 0) {
    unsigned flags = 0;
    int active = 0;
    if (d.primary_ctx_get_state(preferred, &flags, &active) == cu::kSuccess && active) return preferred;
  }
  if (d.device_get_count(&count) == cu::kSuccess) {
    for (int i = 0; i < count; ++i) {
      unsigned flags = 0;
      int active = 0;
      if (d.primary_ctx_get_state(i, &flags, &active) == cu::kSuccess && active) return i;
    }
  }
  return preferred;
}

}  // namespace ferry::platform
