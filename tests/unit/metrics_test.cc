// The engine's transfer metrics: the counters alone (buckets, shards, codes,
// the Prometheus text), then what two engines count while they move random
// bytes every way on each transport, each family checked against what the
// test did, and nothing counted with metrics off.
#include "core/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"
#include "testing/random_data.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using core::MeteredOp;

TEST(TransferMetrics, CountsEachTransferOnceInTheRightBucket) {
  core::TransferMetrics m;
  m.record(MeteredOp::kSend, 0, 100, 800, Code::kOk, nullptr);                 // 0.8 us: the first bucket
  m.record(MeteredOp::kSend, 0, 50, 3'000, Code::kOk, nullptr);                // 3 us: the 5 us bucket
  m.record(MeteredOp::kSend, 0, 7, 20'000'000'000, Code::kPeerLost, nullptr);  // 20 s: +Inf only
  m.record(MeteredOp::kRead, 1, 4096, 1'000'000, Code::kOk, nullptr);          // 1 ms, local
  m.record(MeteredOp::kRead, 5, 4096, 1'000'000, Code::kOk, nullptr);          // no such transport: ignored
  MetricsSnapshot s = m.snapshot();
  ASSERT_EQ(s.transfers.size(), 2u);
  const TransferCounts& send = s.transfers.at({"send", "tcp"});
  EXPECT_EQ(send.succeeded, 2u);
  EXPECT_EQ(send.failed, 1u);
  EXPECT_EQ(send.bytes, 150u) << "a failed transfer's bytes were counted";
  const auto& bounds = MetricsSnapshot::latency_bounds();
  ASSERT_EQ(send.within.size(), bounds.size());
  EXPECT_EQ(send.within[0], 1u);                  // <= 1 us
  EXPECT_EQ(send.within[1], 1u);                  // <= 2.5 us
  EXPECT_EQ(send.within[2], 2u);                  // <= 5 us
  EXPECT_EQ(send.within[bounds.size() - 2], 2u);  // <= 10 s
  EXPECT_EQ(send.within.back(), 3u);              // +Inf
  EXPECT_NEAR(send.seconds_sum, 20.0000038, 1e-9);
  EXPECT_EQ(s.transfers.at({"read", "local"}).bytes, 4096u);
  EXPECT_EQ(s.failures, (std::map<std::string, uint64_t>{{"peer_lost", 1}}));
}

TEST(TransferMetrics, ThreadsCountingAtOnceLoseNothing) {
  core::TransferMetrics m;
  constexpr int kThreads = 8, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) m.record(MeteredOp::kWrite, t % 2, 3, 1000 * (i % 50), Code::kOk, nullptr);
    });
  }
  for (auto& th : threads) th.join();
  MetricsSnapshot s = m.snapshot();
  uint64_t n = s.transfers.at({"write", "tcp"}).succeeded + s.transfers.at({"write", "local"}).succeeded;
  EXPECT_EQ(n, uint64_t{kThreads} * kEach);
  EXPECT_EQ(s.transfers.at({"write", "tcp"}).bytes, uint64_t{kThreads / 2} * kEach * 3);
}

TEST(TransferMetrics, PrometheusTextNamesEveryFamilyWithItsType) {
  core::TransferMetrics m;
  m.record(MeteredOp::kWriteBlocks, 0, 65536, 40'000, Code::kOk, nullptr);
  m.record(MeteredOp::kWriteBlocks, 0, 0, 40'000, Code::kDeadlineExceeded, nullptr);
  MetricsSnapshot s = m.snapshot();
  s.connections["tcp"] = 3;
  s.connections_failed["tcp"] = 1;
  s.gpu_objects_made_late = 4;
  s.handshakes_refused["busy"] = 2;
  s.paths_lost["tcp"] = 5;
  m.chunk_resent("tcp", 1000);
  m.chunk_resent("tcp", 24);
  s.resent = m.snapshot().resent;
  s.held_bytes = 77;
  s.held_bytes_peak = 99;
  std::string text = prometheus_text(s);
  for (const char* want : {"# TYPE ferry_transfers_total counter\n",
                           "ferry_transfers_total{op=\"write_blocks\",transport=\"tcp\",result=\"ok\"} 1\n",
                           "ferry_transfers_total{op=\"write_blocks\",transport=\"tcp\",result=\"failed\"} 1\n",
                           "# TYPE ferry_transfer_bytes_total counter\n",
                           "ferry_transfer_bytes_total{op=\"write_blocks\",transport=\"tcp\"} 65536\n",
                           "# TYPE ferry_transfer_seconds histogram\n",
                           "ferry_transfer_seconds_bucket{op=\"write_blocks\",transport=\"tcp\",le=\"2.5e-05\"} 0\n",
                           "ferry_transfer_seconds_bucket{op=\"write_blocks\",transport=\"tcp\",le=\"5e-05\"} 2\n",
                           "ferry_transfer_seconds_bucket{op=\"write_blocks\",transport=\"tcp\",le=\"+Inf\"} 2\n",
                           "ferry_transfer_seconds_count{op=\"write_blocks\",transport=\"tcp\"} 2\n",
                           "ferry_transfer_seconds_sum{op=\"write_blocks\",transport=\"tcp\"} 8e-05\n",
                           "ferry_transfer_failures_total{code=\"deadline_exceeded\"} 1\n",
                           "ferry_connections{transport=\"tcp\",state=\"up\"} 2\n",
                           "ferry_connections{transport=\"tcp\",state=\"failed\"} 1\n",
                           "# TYPE ferry_gpu_objects_made_late_total counter\n",
                           "ferry_gpu_objects_made_late_total 4\n",
                           "# TYPE ferry_handshakes_refused_total counter\n",
                           "ferry_handshakes_refused_total{reason=\"busy\"} 2\n",
                           "# TYPE ferry_paths_lost_total counter\n",
                           "ferry_paths_lost_total{transport=\"tcp\"} 5\n",
                           "# TYPE ferry_chunks_resent_total counter\n",
                           "ferry_chunks_resent_total{transport=\"tcp\"} 2\n",
                           "# TYPE ferry_chunks_resent_bytes_total counter\n",
                           "ferry_chunks_resent_bytes_total{transport=\"tcp\"} 1024\n",
                           "# TYPE ferry_held_bytes gauge\n",
                           "ferry_held_bytes 77\n",
                           "ferry_held_bytes_peak 99\n"}) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing: " << want << "in:\n" << text;
  }
}

class EngineMetrics : public PairTest {};

// Every operation on random sizes, both directions of a connection, one
// failure the peer reports; the initiator's and the target's counts match
// what the test did.
TEST_P(EngineMetrics, CountWhatTheEnginesDid) {
  const std::string transport = GetParam();
  std::mt19937_64 rng(77);
  std::vector<uint8_t> src(1 << 20), dst(1 << 20), pool(1 << 20);
  testing::fill_random_bytes(src.data(), src.size(), rng);
  ASSERT_TRUE(a_->reg(src.data(), src.size()).ok());
  ASSERT_TRUE(a_->reg(dst.data(), dst.size()).ok());
  auto far_region = b_->reg(pool.data(), pool.size());
  ASSERT_TRUE(far_region.ok());
  std::vector<uint8_t> in(1 << 20);
  ASSERT_TRUE(b_->reg(in.data(), in.size()).ok());
  RemoteDescriptor far = b_->export_region(*far_region).value();

  uint64_t sent = 0, written = 0, read = 0;
  constexpr int kEach = 7;
  for (int i = 0; i < kEach; ++i) {
    size_t n = 1 + rng() % 300000;
    Transfer r = cb_->recv_async(in.data(), in.size());
    ASSERT_TRUE(ca_->send(src.data(), n, after(10s)).ok());
    ASSERT_TRUE(r.wait(after(10s)).ok());
    sent += n;
    size_t w = 1 + rng() % 500000;
    ASSERT_TRUE(ca_->write(src.data(), w, far, 11, i % 2 ? "note" : "", after(10s)).ok());
    written += w;
    size_t k = 1 + rng() % 400000;
    ASSERT_TRUE(ca_->read(dst.data(), k, far, 5, after(10s)).ok());
    read += k;
  }
  auto pools = ca_->prepare_blocks(std::vector<Region>{a_->reg(src.data(), src.size()).value()},
                                   std::vector<RemoteDescriptor>{far});
  ASSERT_TRUE(pools.ok()) << pools.status().to_string();
  std::vector<Block> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back({0, 0, uint64_t(i) * 8192, uint64_t(i) * 8192 + 3, 4099});
  ASSERT_TRUE(ca_->write_blocks_async(*pools, blocks, "blocks").wait(after(10s)).ok());
  ASSERT_TRUE(ca_->notify("hello", after(10s)).ok());
  // A write the peer refuses: a descriptor of a region it let go.
  ASSERT_TRUE(b_->dereg(*far_region).ok());
  Status refused = ca_->write(src.data(), 100, far, 0, {}, after(10s));
  ASSERT_EQ(refused.code(), Code::kNotFound) << refused.to_string();

  MetricsSnapshot m = a_->metrics();
  auto counts = [&](const char* op) {
    auto it = m.transfers.find({op, transport});
    return it == m.transfers.end() ? TransferCounts{} : it->second;
  };
  EXPECT_EQ(counts("send").succeeded, uint64_t{kEach});
  EXPECT_EQ(counts("send").bytes, sent);
  EXPECT_EQ(counts("write").succeeded, uint64_t{kEach});
  EXPECT_EQ(counts("write").failed, 1u);
  EXPECT_EQ(counts("write").bytes, written);
  EXPECT_EQ(counts("read").succeeded, uint64_t{kEach});
  EXPECT_EQ(counts("read").bytes, read);
  EXPECT_EQ(counts("write_blocks").succeeded, 1u);
  EXPECT_EQ(counts("write_blocks").bytes, 64u * 4099);
  EXPECT_EQ(counts("notify").succeeded, 1u);
  EXPECT_EQ(m.failures["not_found"], 1u);
  for (const auto& [key, c] : m.transfers) {
    EXPECT_EQ(c.within.back(), c.succeeded + c.failed) << key.first << ": the histogram missed transfers";
    EXPECT_GT(c.seconds_sum, 0) << key.first;
  }
  EXPECT_EQ(m.connections[transport], 1u);
  EXPECT_EQ(m.connections_failed[transport], 0u);
  // The other side received what was sent.
  MetricsSnapshot mb = b_->metrics();
  auto it = mb.transfers.find({"recv", transport});
  ASSERT_NE(it, mb.transfers.end());
  EXPECT_EQ(it->second.succeeded, uint64_t{kEach});
  EXPECT_EQ(it->second.bytes, sent);
}

INSTANTIATE_TEST_SUITE_P(Transports, EngineMetrics, ::testing::Values("tcp", "local"));

TEST(EngineMetricsOff, CountNothing) {
  Options o;
  o.metrics = false;
  EnginePair p = connect_pair("tcp", o);
  ASSERT_TRUE(p.ca && p.cb);
  std::vector<uint8_t> buf(4096, 1), in(4096);
  ASSERT_TRUE(p.a->reg(buf.data(), buf.size()).ok());
  ASSERT_TRUE(p.b->reg(in.data(), in.size()).ok());
  Transfer r = p.cb->recv_async(in.data(), in.size());
  ASSERT_TRUE(p.ca->send(buf.data(), buf.size(), after(10s)).ok());
  ASSERT_TRUE(r.wait(after(10s)).ok());
  EXPECT_TRUE(p.a->metrics().transfers.empty());
  EXPECT_TRUE(p.b->metrics().transfers.empty());
}

}  // namespace
}  // namespace ferry
