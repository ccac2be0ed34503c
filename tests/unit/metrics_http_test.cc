// The metrics endpoint (Options::metrics_listen): what a scraper gets, what
// anything else gets, and that a client which sends nothing, too much or
// something else holds neither the endpoint nor the engine.
#include "engine/metrics_http.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"
#include "platform/socket.h"
#include "testing/random_data.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

platform::Socket dial(const std::string& address) {
  auto hp = platform::parse_host_port(address);
  EXPECT_TRUE(hp.ok()) << address;
  auto s = platform::connect_tcp(hp.value(), after(5s));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

// Sends `request` and reads until the server closes (or 10 s pass).
std::string http_exchange(const std::string& address, const std::string& request) {
  platform::Socket s = dial(address);
  EXPECT_TRUE(platform::send_all_by(s.fd(), request.data(), request.size(), after(5s)).ok());
  std::string out;
  char buf[4096];
  const auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline) {
    pollfd p{s.fd(), POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    ssize_t n = ::recv(s.fd(), buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string get(const std::string& address, const std::string& path) {
  return http_exchange(address, "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
}

std::string status_line(const std::string& response) { return response.substr(0, response.find("\r\n")); }

// The value of the sample line that starts with `series ` (-1: absent).
long long sample(const std::string& response, const std::string& series) {
  size_t at = response.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stoll(response.substr(at + series.size() + 2));
}

TEST(MetricsEndpoint, ServesTheSameNumbersAsMetricsText) {
  Options o;
  o.metrics_listen = "127.0.0.1:0";
  EnginePair p = connect_pair("tcp", o);
  const std::string addr = p.a->metrics_address();
  ASSERT_FALSE(addr.empty());
  EXPECT_EQ(addr.rfind("127.0.0.1:", 0), 0u) << addr;

  std::mt19937_64 rng(5);
  std::vector<uint8_t> src(300001), dst(300001);
  testing::fill_random_bytes(src.data(), src.size(), rng);
  ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
  ASSERT_TRUE(p.b->reg(dst.data(), dst.size()).ok());
  uint64_t sent = 0;
  for (size_t n : {size_t{1}, size_t{4097}, size_t{300001}}) {
    Transfer r = p.cb->recv_async(dst.data(), dst.size());
    ASSERT_TRUE(p.ca->send(src.data(), n, after(10s)).ok());
    ASSERT_TRUE(r.wait(after(10s)).ok());
    ASSERT_EQ(std::memcmp(src.data(), dst.data(), n), 0);
    sent += n;
  }
  std::string r = get(addr, "/metrics");
  EXPECT_EQ(status_line(r), "HTTP/1.1 200 OK");
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r;
  std::string body = r.substr(r.find("\r\n\r\n") + 4);
  EXPECT_EQ(body, prometheus_text(p.a->metrics()));
  EXPECT_EQ(sample(r, "ferry_transfer_bytes_total{op=\"send\",transport=\"tcp\"}"), static_cast<long long>(sent));
  EXPECT_EQ(sample(r, "ferry_transfers_total{op=\"send\",transport=\"tcp\",result=\"ok\"}"), 3);
  // A query string is no other path.
  EXPECT_EQ(status_line(get(addr, "/metrics?x=1")), "HTTP/1.1 200 OK");
  // Each engine serves its own numbers.
  ASSERT_NE(p.b->metrics_address(), addr);
  EXPECT_EQ(
      sample(get(p.b->metrics_address(), "/metrics"), "ferry_transfer_bytes_total{op=\"recv\",transport=\"tcp\"}"),
      static_cast<long long>(sent));
}

TEST(MetricsEndpoint, AnswersNothingButTheMetrics) {
  Options o;
  o.metrics_listen = ":0";  // loopback
  auto e = Engine::create(o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const std::string addr = (*e)->metrics_address();
  EXPECT_EQ(addr.rfind("127.0.0.1:", 0), 0u) << addr;
  EXPECT_EQ(status_line(get(addr, "/")), "HTTP/1.1 200 OK");
  EXPECT_EQ(status_line(get(addr, "/debug")), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(status_line(get(addr, "/metrics/../etc/passwd")), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(status_line(http_exchange(addr, "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")),
            "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(status_line(http_exchange(addr, "garbage\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status_line(http_exchange(addr, "GET /metrics SMTP/1.0\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  // A head that never ends: refused at the cap, not read without bound.
  std::string endless = "GET /metrics HTTP/1.1\r\n" + std::string(MetricsHttp::kMaxRequestBytes, 'a');
  EXPECT_EQ(status_line(http_exchange(addr, endless)), "HTTP/1.1 431 Request Header Fields Too Large");
  std::string head = http_exchange(addr, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(status_line(head), "HTTP/1.1 200 OK");
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "") << "HEAD answered a body";
}

TEST(MetricsEndpoint, AClientThatSendsNothingHoldsAScrapeNoLongerThanTheRequestTimeout) {
  Options o;
  o.metrics_listen = "127.0.0.1:0";
  auto e = Engine::create(o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const std::string addr = (*e)->metrics_address();
  platform::Socket silent = dial(addr);
  platform::Socket half = dial(addr);
  ASSERT_TRUE(platform::send_all_by(half.fd(), "GET /metr", 9, after(1s)).ok());
  const auto began = Clock::now();
  EXPECT_EQ(status_line(get(addr, "/metrics")), "HTTP/1.1 200 OK");
  // Served once the two ahead of it ran out of time, one after the other.
  EXPECT_LT(Clock::now() - began, 2 * MetricsHttp::kRequestTimeout + 2s);
}

TEST(MetricsEndpoint, TheEngineClosesWhileAClientHoldsAConnection) {
  Options o;
  o.metrics_listen = "127.0.0.1:0";
  auto e = Engine::create(o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  platform::Socket silent = dial((*e)->metrics_address());
  std::this_thread::sleep_for(100ms);  // the endpoint's thread is reading it
  const auto began = Clock::now();
  e->reset();
  EXPECT_LT(Clock::now() - began, 1s) << "closing the engine waited for the scraper";
}

TEST(MetricsEndpoint, AnAddressThatCannotServeFailsTheEngineWithWhatAndWhere) {
  Options o;
  o.metrics_listen = "127.0.0.1:notaport";
  auto bad = Engine::create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("metrics_listen"), std::string::npos) << bad.status().to_string();

  o.metrics_listen = "127.0.0.1:0";
  auto first = Engine::create(o);
  ASSERT_TRUE(first.ok());
  o.metrics_listen = (*first)->metrics_address();  // taken
  auto second = Engine::create(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable) << second.status().to_string();
  EXPECT_NE(second.status().to_string().find((*first)->metrics_address()), std::string::npos)
      << second.status().to_string();
}

TEST(MetricsEndpoint, TheEnvironmentNamesTheAddress) {
  ::setenv("FERRY_METRICS_ADDR", "127.0.0.1:0", 1);
  auto o = apply_environment(Options{});
  ::unsetenv("FERRY_METRICS_ADDR");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->metrics_listen, "127.0.0.1:0");
  // Unasked, nothing listens.
  auto e = Engine::create(Options{});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->metrics_address(), "");
}

}  // namespace
}  // namespace ferry
