// Operation plans (see plan.h): sizes from 1 byte to the maximum, spread on a
// log scale with extra weight on the engine's boundaries (the inline limit,
// the chunk size), pieces at odd offsets in random order.
#include "soak/plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "soak/pattern.h"

namespace ferry::soak {

std::string_view op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kSend:
      return "send";
    case OpKind::kSendv:
      return "sendv";
    case OpKind::kExchange:
      return "exchange";
    case OpKind::kWrite:
      return "write";
    case OpKind::kWriteNotify:
      return "write+notify";
    case OpKind::kWritev:
      return "writev";
    case OpKind::kRead:
      return "read";
    case OpKind::kReadv:
      return "readv";
    case OpKind::kSmallRecv:
      return "small-recv";
  }
  return "?";
}

namespace {

using Rng = std::mt19937_64;

uint64_t uniform(Rng& r, uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(r); }

// 1..max, log-uniform, with the engine's boundaries (64 KiB inline limit,
// 512 KiB chunks, 1 MiB staging slots) and their neighbours now and then.
uint64_t pick_size(Rng& r, uint64_t max) {
  if (uniform(r, 0, 9) == 0) {
    static constexpr uint64_t kEdges[] = {65536, 524288, 1048576, 4096};
    uint64_t e = kEdges[uniform(r, 0, 3)] + uniform(r, 0, 2) - 1;
    if (e <= max) return e;
  }
  double e = std::uniform_real_distribution<double>(0.0, std::log2(static_cast<double>(max)))(r);
  uint64_t n = static_cast<uint64_t>(std::exp2(e));
  n += uniform(r, 0, std::max<uint64_t>(1, n / 2));
  return std::clamp<uint64_t>(n, 1, max);
}

// Cuts `total` into `k` non-empty sizes (k <= total).
std::vector<uint64_t> cut(Rng& r, uint64_t total, int k) {
  k = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(k), total));
  std::vector<uint64_t> marks;
  while (static_cast<int>(marks.size()) < k - 1) {
    uint64_t m = uniform(r, 1, total - 1);
    if (std::find(marks.begin(), marks.end(), m) == marks.end()) marks.push_back(m);
  }
  std::sort(marks.begin(), marks.end());
  std::vector<uint64_t> sizes;
  uint64_t prev = 0;
  for (uint64_t m : marks) {
    sizes.push_back(m - prev);
    prev = m;
  }
  sizes.push_back(total - prev);
  return sizes;
}

// Places pieces of `sizes` in a buffer of `room` bytes without overlap, in a
// random order with random gaps (odd offsets included). Returns the offsets
// in the order of `sizes`. REQUIRES: sum(sizes) + kSlack <= room.
std::vector<uint64_t> place(Rng& r, const std::vector<uint64_t>& sizes, uint64_t room) {
  uint64_t used = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  uint64_t spare = room - used;
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), r);
  // Random gaps before each piece, together at most `spare`.
  std::vector<uint64_t> offsets(sizes.size());
  uint64_t at = 0, gap_budget = spare;
  for (size_t slot = 0; slot < order.size(); ++slot) {
    uint64_t share = gap_budget / (order.size() - slot + 1);
    uint64_t gap = uniform(r, 0, share);
    gap_budget -= gap;
    at += gap;
    offsets[order[slot]] = at;
    at += sizes[order[slot]];
  }
  return offsets;
}

std::vector<Piece> pieces(const std::vector<uint64_t>& sizes, const std::vector<uint64_t>& offsets) {
  std::vector<Piece> out;
  uint64_t stream = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.push_back({offsets[i], sizes[i], stream});
    stream += sizes[i];
  }
  return out;
}

// A message of `bytes` from the sender's local buffer (`send_parts` pieces)
// into the receiver's (`recv_parts` pieces, `extra` spare bytes at the end).
// `send_room`/`recv_room`: the part of each local buffer this message may use.
Movement message(Rng& r, uint64_t bytes, int send_parts, int recv_parts, uint64_t extra, uint64_t send_base,
                 uint64_t send_room, uint64_t recv_base, uint64_t recv_room) {
  Movement m;
  m.seed = r();
  m.bytes = bytes;
  auto s = cut(r, bytes, send_parts);
  auto so = place(r, s, send_room);
  m.from = pieces(s, so);
  for (auto& p : m.from) p.offset += send_base;
  auto v = cut(r, bytes, recv_parts);
  v.back() += extra;
  auto vo = place(r, v, recv_room);
  m.to = pieces(v, vo);
  for (auto& p : m.to) p.offset += recv_base;
  m.capacity = bytes + extra;
  return m;
}

OpKind pick_kind(Rng& r) {
  // Weights: every form often, the deliberately failing receive rarely.
  static constexpr int kWeights[kOpKinds] = {14, 10, 10, 14, 10, 10, 14, 10, 2};
  int total = std::accumulate(std::begin(kWeights), std::end(kWeights), 0);
  int x = static_cast<int>(uniform(r, 0, static_cast<uint64_t>(total - 1)));
  for (int k = 0; k < kOpKinds; ++k) {
    if (x < kWeights[k]) return static_cast<OpKind>(k);
    x -= kWeights[k];
  }
  return OpKind::kSend;
}

}  // namespace

OpPlan make_plan(uint64_t lane_seed, uint64_t index, uint64_t max) {
  Rng r(mix64(lane_seed ^ mix64(index + 1)));
  OpPlan p;
  p.index = index;
  p.kind = pick_kind(r);
  p.survivor_initiates = uniform(r, 0, 1) == 0;
  const uint64_t room = buffer_bytes(max);
  const int parts_max = 8;
  switch (p.kind) {
    case OpKind::kSend:
    case OpKind::kSendv: {
      bool v = p.kind == OpKind::kSendv;
      uint64_t n = pick_size(r, max);
      uint64_t extra = uniform(r, 0, 3) == 0 ? uniform(r, 1, 4096) : 0;
      int sp = v ? static_cast<int>(uniform(r, 1, parts_max)) : 1;
      int rp = v ? static_cast<int>(uniform(r, 1, parts_max)) : 1;
      p.main = message(r, n, sp, rp, extra, 0, room, 0, room);
      p.vector = v;
      break;
    }
    case OpKind::kSmallRecv: {
      uint64_t n = std::max<uint64_t>(2, pick_size(r, max));
      uint64_t cap = uniform(r, 1, n - 1);
      p.main = message(r, n, 1, 1, 0, 0, room, 0, room);
      p.main.to[0].size = cap;
      p.main.capacity = cap;
      break;
    }
    case OpKind::kExchange: {
      // Each end sends one message and receives the other's, both in its
      // local buffer: the first half holds what it sends, the second what it
      // receives.
      uint64_t half = room / 2;
      uint64_t each = std::max<uint64_t>(1, max / 2);  // <= half of the room, less its share of the slack
      uint64_t n1 = pick_size(r, each), n2 = pick_size(r, each);
      int k1 = static_cast<int>(uniform(r, 1, 4)), k2 = static_cast<int>(uniform(r, 1, 4));
      p.main = message(r, n1, k1, k2, 0, 0, half, half, room - half);
      p.back = message(r, n2, k2, k1, 0, 0, half, half, room - half);
      p.vector = true;
      break;
    }
    case OpKind::kWrite:
    case OpKind::kWriteNotify:
    case OpKind::kWritev:
    case OpKind::kRead:
    case OpKind::kReadv: {
      bool v = p.kind == OpKind::kWritev || p.kind == OpKind::kReadv;
      bool read = p.kind == OpKind::kRead || p.kind == OpKind::kReadv;
      uint64_t n = pick_size(r, max);
      int k = v ? static_cast<int>(uniform(r, 1, parts_max)) : 1;
      auto sizes = cut(r, n, k);
      Movement m;
      m.seed = r();
      m.bytes = n;
      m.from = pieces(sizes, place(r, sizes, room));
      if (read) {
        // Reads may overlap in the source (it never changes).
        for (uint64_t s : sizes) {
          uint64_t off = uniform(r, 0, room - s);
          m.to.push_back({off, s, off});
        }
      } else {
        m.to = pieces(sizes, place(r, sizes, room));
      }
      p.main = std::move(m);
      p.vector = v;
      break;
    }
  }
  return p;
}

std::string describe(const OpPlan& p) {
  std::string s = "op " + std::to_string(p.index) + " " + std::string(op_kind_name(p.kind)) + " " +
                  (p.survivor_initiates ? "survivor->peer" : "peer->survivor") + " " +
                  std::to_string(p.main.from.size()) + "/" + std::to_string(p.main.to.size()) + " pieces " +
                  std::to_string(p.main.bytes) + " B";
  if (p.kind == OpKind::kExchange) s += " + " + std::to_string(p.back.bytes) + " B back";
  return s;
}

}  // namespace ferry::soak
