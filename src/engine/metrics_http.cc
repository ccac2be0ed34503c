// MetricsHttp: the listener, its thread and the one request a connection
// may carry.
#include "engine/metrics_http.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "platform/thread.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// Sends what it can by `deadline`; a scraper that stops reading is dropped.
void send_by(int fd, const std::string& bytes, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return;
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string response(int code, std::string_view reason, std::string_view type, const std::string& body) {
  std::string out = "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) + "\r\n";
  out += "Content-Type: " + std::string(type) + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += "Connection: close\r\n\r\n";
  out += body;
  return out;
}

}  // namespace

Result<platform::HostPort> metrics_listen_address(std::string_view address) {
  std::string text(address);
  if (text.find(':') == std::string::npos) text = ":" + text;
  Result<platform::HostPort> hp = platform::parse_host_port(text);
  if (!hp.ok()) return hp.status().with_context("metrics_listen");
  if (hp.value().host.empty()) hp.value().host = "127.0.0.1";
  return hp;
}

Result<std::unique_ptr<MetricsHttp>> MetricsHttp::start(std::string_view address,
                                                        std::function<std::string()> exposition) {
  FERRY_ASSIGN_OR_RETURN(platform::HostPort at, metrics_listen_address(address));
  Result<platform::Socket> listener = platform::listen_tcp(at, kMaxWaiting);
  if (!listener.ok()) return listener.status().with_context("metrics_listen " + std::string(address));
  FERRY_ASSIGN_OR_RETURN(uint16_t port, platform::local_port(listener.value()));
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    return Status(Code::kResourceExhausted, std::string("metrics endpoint: eventfd: ") + std::strerror(errno));
  }
  std::string bound =
      (at.host.find(':') != std::string::npos ? "[" + at.host + "]" : at.host) + ":" + std::to_string(port);
  std::unique_ptr<MetricsHttp> http(
      new MetricsHttp(std::move(listener.value()), platform::Socket(wake), std::move(bound), std::move(exposition)));
  Result<std::thread> t = platform::try_start_thread("ferry-metrics", [raw = http.get()] { raw->serve(); });
  if (!t.ok()) return t.status().with_context("metrics endpoint");
  http->thread_ = std::move(t.value());
  return http;
}

MetricsHttp::MetricsHttp(platform::Socket listener, platform::Socket wake, std::string address,
                         std::function<std::string()> exposition)
    : listener_(std::move(listener)),
      wake_(std::move(wake)),
      address_(std::move(address)),
      exposition_(std::move(exposition)) {}

MetricsHttp::~MetricsHttp() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(wake_.fd(), &one, sizeof(one));
    thread_.join();
  }
}

void MetricsHttp::serve() {
  for (;;) {
    pollfd p[2] = {{listener_.fd(), POLLIN, 0}, {wake_.fd(), POLLIN, 0}};
    int ready = ::poll(p, 2, -1);  // blocks until a scraper connects or the engine stops
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || (p[1].revents & POLLIN) != 0) return;
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // A full descriptor table fails this scrape, not the endpoint: wait a
      // little (or for the stop) rather than spin on the pending connection.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pollfd w{wake_.fd(), POLLIN, 0};
        if (::poll(&w, 1, 100) > 0) return;
      }
      continue;
    }
    platform::Socket conn(fd);
    answer(conn.fd());
  }
}

void MetricsHttp::answer(int fd) {
  const Clock::time_point deadline = Clock::now() + kRequestTimeout;
  std::string request;
  char buf[1024];
  // The head, up to the blank line, whole by the deadline and within the cap.
  while (request.find("\r\n\r\n") == std::string::npos) {
    if (request.size() >= kMaxRequestBytes) {
      send_by(fd, response(431, "Request Header Fields Too Large", "text/plain", "request too large\n"), deadline);
      return;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return;
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_.fd(), POLLIN, 0}};
    if (::poll(p, 2, static_cast<int>(left)) <= 0 || (p[1].revents & POLLIN) != 0) return;
    ssize_t n = ::recv(fd, buf, std::min(sizeof(buf), kMaxRequestBytes - request.size()), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  // "METHOD TARGET VERSION" on the first line.
  std::string_view line(request.data(), request.find("\r\n"));
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) {
    send_by(fd, response(400, "Bad Request", "text/plain", "malformed request line\n"), deadline);
    return;
  }
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") {
    send_by(fd, response(405, "Method Not Allowed", "text/plain", "only GET /metrics\n"), deadline);
    return;
  }
  if (target != "/metrics" && target != "/") {
    send_by(fd, response(404, "Not Found", "text/plain", "only /metrics\n"), deadline);
    return;
  }
  std::string out = response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", exposition_());
  if (method == "HEAD") out.resize(out.find("\r\n\r\n") + 4);
  send_by(fd, out, deadline);
}

}  // namespace ferry
