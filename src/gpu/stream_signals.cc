// Slots of mapped pinned memory that CUDA streams wait on.
#include "gpu/stream_signals.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu/cuda_driver.h"
#include "gpu/stream_context.h"

namespace ferry::platform {

Status stream_waits_possible() {
  const char* v = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (v == nullptr || std::strtol(v, nullptr, 10) != 1) return Status();
  return Status(Code::kUnimplemented,
                "stream_wait: with CUDA_DEVICE_MAX_CONNECTIONS=1 every CUDA stream shares one hardware queue, so a "
                "stream waiting on the GPU would hold the copies that end the transfer; wait for it on the host "
                "(Transfer::wait) before queuing the work that consumes it");
}

bool StreamSignals::any_waiting() { return app_queue_gate().closed(); }

QueueGate& StreamSignals::app_queue_gate() {
  static QueueGate gate;
  return gate;
}

Result<uint32_t> StreamSignals::take_slot() {
  if (!free_.empty()) {
    uint32_t s = free_.back();
    free_.pop_back();
    return s;
  }
  const CudaDriver& cu = cuda();
  // Pinned memory needs a context; the application's, if its thread has one.
  cu::Context current = nullptr;
  std::optional<DeviceScope> scope;
  if (cu.ctx_get_current(&current) != cu::kSuccess || current == nullptr) {
    scope.emplace(0);
    if (!scope->ok()) return scope->status();
  }
  Page page;
  void* host = nullptr;
  FERRY_RETURN_IF_ERROR(cu.check(
      cu.mem_host_alloc(&host, kSlotsPerPage * sizeof(uint32_t), cu::kHostAllocPortable | cu::kHostAllocDeviceMap),
      "cuMemHostAlloc", Code::kResourceExhausted));
  page.host = static_cast<uint32_t*>(host);
  if (Status s = cu.check(cu.mem_host_get_device_pointer(&page.device, host, 0), "cuMemHostGetDevicePointer");
      !s.ok()) {
    cu.mem_free_host(host);
    return s;
  }
  for (uint32_t i = 0; i < kSlotsPerPage; ++i) __atomic_store_n(&page.host[i], 0u, __ATOMIC_RELAXED);
  auto first = static_cast<uint32_t>(pages_.size()) * kSlotsPerPage;
  pages_.push_back(page);
  values_.resize(values_.size() + kSlotsPerPage, 0);
  for (uint32_t i = kSlotsPerPage - 1; i > 0; --i) free_.push_back(first + i);
  return first;
}

Result<StreamSignals::Armed> StreamSignals::arm(const CudaStreamRef& ref) {
  const CudaDriver& cu = cuda();
  if (!cu.available()) return Status(Code::kUnimplemented, "a stream wait needs the CUDA driver");
  if (cu.stream_wait_value32 == nullptr) {
    return Status(Code::kUnimplemented, "this CUDA driver has no stream memory operations (cuStreamWaitValue32)");
  }
  void* stream = ref.stream;
  StreamContext context(ref);
  FERRY_RETURN_IF_ERROR(context.status());
  // Counted before the wait is queued, and before mu_ is taken (a copier
  // that must leave first may be waiting for a lock whose holder waits for
  // mu_: GpuKit::fill): from now on a copier queues nothing in this context
  // that could sit behind the wait, and one queuing now is let finish first.
  QueueGate& gate = app_queue_gate();
  gate.close();
  UniqueLock lock(mu_);
  while (quiet_ > 0) unquiet_.wait(lock.native());
  Result<uint32_t> taken = take_slot();
  if (!taken.ok()) {
    gate.open();
    return taken.status();
  }
  const uint32_t slot = taken.value();
  const Page& page = pages_[slot / kSlotsPerPage];
  uint32_t value = values_[slot] + 1;
  uint64_t word = page.device + (slot % kSlotsPerPage) * sizeof(uint32_t);
  cu::Result r = cu.stream_wait_value32(static_cast<cu::Stream>(stream), word, value, cu::kStreamWaitValueGeq);
  if (r != cu::kSuccess) {
    gate.open();
    free_.push_back(slot);
    char name[32];
    std::snprintf(name, sizeof(name), "%p", stream);
    return cu.check(r, "cuStreamWaitValue32", Code::kInvalidArgument).with_context(std::string("CUDA stream ") + name);
  }
  values_[slot] = value;
  ++armed_;
  return Armed{slot, value};
}

void StreamSignals::signal(const Armed& armed) {
  MutexLock lock(mu_);
  uint32_t* word = &pages_[armed.slot / kSlotsPerPage].host[armed.slot % kSlotsPerPage];
  __atomic_store_n(word, armed.value, __ATOMIC_RELEASE);
  free_.push_back(armed.slot);
  --armed_;
  app_queue_gate().open();
}

StreamSignals::Quiet::Quiet(StreamSignals* signals) : signals_(signals) {
  if (signals_ == nullptr) return;
  MutexLock lock(signals_->mu_);
  ok_ = signals_->armed_ == 0;
  if (ok_) ++signals_->quiet_;
}

StreamSignals::Quiet::~Quiet() {
  if (signals_ == nullptr || !ok_) return;
  bool last = false;
  {
    MutexLock lock(signals_->mu_);
    last = --signals_->quiet_ == 0;
  }
  if (last) signals_->unquiet_.notify_all();
}

}  // namespace ferry::platform
