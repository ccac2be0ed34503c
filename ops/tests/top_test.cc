// `ferry top`'s parts: the metrics-text reader against good, hostile and
// engine-written text; the rates, quantiles and tables made from two scrapes;
// the HTTP fetch against a real engine's endpoint and against servers that
// stall, flood or answer wrongly.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "engine_pair.h"
#include "ferry/ferry.h"
#include "platform/socket.h"
#include "top/http_get.h"
#include "top/metrics_text.h"
#include "top/top_view.h"

namespace ferry::top {
namespace {

using namespace std::chrono_literals;

TEST(MetricsText, ReadsSamplesLabelsEscapesAndSpecialValues) {
  auto s = parse_metrics_text(
      "# HELP x_total A counter.\n"
      "# TYPE x_total counter\n"
      "\n"
      "x_total 3\n"
      "y{a=\"1\",b=\"q\\\"u\\\\o\\nte\"} 2.5e3\r\n"
      "z_bucket{le=\"+Inf\"} +Inf 1700000000000\n"
      "   \n"
      "w{} NaN\n"
      "v:colon -Inf");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->size(), 5u);
  EXPECT_EQ((*s)[0].name, "x_total");
  EXPECT_EQ((*s)[0].value, 3);
  EXPECT_EQ((*s)[1].label("a"), "1");
  EXPECT_EQ((*s)[1].label("b"), "q\"u\\o\nte");
  EXPECT_EQ((*s)[1].label("c"), "");
  EXPECT_EQ((*s)[1].value, 2500);
  EXPECT_TRUE(std::isinf((*s)[2].value));
  EXPECT_TRUE(std::isnan((*s)[3].value));
  EXPECT_EQ((*s)[4].name, "v:colon");
  for (const Sample& one : *s) {
    auto again = parse_metrics_text(format_sample(one));
    ASSERT_TRUE(again.ok()) << format_sample(one);
    ASSERT_EQ(again->size(), 1u);
    EXPECT_EQ(format_sample((*again)[0]), format_sample(one));
  }
}

TEST(MetricsText, RefusesWhatIsNotASampleNamingTheLine) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"ok 1\n9bad 1", "line 2: a metric name"},
      {"x{a=1} 1", "line 1: label 'a' needs =\"value\""},
      {"x{a=\"1} 1", "line 1: label 'a': its value never ends"},
      {"x{a=\"\\q\"} 1", "unknown escape"},
      {"x{a=\"1\" b=\"2\"} 1", "',' or '}' expected"},
      {"x", "a space and a value expected"},
      {"x 0x10", "is not a value"},
      {"x infinity", "is not a value"},
      {"x 1 2 3", "only a timestamp may follow"},
      {"x 1 12a", "only a timestamp may follow"},
      {"x{=\"1\"} 1", "a label name expected"},
  };
  for (const Case& c : cases) {
    auto s = parse_metrics_text(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().code(), Code::kDataLoss);
    EXPECT_NE(s.status().message().find(c.says), std::string::npos) << c.text << " -> " << s.status().to_string();
  }
  auto long_line = parse_metrics_text("x{a=\"" + std::string(kMaxLineBytes, 'a') + "\"} 1");
  ASSERT_FALSE(long_line.ok());
  EXPECT_NE(long_line.status().message().find("longer than"), std::string::npos);
}

TEST(MetricsText, ReadsEverySampleAnEngineWrites) {
  Options o;
  EnginePair p = connect_pair("tcp", o);
  std::vector<uint8_t> src(70001, 7), dst(70001);
  ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
  ASSERT_TRUE(p.b->reg(dst.data(), dst.size()).ok());
  Transfer r = p.cb->recv_async(dst.data(), dst.size());
  ASSERT_TRUE(p.ca->send(src.data(), src.size(), after(10s)).ok());
  ASSERT_TRUE(r.wait(after(10s)).ok());
  std::string text = prometheus_text(p.a->metrics());
  auto s = parse_metrics_text(text);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  size_t lines = 0;
  for (size_t at = 0; (at = text.find('\n', at)) != std::string::npos; ++at) ++lines;
  size_t comments = 0;
  for (size_t at = 0; (at = text.find("\n#", at)) != std::string::npos; ++at) ++comments;
  EXPECT_EQ(s->size(), lines - comments - (text.rfind("#", 0) == 0 ? 1 : 0));
  bool found = false;
  for (const Sample& one : *s) {
    if (one.name == "ferry_transfer_bytes_total" && one.label("op") == "send") found = one.value == 70001;
  }
  EXPECT_TRUE(found) << text;
}

TEST(TopView, QuantilesInterpolateWithinTheirBucket) {
  // 100 observations: 10 under 1 ms, 80 in (1 ms, 10 ms], 10 in (10 ms, +Inf).
  std::vector<std::pair<double, double>> b = {{0.001, 10}, {0.01, 90}, {INFINITY, 100}};
  EXPECT_NEAR(bucket_quantile(0.05, b), 0.0005, 1e-12);
  EXPECT_NEAR(bucket_quantile(0.5, b), 0.001 + 0.009 * 40 / 80, 1e-12);
  EXPECT_DOUBLE_EQ(bucket_quantile(0.99, b), 0.01);  // the +Inf bucket: its lower bound
  EXPECT_TRUE(std::isnan(bucket_quantile(0.5, {{0.001, 0}, {INFINITY, 0}})));
  EXPECT_TRUE(std::isnan(bucket_quantile(0.5, {})));
}

Scrape scrape_of(const std::string& text, Clock::time_point at) {
  auto s = parse_metrics_text(text);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return Scrape{s.ok() ? *s : std::vector<Sample>{}, at};
}

TEST(TopView, RatesComeFromWhatGrewBetweenTheScrapes) {
  auto t0 = Clock::now();
  Scrape before = scrape_of(
      "ferry_transfers_total{op=\"write\",transport=\"tcp\",result=\"ok\"} 100\n"
      "ferry_transfers_total{op=\"write\",transport=\"tcp\",result=\"failed\"} 1\n"
      "ferry_transfer_bytes_total{op=\"write\",transport=\"tcp\"} 1000000\n"
      "ferry_transfer_seconds_bucket{op=\"write\",transport=\"tcp\",le=\"0.001\"} 50\n"
      "ferry_transfer_seconds_bucket{op=\"write\",transport=\"tcp\",le=\"0.01\"} 101\n"
      "ferry_transfer_seconds_bucket{op=\"write\",transport=\"tcp\",le=\"+Inf\"} 101\n"
      "ferry_peer_transfers_total{peer=\"10.0.0.2:5000\",op=\"write\",result=\"ok\"} 100\n"
      "ferry_peer_transfer_bytes_total{peer=\"10.0.0.2:5000\",op=\"write\"} 1000000\n"
      "ferry_nic_bytes_total{nic=\"eth0\",direction=\"sent\"} 5000\n"
      "ferry_transfer_failures_total{code=\"peer_lost\"} 1\n"
      "ferry_send_restarted_total 900\n",
      t0);
  Scrape after = scrape_of(
      "ferry_transfers_total{op=\"write\",transport=\"tcp\",result=\"ok\"} 300\n"
      "ferry_transfers_total{op=\"write\",transport=\"tcp\",result=\"failed\"} 5\n"
      "ferry_transfer_bytes_total{op=\"write\",transport=\"tcp\"} 5000000\n"
      "ferry_transfer_seconds_bucket{op=\"write\",transport=\"tcp\",le=\"0.001\"} 50\n"
      "ferry_transfer_seconds_bucket{op=\"write\",transport=\"tcp\",le=\"0.01\"} 305\n"
      "ferry_transfer_seconds_bucket{op=\"write\",transport=\"tcp\",le=\"+Inf\"} 305\n"
      "ferry_peer_transfers_total{peer=\"10.0.0.2:5000\",op=\"write\",result=\"ok\"} 300\n"
      "ferry_peer_transfer_bytes_total{peer=\"10.0.0.2:5000\",op=\"write\"} 5000000\n"
      "ferry_peer_transfer_bytes_total{peer=\"10.0.0.3:5000\",op=\"read\"} 600\n"
      "ferry_nic_bytes_total{nic=\"eth0\",direction=\"sent\"} 9000\n"
      "ferry_nic_bytes_total{nic=\"eth0\",direction=\"received\"} 200\n"
      "ferry_transfer_failures_total{code=\"peer_lost\"} 5\n"
      "ferry_connections{transport=\"tcp\",state=\"up\"} 2\n"
      "ferry_connections{transport=\"local\",state=\"failed\"} 1\n"
      "ferry_send_restarted_total 10\n",
      t0 + 2s);
  TopView v = make_view(before, after);
  EXPECT_DOUBLE_EQ(v.seconds, 2);
  ASSERT_EQ(v.ops.size(), 1u);
  EXPECT_DOUBLE_EQ(v.ops[0].transfers_per_s, 102);  // 200 ok + 4 failed in 2 s
  EXPECT_DOUBLE_EQ(v.ops[0].failed_per_s, 2);
  EXPECT_DOUBLE_EQ(v.ops[0].bytes_per_s, 2e6);
  // All 204 in (1 ms, 10 ms]: the median halfway.
  EXPECT_NEAR(v.ops[0].p50_s, 0.001 + 0.009 * 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(v.bytes_per_s, 2e6);
  ASSERT_EQ(v.peers.size(), 2u);
  EXPECT_EQ(v.peers[0].peer, "10.0.0.2:5000");
  EXPECT_DOUBLE_EQ(v.peers[0].bytes_per_s, 2e6);
  EXPECT_EQ(v.peers[1].peer, "10.0.0.3:5000");  // new since the first scrape: all of it counts
  EXPECT_DOUBLE_EQ(v.peers[1].bytes_per_s, 300);
  ASSERT_EQ(v.nics.size(), 1u);
  EXPECT_DOUBLE_EQ(v.nics[0].sent_per_s, 2000);
  EXPECT_DOUBLE_EQ(v.nics[0].received_per_s, 100);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_EQ(v.failures[0].first, "peer_lost");
  EXPECT_DOUBLE_EQ(v.failures[0].second, 4);
  EXPECT_DOUBLE_EQ(v.connections_up, 2);
  EXPECT_DOUBLE_EQ(v.connections_failed, 1);

  std::string text = render_text(v, "http://127.0.0.1:9464/metrics", 1);
  EXPECT_NE(text.find("2.00 MB/s"), std::string::npos) << text;
  EXPECT_NE(text.find("10.0.0.2:5000"), std::string::npos) << text;
  EXPECT_EQ(text.find("10.0.0.3:5000"), std::string::npos) << "one peer row asked for:\n" << text;
  EXPECT_NE(text.find("and 1 more peers"), std::string::npos) << text;
  EXPECT_NE(text.find("peer_lost 4"), std::string::npos) << text;
  nlohmann::json j = to_json(v);
  EXPECT_EQ(j["peers"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["ops"][0]["bytes_per_s"].get<double>(), 2e6);
}

TEST(TopView, ACounterThatWentDownCountsFromZeroAndLabelsCannotDriveTheTerminal) {
  auto t0 = Clock::now();
  Scrape before = scrape_of("ferry_peer_transfer_bytes_total{peer=\"p\",op=\"send\"} 900\n", t0);
  Scrape after = scrape_of(
      "ferry_peer_transfer_bytes_total{peer=\"p\",op=\"send\"} 100\n"
      "ferry_peer_transfer_bytes_total{peer=\"\\n\x1b[2Jevil\",op=\"send\"} 1\n",
      t0 + 1s);
  TopView v = make_view(before, after);
  ASSERT_EQ(v.peers.size(), 2u);
  EXPECT_DOUBLE_EQ(v.peers[0].bytes_per_s, 100);
  std::string text = render_text(v, "x", 10);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_NE(text.find("??[2Jevil"), std::string::npos) << text;
}

TEST(MetricsUrl, TakesHostPortOrAnHttpUrl) {
  auto a = parse_metrics_url("127.0.0.1:9464");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host_port, "127.0.0.1:9464");
  EXPECT_EQ(a->path, "/metrics");
  auto b = parse_metrics_url("http://[::1]:80/other");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->host_port, "[::1]:80");
  EXPECT_EQ(b->path, "/other");
  EXPECT_EQ(parse_metrics_url("https://h:1").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(parse_metrics_url("nohost").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(parse_metrics_url("h:1/a b").status().code(), Code::kInvalidArgument);
}

TEST(HttpGet, ReadsARealEnginesMetricsPage) {
  Options o;
  o.metrics_listen = "127.0.0.1:0";
  EnginePair p = connect_pair("tcp", o);
  std::mt19937_64 rng(11);
  std::vector<uint8_t> src(123457), dst(123457);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
  ASSERT_TRUE(p.b->reg(dst.data(), dst.size()).ok());
  auto url = parse_metrics_url(p.a->metrics_address());
  ASSERT_TRUE(url.ok());
  auto first = http_get(*url, after(5s));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  Scrape before = scrape_of(*first, Clock::now());
  for (int i = 0; i < 3; ++i) {
    Transfer r = p.cb->recv_async(dst.data(), dst.size());
    ASSERT_TRUE(p.ca->send(src.data(), src.size(), after(10s)).ok());
    ASSERT_TRUE(r.wait(after(10s)).ok());
  }
  ASSERT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
  auto second = http_get(*url, after(5s));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  Scrape now = scrape_of(*second, before.at + 1s);
  TopView v = make_view(before, now);
  ASSERT_EQ(v.ops.size(), 1u);
  EXPECT_EQ(v.ops[0].op, "send");
  EXPECT_DOUBLE_EQ(v.ops[0].bytes_per_s, 3.0 * 123457);
  EXPECT_DOUBLE_EQ(v.ops[0].transfers_per_s, 3);
  EXPECT_GT(v.ops[0].p50_s, 0);
  ASSERT_EQ(v.peers.size(), 1u);
  EXPECT_DOUBLE_EQ(v.peers[0].bytes_per_s, 3.0 * 123457);
  auto missing = http_get(MetricsUrl{url->host_port, "/nothing"}, after(5s));
  EXPECT_EQ(missing.status().code(), Code::kNotFound) << missing.status().to_string();
}

// A server on loopback that reads one request and answers it with `answer`
// (then, unless `hold`, closes); with `hold`, it keeps the connection open
// silent after the answer.
class FakeServer {
 public:
  FakeServer(std::string answer, bool hold) : answer_(std::move(answer)), hold_(hold) {
    auto l = platform::listen_tcp(platform::HostPort{"127.0.0.1", 0});
    EXPECT_TRUE(l.ok());
    listener_ = std::move(l).value();
    port_ = platform::local_port(listener_).value();
    thread_ = std::thread([this] {
      int fd = ::accept(listener_.fd(), nullptr, nullptr);
      if (fd < 0) return;
      // The request read first: closing with it unread would reset the stream.
      std::string request;
      char buf[4096];
      while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
        ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      size_t sent = 0;
      while (sent < answer_.size() && !stop_) {
        ssize_t n = ::send(fd, answer_.data() + sent, answer_.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      while (hold_ && !stop_) std::this_thread::sleep_for(10ms);
      ::close(fd);
    });
  }
  ~FakeServer() {
    stop_ = true;
    listener_.shutdown();
    thread_.join();
  }
  MetricsUrl url() const { return MetricsUrl{"127.0.0.1:" + std::to_string(port_), "/metrics"}; }

 private:
  std::string answer_;
  bool hold_;
  platform::Socket listener_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(HttpGet, AServerThatStallsOrFloodsOrAnswersWronglyIsAnErrorThatSaysSo) {
  {
    FakeServer silent("", true);
    auto start = Clock::now();
    auto r = http_get(silent.url(), after(300ms));
    EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded) << r.status().to_string();
    EXPECT_LT(Clock::now() - start, 3s);
  }
  {
    FakeServer flood("HTTP/1.1 200 OK\r\n\r\n" + std::string(3 << 20, 'x'), false);
    auto r = http_get(flood.url(), after(10s), 1 << 20);
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().to_string();
    EXPECT_NE(r.status().message().find("larger than"), std::string::npos);
  }
  {
    FakeServer not_http("SSH-2.0-OpenSSH\r\n", false);
    auto r = http_get(not_http.url(), after(5s));
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().to_string();
  }
  {
    FakeServer short_body("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nx 1\n", false);
    auto r = http_get(short_body.url(), after(5s));
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().to_string();
    EXPECT_NE(r.status().message().find("Content-Length says 100"), std::string::npos);
  }
  {
    FakeServer chunked("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nx 1\n\r\n0\r\n\r\n", false);
    auto r = http_get(chunked.url(), after(5s));
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().to_string();
  }
  {
    FakeServer error("HTTP/1.1 500 Oops\x1b[2J\r\n\r\n", false);
    auto r = http_get(error.url(), after(5s));
    EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().to_string();
    EXPECT_EQ(r.status().message().find('\x1b'), std::string::npos);
  }
  {
    FakeServer ok("HTTP/1.0 200 OK\r\n\r\nx_total 5\n", false);
    auto r = http_get(ok.url(), after(5s));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, "x_total 5\n");
  }
}

}  // namespace
}  // namespace ferry::top
