// Feeds a peer's notifications to the queue that orders them: every
// transport hands it a notification's text, its sequence number and the skip
// flag exactly as the peer sent them (TCP NOTIFY and WRITE, the local
// transport's LOCAL_NOTE), and the application takes them out in between.
// The queue must deliver in number order with nothing invented, lost or
// repeated, refuse what would pass its budget without holding any of it,
// and count against the budget exactly what it holds: the text and a fixed
// overhead of every note queued or waiting for an earlier number (a skip
// that carries its write's tag is one, marked not delivered), and the
// overhead of every skip without a tag waiting for one. Taken out with
// delivered_only, the notes not delivered are dropped on the way.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "core/notification_queue.h"
#include "ferry/engine.h"

namespace {

using ferry::Code;
using ferry::core::ByteBudget;
using ferry::core::NotificationQueue;

void require(bool ok) {
  if (!ok) std::abort();
}

// What the contract says the queue holds, and the bytes that costs.
struct Model {
  using Entry = NotificationQueue::Entry;
  static constexpr size_t kOverhead = NotificationQueue::kNoteOverhead;
  uint64_t next = 1;
  std::map<uint64_t, std::optional<Entry>> waiting;  // nullopt: a skip without a tag
  std::deque<Entry> queued;
  size_t bytes = 0;  // kept as it changes: recounting after every step is quadratic

  size_t recount() const {
    size_t n = 0;
    for (const Entry& q : queued) n += kOverhead + q.text.size();
    for (const auto& [seq, note] : waiting) n += kOverhead + (note ? note->text.size() : 0);
    return n;
  }
  static bool is_queued(bool skip, const std::string& note) { return !skip || !note.empty(); }
  // The bytes a push takes before anything it replaces is given back.
  size_t cost(uint64_t seq, bool skip, const std::string& note) const {
    if (is_queued(skip, note)) return kOverhead + note.size();
    return seq == 0 || seq == next ? 0 : kOverhead;
  }
  void push(uint64_t seq, bool skip, std::string note) {
    const bool q = is_queued(skip, note);
    if (seq == 0) {
      if (q) {
        bytes += kOverhead + note.size();
        queued.push_back(Entry{std::move(note), !skip});
      }
      return;
    }
    if (auto old = waiting.find(seq); old != waiting.end()) {
      bytes -= kOverhead + (old->second ? old->second->text.size() : 0);
    }
    bytes += kOverhead + (q ? note.size() : 0);
    waiting[seq] = q ? std::optional<Entry>(Entry{std::move(note), !skip}) : std::nullopt;
    for (auto it = waiting.begin(); it != waiting.end() && it->first == next; it = waiting.erase(it), ++next) {
      if (it->second) {
        queued.push_back(std::move(*it->second));  // its bytes stay counted
      } else {
        bytes -= kOverhead;
      }
    }
  }
  // The next entry (with `delivered_only`, dropping those not delivered
  // before it); nullopt if none.
  std::optional<Entry> pop(bool delivered_only) {
    while (delivered_only && !queued.empty() && !queued.front().delivered) take();
    if (queued.empty()) return std::nullopt;
    return take();
  }
  Entry take() {
    Entry e = std::move(queued.front());
    queued.pop_front();
    bytes -= kOverhead + e.text.size();
    return e;
  }
};

bool same(const NotificationQueue::Entry& a, const NotificationQueue::Entry& b) {
  return a.text == b.text && a.delivered == b.delivered;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  // A small budget, so that running out is common.
  ByteBudget budget(in.ConsumeIntegralInRange<size_t>(0, 1 << 16));
  NotificationQueue queue(&budget);
  Model model;
  std::atomic<bool> stopped{false};
  for (int steps = 0; steps < 128 && in.remaining_bytes() > 0; ++steps) {
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0:
      case 1: {
        uint64_t seq;
        switch (in.ConsumeIntegralInRange<int>(0, 3)) {
          case 0:
            seq = 0;
            break;
          case 1:
            seq = model.next + in.ConsumeIntegralInRange<uint64_t>(0, 8);
            break;
          case 2:
            seq = model.next - std::min<uint64_t>(model.next - 1, in.ConsumeIntegralInRange<uint64_t>(0, 8));
            break;
          default:
            seq = in.ConsumeIntegral<uint64_t>();
        }
        bool skip = in.ConsumeBool();
        // Now and then one near the size limit, or past it.
        std::string note =
            in.ConsumeIntegralInRange<int>(0, 63) == 0
                ? std::string(ferry::Connection::kMaxNotification - 2 + in.ConsumeIntegralInRange<size_t>(0, 4), 'n')
                : in.ConsumeRandomLengthString(256);
        int accepted = 0;
        size_t before = budget.held();
        ferry::Status s = queue.push_numbered(seq, skip, note, [&] { ++accepted; });
        require(accepted <= 1);
        if (note.size() > ferry::Connection::kMaxNotification) {
          require(s.code() == Code::kDataLoss && accepted == 0);
        } else if (seq != 0 && (seq < model.next || (skip && model.waiting.count(seq) != 0))) {
          require(s.ok() && accepted == 1);  // late, or a skip of what already arrived: nothing changes
        } else if (before + model.cost(seq, skip, note) > budget.limit() && model.cost(seq, skip, note) != 0) {
          require(s.code() == Code::kResourceExhausted && accepted == 0);
        } else {
          require(s.ok() && accepted == 1);
          model.push(seq, skip, std::move(note));
        }
        break;
      }
      case 2: {
        bool delivered_only = in.ConsumeBool();
        auto got = queue.poll(delivered_only);
        auto want = model.pop(delivered_only);
        require(got.has_value() == want.has_value());
        if (got) require(same(*got, *want));
        break;
      }
      case 3: {
        bool delivered_only = in.ConsumeBool();
        NotificationQueue::Entry out;
        auto w = queue.wait(ferry::Clock::now(), stopped, out, delivered_only);
        auto want = model.pop(delivered_only);
        if (w == NotificationQueue::Wait::kNote) {
          require(want.has_value() && same(out, *want));
        } else {
          require(!want.has_value());
        }
        break;
      }
    }
    require(budget.held() == model.bytes);
  }
  require(model.bytes == model.recount());
  return 0;
}
