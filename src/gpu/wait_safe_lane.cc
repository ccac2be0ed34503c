// A stream for ferry's GPU work that no waiting application stream holds.
#include "gpu/wait_safe_lane.h"

#include <string>
#include <thread>

#include "gpu/stream_signals.h"

namespace ferry::platform {
namespace {

// How long queue() keeps trying streams before it gives up.
constexpr auto kGiveUpAfter = std::chrono::seconds(10);

// Whether `marker` passed within `limit`. A poll: the driver has nothing to
// wake a thread on when an event passes short of a blocking synchronize,
// which is what a held stream must not get. Markers pass in microseconds,
// so the first looks are close together.
Result<bool> passes_within(cu::Event marker, std::chrono::microseconds limit) {
  const CudaDriver& d = cuda();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int look = 0;; ++look) {
    cu::Result r = d.event_query(marker);
    if (r == cu::kSuccess) return true;
    if (r != cu::kNotReady) {
      FERRY_RETURN_IF_ERROR(d.check(r, "cuEventQuery"));
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (look < 16) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace

WaitSafeLane::WaitSafeLane(std::shared_ptr<GpuKit> kit, int device) : kit_(std::move(kit)), device_(device) {}

WaitSafeLane::~WaitSafeLane() {
  if (stream_ != nullptr) kit_->give_stream(device_, stream_);
  for (const Aside& a : aside_) {
    kit_->give_stream(device_, a.stream);
    kit_->give_event(device_, a.marker);
  }
  if (tail_ != nullptr) kit_->give_event(device_, tail_);
  for (cu::Event e : left_) kit_->give_event(device_, e);
  for (cu::Event e : idle_) kit_->give_event(device_, e);
}

Result<cu::Event> WaitSafeLane::take_event() {
  if (!idle_.empty()) {
    cu::Event e = idle_.back();
    idle_.pop_back();
    return e;
  }
  return kit_->take_event(device_);
}

Status WaitSafeLane::return_passed() {
  const CudaDriver& d = cuda();
  for (size_t i = 0; i < aside_.size();) {
    cu::Result r = d.event_query(aside_[i].marker);
    if (r == cu::kNotReady) {
      ++i;
      continue;
    }
    FERRY_RETURN_IF_ERROR(d.check(r, "cuEventQuery"));
    kit_->give_stream(device_, aside_[i].stream);
    idle_.push_back(aside_[i].marker);
    aside_[i] = aside_.back();
    aside_.pop_back();
  }
  return Status();
}

Status WaitSafeLane::queue(const std::function<Status(cu::Stream)>& work) {
  const CudaDriver& d = cuda();
  const auto give_up = std::chrono::steady_clock::now() + kGiveUpAfter;
  for (;;) {
    if (!aside_.empty()) FERRY_RETURN_IF_ERROR(return_passed());
    if (stream_ == nullptr) {
      FERRY_ASSIGN_OR_RETURN(stream_, kit_->take_stream(device_));
      cleared_ = kNever;
    }
    cu::Event marker = nullptr;
    uint64_t against = 0;
    {
      StreamSignals::Queuing queuing;
      against = queuing.generation();
      // No wait unsignalled: every wait queued so far has its word written.
      if (cleared_ == against || !StreamSignals::any_waiting()) {
        cleared_ = against;
        FERRY_RETURN_IF_ERROR(work(stream_));
        if (tail_ == nullptr) {
          FERRY_ASSIGN_OR_RETURN(tail_, take_event());
        }
        return d.check(d.event_record(tail_, stream_), "cuEventRecord");
      }
      FERRY_ASSIGN_OR_RETURN(marker, take_event());
      if (Status s = d.check(d.event_record(marker, stream_), "cuEventRecord"); !s.ok()) {
        idle_.push_back(marker);
        return s;
      }
    }
    // Outside the gate: a wait may be queued meanwhile, and is then cleared
    // against on the next turn.
    auto passed = passes_within(marker, kClearWithin);
    if (!passed.ok()) {
      aside_.push_back({stream_, marker});  // its state is unknown: not reused until the marker passes
      stream_ = nullptr;
      return passed.status();
    }
    if (passed.value()) {
      idle_.push_back(marker);
      cleared_ = against;
      continue;
    }
    if (tail_ != nullptr) left_.push_back(tail_);
    tail_ = nullptr;
    aside_.push_back({stream_, marker});
    stream_ = nullptr;
    if (aside_.size() > kMostAside || std::chrono::steady_clock::now() >= give_up) {
      return Status(Code::kUnavailable, "device " + std::to_string(device_) + ": " + std::to_string(aside_.size()) +
                                            " of ferry's CUDA streams are held behind an application stream that "
                                            "waits on the GPU for a transfer; none free to copy on");
    }
  }
}

void WaitSafeLane::take_marks(std::vector<cu::Event>* marks) {
  marks->insert(marks->end(), left_.begin(), left_.end());
  left_.clear();
  if (tail_ != nullptr) marks->push_back(tail_);
  tail_ = nullptr;
}

}  // namespace ferry::platform
