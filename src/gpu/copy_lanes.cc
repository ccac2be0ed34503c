// GpuCopyLanes and the copy and completion calls beside it, through the
// driver table.
#include "gpu/copy_lanes.h"

namespace ferry::platform {

GpuCopyLanes::GpuCopyLanes(std::shared_ptr<GpuKit> kit)
    : kit_(kit ? std::move(kit) : std::make_shared<GpuKit>(std::make_shared<GpuReserve>(), nullptr)) {}

GpuCopyLanes::~GpuCopyLanes() {
  for (auto& [device, s] : streams_) kit_->give_stream(device, s);
  for (auto& [device, events] : spare_) {
    for (cu::Event e : events) kit_->give_event(device, e);
  }
}

Result<cu::Stream> GpuCopyLanes::stream(int device) {
  auto it = streams_.find(device);
  if (it != streams_.end()) return it->second;
  FERRY_ASSIGN_OR_RETURN(cu::Stream s, kit_->take_stream(device));
  streams_[device] = s;
  return s;
}

cu::Stream GpuCopyLanes::stream_if_made(int device) const {
  auto it = streams_.find(device);
  return it == streams_.end() ? nullptr : it->second;
}

Result<cu::Event> GpuCopyLanes::mark(int device) {
  const auto& d = cuda();
  DeviceScope on(device);
  FERRY_RETURN_IF_ERROR(on.status());
  cu::Stream s = stream_if_made(device);
  if (s == nullptr) return Status(Code::kInternal, "a GPU copy's completion asked of a device it never used");
  cu::Event e = nullptr;
  auto& spare = spare_[device];
  if (!spare.empty()) {
    e = spare.back();
    spare.pop_back();
  } else {
    FERRY_ASSIGN_OR_RETURN(e, kit_->take_event(device));
  }
  Status recorded = d.check(d.event_record(e, s), "cuEventRecord");
  if (!recorded.ok()) {
    spare_[device].push_back(e);
    return recorded;
  }
  return e;
}

void GpuCopyLanes::recycle(int device, cu::Event e) { spare_[device].push_back(e); }

void GpuCopyLanes::synchronize_all() {
  for (auto& [device, s] : streams_) wait_stream(device, s);
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

Status copy_to_device_and_wait(cu::Stream stream, void* dst, const void* src, size_t n) {
  const auto& d = cuda();
  FERRY_RETURN_IF_ERROR(d.check(d.memcpy_htod_async(reinterpret_cast<cu::DevicePtr>(dst), src, n, stream),
                                "cuMemcpyHtoDAsync into the receive buffer", Code::kInternal));
  return d.check(d.stream_synchronize(stream), "cuStreamSynchronize (into the receive buffer)", Code::kInternal);
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

void wait_stream(int device, cu::Stream stream) {
  DeviceScope on(device);
  cuda().stream_synchronize(stream);
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
