// The one HTTP request `ferry top` makes: GET of an engine's metrics page
// (docs/metrics.md), over a plain TCP connection, within a deadline and a
// size bound. Whatever answers is treated as untrusted: a status other than
// 200, a head that never ends, a body past the bound or a stream that stalls
// past the deadline is an error that says which.
#pragma once

#include <string>
#include <string_view>

#include "ferry/status.h"
#include "ferry/transfer.h"

namespace ferry::top {

// Where to read metrics from, parsed from what the user typed: "host:port",
// "[v6]:port", or "http://host:port[/path]" (path "/metrics" when none).
struct MetricsUrl {
  std::string host_port;
  std::string path = "/metrics";
};
Result<MetricsUrl> parse_metrics_url(std::string_view text);

inline constexpr size_t kMaxResponseBytes = 64u << 20;

// The body of a 200 answer to GET url.path; kUnavailable when nothing
// answers, kDeadlineExceeded past `deadline`, kDataLoss for an answer that is
// not HTTP or is larger than `max_bytes`, kNotFound (or kUnavailable for
// other statuses) naming the status line otherwise.
Result<std::string> http_get(const MetricsUrl& url, Deadline deadline, size_t max_bytes = kMaxResponseBytes);

// The body of a whole HTTP/1.x response (head and body as read until the
// server closed), checked as http_get checks it.
Result<std::string> http_response_body(std::string_view response, std::string_view what);

}  // namespace ferry::top
