// Plan generation and event names for `ferry profile`.
#include "profile/plan.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <random>
#include <set>

namespace ferry::profile {
namespace {

Status bad(std::string_view what) { return Status(Code::kInvalidArgument, "profile plan: " + std::string(what)); }

// A uniform draw in [0, bound): rejection of the low 2^64 mod bound values
// keeps every residue equally likely.
uint64_t draw_below(std::mt19937_64& gen, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t r = gen();
    if (r >= threshold) return r % bound;
  }
}

// Reads a decimal number at the front of `s` and advances past it.
template <typename T>
bool take_number(std::string_view& s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p == s.data()) return false;
  s.remove_prefix(static_cast<size_t>(p - s.data()));
  return true;
}

bool take_literal(std::string_view& s, std::string_view lit) {
  if (s.substr(0, lit.size()) != lit) return false;
  s.remove_prefix(lit.size());
  return true;
}

}  // namespace

std::vector<uint64_t> default_sizes() {
  std::vector<uint64_t> out;
  for (int i = 0; i <= 30; ++i) out.push_back(uint64_t{1} << i);
  return out;
}

std::vector<Config> canonical_configs(const PlanSpec& spec) {
  std::vector<Config> out;
  int id = 0;
  for (int src : spec.gpus) {
    for (int dst : spec.gpus) {
      if (src == dst) continue;
      for (uint64_t size : spec.sizes) out.push_back(Config{id++, src, dst, size});
    }
  }
  return out;
}

void seeded_shuffle(std::vector<Config>& order, uint64_t seed) {
  std::mt19937_64 gen(seed);
  for (size_t i = order.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(draw_below(gen, i));
    std::swap(order[i - 1], order[j]);
  }
}

Result<std::vector<Config>> make_plan(const PlanSpec& spec) {
  if (spec.gpus.size() < 2) return bad("needs at least two GPUs, got " + std::to_string(spec.gpus.size()));
  std::set<int> gpus;
  for (int g : spec.gpus) {
    if (g < 0) return bad("GPU ordinal " + std::to_string(g) + " is negative");
    if (!gpus.insert(g).second) return bad("GPU " + std::to_string(g) + " is listed twice");
  }
  if (spec.sizes.empty()) return bad("no sizes");
  std::set<uint64_t> sizes;
  for (uint64_t s : spec.sizes) {
    if (s == 0) return bad("size 0 moves nothing");
    if (!sizes.insert(s).second) return bad("size " + std::to_string(s) + " is listed twice");
  }
  std::vector<Config> order = canonical_configs(spec);
  seeded_shuffle(order, spec.seed);
  return order;
}

Result<std::vector<int>> parse_gpu_list(std::string_view text) {
  std::vector<int> out;
  std::set<int> seen;
  auto fail = [&](std::string_view why) {
    return Status(Code::kInvalidArgument, "GPU list \"" + std::string(text) + "\": " + std::string(why));
  };
  if (text.empty()) return fail("empty");
  std::string_view rest = text;
  for (;;) {
    int from = 0;
    if (rest.empty() || rest[0] == '-' || !take_number(rest, from)) {
      return fail("expected a GPU ordinal like 0, a range like 0-3, or a list 0,2");
    }
    int to = from;
    if (take_literal(rest, "-") && (rest.empty() || rest[0] == '-' || !take_number(rest, to))) {
      return fail("a range is FROM-TO");
    }
    if (to < from) return fail("range goes backwards");
    if (to - from > 1024) return fail("range too long");
    for (int g = from; g <= to; ++g) {
      if (!seen.insert(g).second) return fail("GPU " + std::to_string(g) + " is listed twice");
      out.push_back(g);
    }
    if (rest.empty()) return out;
    if (!take_literal(rest, ",")) return fail("unexpected \"" + std::string(rest) + "\"");
  }
}

std::string event_name(const Config& c, int repetition) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "p2p_cfg%04d_s%dd%d_sz%llu_r%d", c.id, c.src, c.dst,
                static_cast<unsigned long long>(c.size), repetition);
  return buf;
}

std::optional<EventKey> parse_event_name(std::string_view name) {
  EventKey k;
  std::string_view s = name;
  if (!take_literal(s, "p2p_cfg") || !take_number(s, k.config_id)) return std::nullopt;
  if (!take_literal(s, "_s") || !take_number(s, k.src)) return std::nullopt;
  if (!take_literal(s, "d") || !take_number(s, k.dst)) return std::nullopt;
  if (!take_literal(s, "_sz") || !take_number(s, k.size)) return std::nullopt;
  if (!take_literal(s, "_r") || !take_number(s, k.repetition)) return std::nullopt;
  if (!s.empty()) return std::nullopt;
  return k;
}

}  // namespace ferry::profile
