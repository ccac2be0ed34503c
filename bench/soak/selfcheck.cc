// `ferry_soak selfcheck`: the soak's own arithmetic and its dereg fault,
// checked without a peer. Plans must keep every piece inside its buffer,
// never let two pieces one end uses at once overlap (or a correct transfer
// would look corrupted, and a corrupting one could hide), and cover each
// message exactly; the pattern must detect a single flipped byte at any
// offset; the dereg fault must not strike an operation that ended after the
// fault chose it (the lane may be filling that memory for its next
// operation, over the canary: a false VIOLATION).
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "soak/lane.h"
#include "soak/pattern.h"
#include "soak/plan.h"

namespace ferry::soak {

namespace {

std::string check_disjoint(std::vector<Piece> pieces, uint64_t room) {
  std::sort(pieces.begin(), pieces.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].size == 0) return "an empty piece";
    if (pieces[i].offset + pieces[i].size > room) return "a piece past the buffer";
    if (i > 0 && pieces[i - 1].offset + pieces[i - 1].size > pieces[i].offset) return "overlapping pieces";
  }
  return "";
}

std::string check_stream(const std::vector<Piece>& pieces, uint64_t total) {
  uint64_t at = 0;
  for (const auto& p : pieces) {
    if (p.stream_offset != at) return "pieces do not cover the stream in order";
    at += p.size;
  }
  return at == total ? "" : "pieces cover " + std::to_string(at) + " of " + std::to_string(total) + " bytes";
}

std::string check_plan(const OpPlan& p, uint64_t max) {
  const uint64_t room = buffer_bytes(max);
  const Movement& m = p.main;
  auto concat = [](std::vector<Piece> a, const std::vector<Piece>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  std::string e;
  switch (p.kind) {
    case OpKind::kSend:
    case OpKind::kSendv:
    case OpKind::kSmallRecv:
      if (m.bytes < 1 || m.bytes > max) return "message size out of range";
      if (!(e = check_disjoint(m.from, room)).empty()) return "sender: " + e;
      if (!(e = check_disjoint(m.to, room)).empty()) return "receiver: " + e;
      if (!(e = check_stream(m.from, m.bytes)).empty()) return "sender: " + e;
      if (!(e = check_stream(m.to, m.capacity)).empty()) return "receiver: " + e;
      if (p.kind == OpKind::kSmallRecv ? m.capacity >= m.bytes : m.capacity < m.bytes) return "wrong capacity";
      return "";
    case OpKind::kExchange:
      if (!(e = check_disjoint(concat(m.from, p.back.to), room)).empty()) return "initiator: " + e;
      if (!(e = check_disjoint(concat(m.to, p.back.from), room)).empty()) return "other end: " + e;
      if (!(e = check_stream(m.from, m.bytes)).empty() || !(e = check_stream(m.to, m.bytes)).empty() ||
          !(e = check_stream(p.back.from, p.back.bytes)).empty() ||
          !(e = check_stream(p.back.to, p.back.bytes)).empty()) {
        return e;
      }
      return "";
    case OpKind::kWrite:
    case OpKind::kWriteNotify:
    case OpKind::kWritev:
    case OpKind::kRead:
    case OpKind::kReadv: {
      bool read = p.kind == OpKind::kRead || p.kind == OpKind::kReadv;
      if (m.bytes < 1 || m.bytes > max) return "size out of range";
      if (m.from.size() != m.to.size()) return "items differ in number";
      if (!(e = check_disjoint(m.from, room)).empty()) return "initiator: " + e;
      if (!(e = check_stream(m.from, m.bytes)).empty()) return e;
      for (size_t i = 0; i < m.from.size(); ++i) {
        if (m.from[i].size != m.to[i].size) return "an item's two sides differ in size";
        if (m.to[i].offset + m.to[i].size > room) return "a remote item past the export";
        if (read && m.to[i].stream_offset != m.to[i].offset) return "a read item's pattern offset";
      }
      if (!read && !(e = check_disjoint(m.to, room)).empty()) return "target: " + e;
      if (!read && !(e = check_stream(m.to, m.bytes)).empty()) return e;
      return "";
    }
  }
  return "unknown kind";
}

// A lane's operation ends while the fault, having chosen it, pauses: the
// strike must find nothing to do and leave the region registered.
std::string check_late_strike() {
  auto engine = Engine::create(Options{});
  if (!engine.ok()) return "engine: " + engine.status().to_string();
  auto mem = SoakMemory::create(4096, -1);
  if (!mem.ok()) return "memory: " + mem.status().to_string();
  auto region = engine.value()->reg(mem.value()->data(), mem.value()->size());
  if (!region.ok()) return "reg: " + region.status().to_string();
  Counters counters;
  Watchdog watchdog(counters, std::chrono::milliseconds(5000));
  Roster roster;
  LaneRegions lane;
  lane.local = region.value();
  lane.local_live = true;
  lane.local_mem = mem.value().get();
  lane.local_in_use = true;
  lane.local_receives_only = true;
  roster.add(&lane);
  std::mt19937_64 rng(1);
  std::string struck;
  std::thread fault([&] { struck = roster.strike(*engine.value(), watchdog, rng, std::chrono::milliseconds(300)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    platform::MutexLock lock(lane.mu);  // as the lane does when its operation ends
    lane.local_in_use = false;
  }
  fault.join();
  roster.remove(&lane);
  if (!struck.empty()) return "struck an operation that had ended: " + struck;
  bool canary;
  {
    platform::MutexLock lock(lane.mu);
    canary = lane.local_canary;
  }
  if (lane.struck || canary || !lane.local_live) return "the lane was marked struck";
  Status s = engine.value()->dereg(region.value());
  if (!s.ok()) return "the region was deregistered by the strike: " + s.to_string();
  return "";
}

}  // namespace

int selfcheck_main(uint64_t plans) {
  uint64_t counts[kOpKinds] = {};
  for (uint64_t max : {uint64_t{16}, uint64_t{4099}, uint64_t{1} << 20, uint64_t{64} << 20}) {
    for (uint64_t i = 0; i < plans; ++i) {
      OpPlan p = make_plan(0x5eed + max, i, max);
      ++counts[static_cast<int>(p.kind)];
      std::string e = check_plan(p, max);
      if (!e.empty()) {
        std::fprintf(stderr, "selfcheck: max %llu, %s: %s\n", static_cast<unsigned long long>(max), describe(p).c_str(),
                     e.c_str());
        return 1;
      }
    }
  }
  for (int k = 0; k < kOpKinds; ++k) {
    if (counts[k] == 0) {
      std::fprintf(stderr, "selfcheck: no %s in %llu plans\n",
                   std::string(op_kind_name(static_cast<OpKind>(k))).c_str(), static_cast<unsigned long long>(plans));
      return 1;
    }
  }
  // The pattern: any slice checks against itself, a flipped byte anywhere is found where it is.
  std::vector<uint8_t> buf(4096 + 64);
  for (uint64_t start : {0, 1, 7, 8, 13, 4093}) {
    for (size_t n : {1, 2, 7, 8, 9, 63, 1000, 4096}) {
      pattern_fill(buf.data() + 3, n, 42, start);
      if (pattern_check(buf.data() + 3, n, 42, start) != kNoMismatch)
        return std::fprintf(stderr, "selfcheck: pattern\n"), 1;
      if (n > 1 && pattern_check(buf.data() + 3, n, 43, start) == kNoMismatch) {
        return std::fprintf(stderr, "selfcheck: two seeds give the same bytes\n"), 1;
      }
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        buf[3 + at] ^= 1;
        if (pattern_check(buf.data() + 3, n, 42, start) != at)
          return std::fprintf(stderr, "selfcheck: a flip missed\n"), 1;
        buf[3 + at] ^= 1;
      }
    }
  }
  if (std::string e = check_late_strike(); !e.empty()) {
    return std::fprintf(stderr, "selfcheck: dereg fault: %s\n", e.c_str()), 1;
  }
  std::printf("selfcheck: %llu plans at each of 4 maxima, the pattern and the dereg fault's timing: ok\n",
              static_cast<unsigned long long>(plans));
  return 0;
}

}  // namespace ferry::soak
