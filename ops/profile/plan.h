// The plan of a `ferry profile` run: every directed GPU pair x every size, in
// an order shuffled by a seeded generator, and the names its events carry.
//
// The same seed gives the same order on every machine and every standard
// library: the shuffle is Fisher-Yates over std::mt19937_64 (whose output the
// C++ standard fixes) with our own unbiased bounded draw, not std::shuffle or
// std::uniform_int_distribution (whose algorithms are left to each library).
//
// Example:
//   auto plan = ferry::profile::make_plan({.gpus = {0, 1}, .sizes = default_sizes(), .seed = 42});
//   for (const Config& c : plan.value()) run(c);   // 62 configurations
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry::profile {

// One configuration: bytes from GPU `src` to GPU `dst`. `id` numbers the
// configurations in canonical order (src, then dst, then size ascending as
// given), so a configuration keeps its id whatever the seed.
struct Config {
  int id = 0;
  int src = 0;
  int dst = 0;
  uint64_t size = 0;
  friend bool operator==(const Config&, const Config&) = default;
};

struct PlanSpec {
  std::vector<int> gpus;        // GPU ordinals, at least two, no duplicates
  std::vector<uint64_t> sizes;  // bytes, each > 0, no duplicates
  uint64_t seed = 42;
};

// 2^0 ... 2^30 bytes: 31 sizes.
std::vector<uint64_t> default_sizes();

// The configurations in canonical order (ids 0, 1, ...). Does not validate.
std::vector<Config> canonical_configs(const PlanSpec& spec);

// The configurations in execution order: canonical_configs shuffled by
// spec.seed. kInvalidArgument for fewer than two GPUs, duplicate GPUs or
// sizes, a zero size or a negative GPU ordinal.
Result<std::vector<Config>> make_plan(const PlanSpec& spec);

// Shuffles `order` in place (Fisher-Yates, mt19937_64 seeded with `seed`).
void seeded_shuffle(std::vector<Config>& order, uint64_t seed);

// "0,1,3", "0-3", "0-1,4" -> ordinals in the order given. kInvalidArgument
// for anything else, duplicates included.
Result<std::vector<int>> parse_gpu_list(std::string_view text);

// An event's name: "p2p_cfg0042_s0d1_sz1048576_r0" (config id, source,
// destination, size, repetition). Trace events and NVTX ranges use it.
std::string event_name(const Config& c, int repetition);

struct EventKey {
  int config_id = 0;
  int src = 0;
  int dst = 0;
  uint64_t size = 0;
  int repetition = 0;
  friend bool operator==(const EventKey&, const EventKey&) = default;
};

// The inverse of event_name; nullopt for any other text.
std::optional<EventKey> parse_event_name(std::string_view name);

}  // namespace ferry::profile
