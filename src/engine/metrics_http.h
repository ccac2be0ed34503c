// MetricsHttp: an engine's metrics in Prometheus' text format over HTTP, on
// the address Options::metrics_listen names (nothing listens when it is
// empty), for a Prometheus server to scrape.
//
// One named thread serves one request at a time: `GET /metrics` (or `/`)
// answers the exposition, any other path 404, any other method 405. The
// scraper is trusted with the numbers and nothing else: a request must come
// whole within kRequestTimeout and kMaxRequestBytes or its connection is
// closed unanswered, nothing it says reaches the engine, and the kernel
// holds at most kMaxWaiting connections for it (its listen backlog).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "ferry/status.h"
#include "platform/socket.h"

namespace ferry {

class MetricsHttp {
 public:
  static constexpr size_t kMaxRequestBytes = 8192;
  static constexpr std::chrono::milliseconds kRequestTimeout{2000};
  static constexpr int kMaxWaiting = 16;

  // Listens on `address` ("host:port", port 0 picks one; a bare ":port" or
  // "port" is loopback) and serves `exposition()`'s text. kInvalidArgument
  // for an address that does not parse, kUnavailable when it cannot be
  // bound, kResourceExhausted when the thread cannot start.
  static Result<std::unique_ptr<MetricsHttp>> start(std::string_view address, std::function<std::string()> exposition);
  // Stops the thread and closes the socket.
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  // "host:port" bound.
  const std::string& address() const { return address_; }

 private:
  MetricsHttp(platform::Socket listener, platform::Socket wake, std::string address,
              std::function<std::string()> exposition);
  void serve();
  void answer(int fd);

  platform::Socket listener_;
  platform::Socket wake_;  // an eventfd: the destructor's stop
  const std::string address_;
  const std::function<std::string()> exposition_;
  std::thread thread_;
};

// What metrics_listen means: "host:port" as given, ":port" or "port" on
// 127.0.0.1. kInvalidArgument says what is wrong.
Result<platform::HostPort> metrics_listen_address(std::string_view address);

}  // namespace ferry
