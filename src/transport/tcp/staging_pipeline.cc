// TxStager and RxStager.
#include "transport/tcp/staging_pipeline.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

#include "platform/log.h"
#include "platform/socket.h"
#include "transport/tcp/tcp_internals.h"

namespace ferry::tcp {

size_t staged_bytes(std::span<const Piece> pieces) {
  size_t n = 0;
  for (const Piece& p : pieces) n += p.staged ? p.size : 0;
  return n;
}

uint64_t staged_chunk_bytes(uint64_t total, int paths, uint64_t slot_bytes, int per_path) {
  uint64_t chunks = static_cast<uint64_t>(std::max(per_path, 1)) * static_cast<uint64_t>(std::max(paths, 1));
  uint64_t even = (total / chunks + 4095) / 4096 * 4096;  // total / chunks, rounded up to a page
  return std::min(slot_bytes, std::max(even, std::min(kMinStagedChunk, slot_bytes)));
}

// ---- transmit ---------------------------------------------------------------

namespace {

std::optional<platform::PageLender> open_lender(bool lend, size_t bytes) {
  if (!lend) return std::nullopt;
  auto l = platform::PageLender::open(bytes);
  if (!l.ok()) {
    FERRY_LOG(kDebug, "tcp", "staged chunks are copied into the socket: %s", l.status().to_string().c_str());
    return std::nullopt;
  }
  return std::move(l).value();
}

}  // namespace

TxStager::TxStager(std::unique_ptr<Copier> copier, size_t slot_bytes, int depth, bool lend,
                   core::TransferMetrics* metrics)
    : copier_(std::move(copier)),
      metrics_(metrics),
      lender_(open_lender(lend, slot_bytes)),
      ring_(*copier_, slot_bytes, lender_ ? 2 * depth : depth, lender_.has_value()) {}

TxStager::~TxStager() { drain(); }

Status TxStager::stage(std::span<const Piece> pieces, Staged& out) {
  out = Staged{};
  size_t need = staged_bytes(pieces);
  if (need > ring_.slot_bytes()) {
    return Status(Code::kInternal, "staging: chunk has " + std::to_string(need) + " bytes to stage, slots hold " +
                                       std::to_string(ring_.slot_bytes()));
  }
  int device = -1;
  for (const Piece& p : pieces) {
    if (p.staged && device < 0) device = p.device;
  }
  if (need > 0) {
    auto slot = ring_.acquire(device);
    if (!slot.ok()) return slot.status();
    out.slot = slot.value();
  }
  // The staged pieces go to the copier together, a run per device (a chunk
  // of a KV cache's blocks is hundreds of them).
  size_t at = 0;
  ops_.clear();
  int ops_device = -1;
  Status s;
  for (const Piece& p : pieces) {
    if (!p.staged) {
      out.iov.push_back({p.data, p.size});
      continue;
    }
    if (!ops_.empty() && p.device != ops_device) {
      s = copier_->copy_many(ops_device, ops_);
      ops_.clear();
      if (!s.ok()) break;
    }
    ops_device = p.device;
    uint8_t* dst = out.slot->data + at;
    ops_.push_back({dst, p.data, p.size});
    out.iov.push_back({dst, p.size});
    at += p.size;
  }
  if (s.ok() && !ops_.empty()) s = copier_->copy_many(ops_device, ops_);
  if (!s.ok()) {
    // Pieces already queued are being copied from the source into the
    // slot: both stay untouched until they end.
    if (at > 0) copier_->wait_all();
    release(out);
    return s;
  }
  out.in_slot = at;
  if (out.slot != nullptr) {
    if (metrics_ != nullptr) out.queued_ns = internal::now_ns();
    auto t = copier_->fence();
    if (!t.ok()) {
      // Unfenced copies into the slot: they end before it can be reused.
      (void)copier_->sync();
      release(out);
      return t.status();
    }
    out.ticket = out.slot->ticket = last_ticket_ = t.value();
  }
  return Status();
}

Status TxStager::wait(const Staged& s) {
  if (s.ticket == 0) return Status();
  FERRY_RETURN_IF_ERROR(copier_->wait(s.ticket));
  if (metrics_ != nullptr) {
    metrics_->staged(core::StagingDirection::kToHost, s.in_slot, internal::now_ns() - s.queued_ns);
  }
  return Status();
}

void TxStager::drain() {
  if (last_ticket_ != 0) (void)copier_->wait(last_ticket_);
}

void TxStager::release(Staged& s) {
  if (s.slot != nullptr) ring_.release(s.slot);
  s.slot = nullptr;
}

Status TxStager::send(int fd, std::vector<struct iovec>& head, Staged& s, uint64_t seq) {
  if (!lends(s)) {
    head.insert(head.end(), s.iov.begin(), s.iov.end());
    Status st = platform::send_all(fd, head.data(), static_cast<int>(head.size()));
    release(s);
    return st;
  }
  Status st = platform::send_all(fd, head.data(), static_cast<int>(head.size()), MSG_MORE);
  const uint8_t* slot = s.slot != nullptr ? s.slot->data : nullptr;
  auto in_slot = [&](const struct iovec& v) {
    auto* p = static_cast<const uint8_t*>(v.iov_base);
    return slot != nullptr && p >= slot && p < slot + ring_.slot_bytes();
  };
  // Entries go out in runs of one kind: staged pieces lie one after another
  // in the slot (a chunk of small blocks has hundreds), so a run of them is
  // one lend; a run of host pieces (the application's memory) is one copy.
  for (size_t i = 0; i < s.iov.size() && st.ok();) {
    const bool lend = in_slot(s.iov[i]);
    size_t end = i + 1;
    while (end < s.iov.size() && in_slot(s.iov[end]) == lend) ++end;
    const bool more = end < s.iov.size();
    if (lend) {
      auto* p = static_cast<const uint8_t*>(s.iov[i].iov_base);
      auto* last = static_cast<const uint8_t*>(s.iov[end - 1].iov_base);
      st = lender_->lend(fd, p, static_cast<size_t>(last - p) + s.iov[end - 1].iov_len, more);
    } else {
      st = platform::send_all(fd, &s.iov[i], static_cast<int>(end - i), more ? MSG_MORE : 0);
    }
    i = end;
  }
  if (s.slot != nullptr) lent_.emplace_back(s.slot, seq);
  s.slot = nullptr;
  return st;
}

void TxStager::confirmed(uint64_t landed) {
  while (!lent_.empty() && lent_.front().second <= landed) {
    ring_.release(lent_.front().first);
    lent_.pop_front();
  }
}

uint64_t TxStager::slot_after() const {
  // Slots go round in the order they were taken, and chunks go out in that
  // order: a held next slot is the oldest lent one.
  if (!ring_.next_held() || lent_.empty()) return 0;
  return lent_.front().second;
}

// ---- receive ----------------------------------------------------------------

RxStager::RxStager(std::unique_ptr<Copier> copier, size_t slot_bytes, int depth, core::TransferMetrics* metrics)
    : copier_(std::move(copier)), metrics_(metrics), ring_(*copier_, slot_bytes, depth) {}

RxStager::~RxStager() {
  if (last_ticket_ != 0) (void)copier_->wait(last_ticket_);
  fifo_.clear();
}

Status RxStager::receive(int fd, std::span<const Piece> pieces, Done done) {
  uint64_t ticket = 0;
  // A frame that breaks off: the copies already queued write into the region
  // that `done` keeps open, so they end before it is let go.
  auto abandon = [&](const Status& why) {
    if (ticket != 0) (void)copier_->wait(ticket);
    return why;
  };
  // Staged bytes are gathered: as many pieces (or parts of one) of a device
  // as a slot holds arrive with one receive and leave with one fence (a
  // chunk of a KV cache's blocks is hundreds of small pieces).
  StagingRing::Slot* slot = nullptr;
  int slot_device = -1;
  size_t filled = 0;
  uint64_t staged = 0;
  int64_t queued_ns = 0;
  ops_.clear();
  auto flush = [&]() -> Status {
    if (slot == nullptr) return Status();
    StagingRing::Slot* s = slot;
    slot = nullptr;
    Status st = platform::recv_exact(fd, s->data, filled);
    bool queued = false;
    if (st.ok()) {
      if (metrics_ != nullptr && staged == 0) queued_ns = internal::now_ns();
      staged += filled;
      st = copier_->copy_many(slot_device, ops_);
      queued = true;  // some of them, perhaps, even on failure
    }
    ops_.clear();
    filled = 0;
    Result<uint64_t> t = st.ok() ? copier_->fence() : Result<uint64_t>(st);
    // A copy out of the slot that no fence covers ends before the slot
    // can be reused.
    if (!t.ok() && queued) (void)copier_->sync();
    ring_.release(s);
    if (!t.ok()) return t.status();
    s->ticket = ticket = last_ticket_ = t.value();
    return Status();
  };
  for (const Piece& p : pieces) {
    if (!p.staged) {
      if (Status st = flush(); !st.ok()) return abandon(st);
      struct iovec v = {p.data, p.size};
      if (Status st = platform::recv_all(fd, &v, 1); !st.ok()) return abandon(st);
      continue;
    }
    for (size_t off = 0; off < p.size;) {
      if (slot != nullptr && (slot_device != p.device || filled == ring_.slot_bytes())) {
        if (Status st = flush(); !st.ok()) return abandon(st);
      }
      if (slot == nullptr) {
        auto acquired = ring_.acquire(p.device);
        if (!acquired.ok()) return abandon(acquired.status());
        slot = acquired.value();
        slot_device = p.device;
      }
      size_t n = std::min(ring_.slot_bytes() - filled, p.size - off);
      ops_.push_back({p.data + off, slot->data + filled, n});
      filled += n;
      off += n;
    }
  }
  if (Status st = flush(); !st.ok()) return abandon(st);
  if (ticket == 0) return then(std::move(done));
  fifo_.push_back(Entry{ticket, std::move(done), staged, queued_ns});
  return Status();
}

Status RxStager::then(Done done) {
  if (fifo_.empty()) return done();
  fifo_.push_back(Entry{0, std::move(done)});
  return Status();
}

Status RxStager::retire(bool all) {
  while (!fifo_.empty()) {
    Entry& e = fifo_.front();
    if (e.ticket != 0) {
      if (all) {
        FERRY_RETURN_IF_ERROR(copier_->wait(e.ticket));
      } else {
        auto d = copier_->done(e.ticket);
        if (!d.ok()) return d.status();
        if (!d.value()) return Status();
      }
      if (metrics_ != nullptr) {
        metrics_->staged(core::StagingDirection::kToDevice, e.staged, internal::now_ns() - e.queued_ns);
      }
    }
    Done done = std::move(e.done);
    fifo_.pop_front();
    FERRY_RETURN_IF_ERROR(done());
  }
  return Status();
}

Status RxStager::before_read(int fd) {
  FERRY_RETURN_IF_ERROR(retire(false));
  if (fifo_.empty()) return Status();
  struct pollfd p = {fd, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0) return Status();
  return retire(true);
}

}  // namespace ferry::tcp
