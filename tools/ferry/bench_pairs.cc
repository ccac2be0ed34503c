// NIC-set lists, burst order and paired ratios for `ferry bench --alternate-nics`.
#include "ferry/bench_pairs.h"

#include <algorithm>
#include <random>

#include "profile/stats.h"

namespace ferry::cli {

Result<std::vector<std::string>> parse_nic_sets(std::string_view text) {
  std::vector<std::string> sets;
  size_t start = 0;
  for (;;) {
    size_t slash = text.find('/', start);
    std::string_view set = text.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (set.empty() || set.front() == ',' || set.back() == ',' || set.find(",,") != std::string_view::npos) {
      return Status(Code::kInvalidArgument, "--alternate-nics \"" + std::string(text) + "\": set " +
                                                std::to_string(sets.size() + 1) + " at position " +
                                                std::to_string(start) + " is empty or has an empty NIC name");
    }
    sets.emplace_back(set);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (sets.size() < 2) {
    return Status(Code::kInvalidArgument,
                  "--alternate-nics \"" + std::string(text) + "\": give at least two NIC sets, separated by '/'");
  }
  return sets;
}

std::vector<int> alternation_order(int sets, int rounds) {
  std::vector<int> order;
  order.reserve(static_cast<size_t>(std::max(0, sets * rounds)));
  for (int r = 0; r < rounds; ++r) {
    int first = sets > 2 ? r % sets : 0;
    for (int i = 0; i < sets; ++i) order.push_back((first + i) % sets);
  }
  return order;
}

PairedRatio paired_ratio(const std::vector<double>& ref, const std::vector<double>& other, double confidence,
                         int resamples) {
  PairedRatio out;
  std::vector<double> ratios;
  for (size_t i = 0; i < ref.size() && i < other.size(); ++i) {
    if (ref[i] <= 0) continue;
    ratios.push_back(other[i] / ref[i]);
    out.above += other[i] > ref[i] ? 1 : 0;
  }
  out.pairs = static_cast<int>(ratios.size());
  if (ratios.empty()) return out;
  out.median = profile::median(ratios);
  std::mt19937_64 rng(0x5eed);
  std::uniform_int_distribution<size_t> pick(0, ratios.size() - 1);
  std::vector<double> medians, sample(ratios.size());
  medians.reserve(static_cast<size_t>(std::max(1, resamples)));
  for (int b = 0; b < resamples; ++b) {
    for (double& s : sample) s = ratios[pick(rng)];
    medians.push_back(profile::median(sample));
  }
  std::sort(medians.begin(), medians.end());
  double tail = (1 - confidence) / 2;
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(q * static_cast<double>(medians.size() - 1) + 0.5);
    return medians[std::min(i, medians.size() - 1)];
  };
  out.lo = at(tail);
  out.hi = at(1 - tail);
  return out;
}

}  // namespace ferry::cli
