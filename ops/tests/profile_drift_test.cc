// Clock fits and the GPU-to-host map used to align ranks' traces.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "profile/drift.h"

namespace ferry::profile {
namespace {

constexpr int64_t kHost0 = 5'000'000'000'000;
constexpr int64_t kGpu0 = 1'763'000'000'000'000'000;

int64_t gpu_at(int64_t host, double ppm) {
  return kGpu0 + static_cast<int64_t>(std::llround(static_cast<double>(host - kHost0) * (1 + ppm * 1e-6)));
}

TEST(ProfileDrift, RecoversRateAndOffsetThroughNoise) {
  std::mt19937_64 gen(1);
  std::uniform_int_distribution<int64_t> jitter(-300, 300);
  std::vector<ClockSample> samples;
  const double ppm = 2.5;
  for (int i = 0; i < 3000; ++i) {
    int64_t host = kHost0 + int64_t{i} * 10'000'000;  // 30 s
    int64_t rtt = 1500 + (i % 7 == 0 ? 200000 : 0);  // some readings delayed by scheduling
    int64_t error = i % 7 == 0 ? 90000 : jitter(gen);
    samples.push_back({host, gpu_at(host, ppm) + error, rtt});
  }
  auto fit = fit_clock(samples);
  ASSERT_TRUE(fit.ok()) << fit.status().to_string();
  EXPECT_NEAR(fit->ppm, ppm, 0.05);
  EXPECT_LT(fit->residual_ns, 400);
  EXPECT_NEAR(static_cast<double>(fit->gpu_ref_ns - gpu_at(fit->host_ref_ns, ppm)), 0, 50);
  EXPECT_NEAR(fit->span_s, 30, 0.1);
  EXPECT_EQ(fit->samples, 3000 - 429);  // the delayed readings (every 7th) are left out
}

TEST(ProfileDrift, NeedsTwoSamples) {
  EXPECT_EQ(fit_clock({}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(fit_clock({{1, 2, 3}}).status().code(), Code::kInvalidArgument);
}

TEST(ProfileDrift, MapUsesTheLineThroughStartAndEnd) {
  const double ppm = -1.3;
  ClockFit start{kHost0, gpu_at(kHost0, ppm), 7.0 /* a poor window rate */, 0, 100, 30};
  const int64_t end_host = kHost0 + 600'000'000'000;  // 10 minutes later
  ClockFit end{end_host, gpu_at(end_host, ppm), 7.0, 0, 100, 30};
  ClockMap both(start, end);
  EXPECT_NEAR(both.ppm(), ppm, 1e-3);
  for (int64_t h : {kHost0, kHost0 + 123'456'789'012, end_host}) {
    EXPECT_NEAR(static_cast<double>(both.to_host(gpu_at(h, ppm)) - h), 0, 2) << h;
    EXPECT_NEAR(static_cast<double>(both.to_gpu(h) - gpu_at(h, ppm)), 0, 2) << h;
  }
  // The start window alone uses its own rate: 8.3 ppm off over 5 minutes is 2.5 ms.
  ClockMap alone(start);
  int64_t mid = kHost0 + 300'000'000'000;
  EXPECT_NEAR(static_cast<double>(alone.to_host(gpu_at(mid, ppm)) - mid), -300e9 * 8.3e-6, 2e3);
}

}  // namespace
}  // namespace ferry::profile
