// StagingRing: lazy, bounded, counted slots.
#include "transport/tcp/staging_ring.h"

#include <atomic>

namespace ferry::tcp {
namespace {

std::atomic<size_t> g_bytes{0};
std::atomic<size_t> g_slots{0};

}  // namespace

StagingRing::StagingRing(Copier& copier, size_t slot_bytes, int depth, bool lendable)
    : copier_(copier),
      slot_bytes_(slot_bytes),
      lendable_(lendable),
      slots_(static_cast<size_t>(depth < 1 ? 1 : depth)) {}

StagingRing::~StagingRing() {
  for (Slot& s : slots_) {
    if (s.data == nullptr) continue;
    if (lendable_) {
      copier_.free_lendable(s.data, slot_bytes_);
    } else {
      copier_.free_host(s.data, slot_bytes_);
    }
    g_bytes.fetch_sub(slot_bytes_, std::memory_order_relaxed);
    g_slots.fetch_sub(1, std::memory_order_relaxed);
  }
}

Result<StagingRing::Slot*> StagingRing::acquire(int device) {
  Slot& s = slots_[next_];
  if (s.held) {
    return Status(Code::kInternal, "staging ring: slot " + std::to_string(next_) + " of " +
                                       std::to_string(slots_.size()) + " is still in use");
  }
  if (s.data == nullptr) {
    auto p = lendable_ ? copier_.alloc_lendable(device, slot_bytes_) : copier_.alloc_host(device, slot_bytes_);
    if (!p.ok()) return p.status();
    s.data = static_cast<uint8_t*>(p.value());
    g_bytes.fetch_add(slot_bytes_, std::memory_order_relaxed);
    g_slots.fetch_add(1, std::memory_order_relaxed);
  } else if (s.ticket != 0) {
    FERRY_RETURN_IF_ERROR(copier_.wait(s.ticket));
  }
  s.ticket = 0;
  s.held = true;
  next_ = (next_ + 1) % slots_.size();
  return &s;
}

void StagingRing::release(Slot* slot) { slot->held = false; }

int StagingRing::allocated() const {
  int n = 0;
  for (const Slot& s : slots_) n += s.data != nullptr ? 1 : 0;
  return n;
}

int StagingRing::held() const {
  int n = 0;
  for (const Slot& s : slots_) n += s.held ? 1 : 0;
  return n;
}

size_t staging_bytes_allocated() { return g_bytes.load(std::memory_order_relaxed); }
size_t staging_slots_allocated() { return g_slots.load(std::memory_order_relaxed); }

}  // namespace ferry::tcp
