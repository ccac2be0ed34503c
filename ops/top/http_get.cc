// GET over a socket of platform/socket.h: connect by the deadline, send the
// request, read until the server closes (the request asks it to), each read
// waited for with poll so that a server that stalls cannot hold the caller
// past the deadline.
#include "top/http_get.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "platform/socket.h"
#include "platform/text.h"

namespace ferry::top {
namespace {

int ms_until(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

bool iequals_prefix(std::string_view line, std::string_view prefix) {
  if (line.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    char a = line[i], b = prefix[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

}  // namespace

Result<MetricsUrl> parse_metrics_url(std::string_view text) {
  MetricsUrl url;
  std::string_view rest = text;
  if (rest.substr(0, 7) == "http://") rest.remove_prefix(7);
  if (text.substr(0, 8) == "https://") {
    return Status(Code::kInvalidArgument, "'" + std::string(text) + "': ferry's metrics page is plain http");
  }
  size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    url.path.assign(rest.substr(slash));
    rest = rest.substr(0, slash);
  }
  for (char c : url.path) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return Status(Code::kInvalidArgument, "'" + std::string(text) + "': the path holds a space or control byte");
    }
  }
  auto hp = platform::parse_host_port(rest);
  if (!hp.ok()) {
    return Status(Code::kInvalidArgument, "'" + std::string(text) + "' is not host:port or http://host:port[/path]: " +
                                              hp.status().message());
  }
  url.host_port.assign(rest);
  return url;
}

Result<std::string> http_response_body(std::string_view response, std::string_view what) {
  size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string_view::npos) {
    return Status(Code::kDataLoss, std::string(what) + ": the answer is not HTTP (no end of its head in " +
                                       std::to_string(response.size()) + " bytes)");
  }
  std::string_view head = response.substr(0, head_end);
  std::string_view status_line = head.substr(0, head.find("\r\n"));
  if (status_line.substr(0, 7) != "HTTP/1." || status_line.size() < 12 || status_line[8] != ' ') {
    return Status(Code::kDataLoss, std::string(what) + ": the answer is not HTTP/1.x");
  }
  std::string shown(status_line.substr(0, 80));
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < ' ' || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  std::string_view code = status_line.substr(9, 3);
  if (code != "200") {
    return Status(code == "404" ? Code::kNotFound : Code::kUnavailable, std::string(what) + " answered '" + shown + "'");
  }
  std::string_view body = response.substr(head_end + 4);
  // A Content-Length, where given, must match what arrived before the close.
  size_t pos = 0;
  while (pos < head.size()) {
    size_t end = head.find("\r\n", pos);
    if (end == std::string_view::npos) end = head.size();
    std::string_view line = head.substr(pos, end - pos);
    pos = end + 2;
    if (iequals_prefix(line, "transfer-encoding:")) {
      return Status(Code::kDataLoss, std::string(what) + ": a chunked or encoded answer (only a plain body is read)");
    }
    if (!iequals_prefix(line, "content-length:")) continue;
    std::string_view v = line.substr(15);
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    uint64_t n = 0;
    if (!platform::parse_u64(v, n)) return Status(Code::kDataLoss, std::string(what) + ": a bad Content-Length");
    if (n != body.size()) {
      return Status(Code::kDataLoss, std::string(what) + ": the body is " + std::to_string(body.size()) +
                                         " bytes, its Content-Length says " + std::to_string(n));
    }
  }
  return std::string(body);
}

Result<std::string> http_get(const MetricsUrl& url, Deadline deadline, size_t max_bytes) {
  const std::string what = "http://" + url.host_port + url.path;
  auto hp = platform::parse_host_port(url.host_port);
  if (!hp.ok()) return hp.status();
  auto sock = platform::connect_tcp(*hp, deadline);
  if (!sock.ok()) return Status(sock.status().code(), what + ": " + sock.status().message());
  std::string request = "GET " + url.path + " HTTP/1.1\r\nHost: " + url.host_port +
                        "\r\nUser-Agent: ferry-top\r\nConnection: close\r\n\r\n";
  Status sent = platform::send_all_by(sock->fd(), request.data(), request.size(), deadline);
  if (!sent.ok()) return Status(sent.code(), what + ": " + sent.message());
  std::string response;
  char buf[64 * 1024];
  for (;;) {
    if (Clock::now() >= deadline) {
      return Status(Code::kDeadlineExceeded, what + ": no whole answer in time (" + std::to_string(response.size()) +
                                                 " bytes so far)");
    }
    struct pollfd p {sock->fd(), POLLIN, 0};
    int r = ::poll(&p, 1, ms_until(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status(Code::kUnavailable, what + ": poll: " + std::strerror(errno));
    if (r == 0) continue;
    ssize_t n = ::recv(sock->fd(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return Status(Code::kUnavailable, what + ": " + std::strerror(errno));
    if (n == 0) break;
    if (response.size() + static_cast<size_t>(n) > max_bytes) {
      return Status(Code::kDataLoss, what + ": the answer is larger than " + std::to_string(max_bytes) + " bytes");
    }
    response.append(buf, static_cast<size_t>(n));
  }
  return http_response_body(response, what);
}

}  // namespace ferry::top
