// The directory's pure parts (URLs, the entry format, base64, JSON bounds)
// and its clients against hostile fake servers: oversized and malformed
// replies are refused before they are held, and a server that says nothing
// costs a call no more than its deadline.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

#include "directory/backend.h"
#include "directory/entry.h"
#include "directory/url.h"
#include "ferry/directory.h"
#include "ferry/engine.h"
#include "platform/socket.h"

using namespace std::chrono_literals;

namespace ferry::directory {
namespace {

TEST(DirectoryUrl, ParsesBothSchemesAndHidesThePassword) {
  auto r = parse_directory_url("redis://bob:s%40cret@10.0.0.1:6379/prod/kv");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->scheme, DirectoryUrl::Scheme::kRedis);
  EXPECT_EQ(r->user, "bob");
  EXPECT_EQ(r->password, "s@cret");
  EXPECT_EQ(r->ns, "prod/kv");
  EXPECT_EQ(r->redacted.find("cret"), std::string::npos);
  EXPECT_EQ(r->redacted, "redis://bob:***@10.0.0.1:6379/prod/kv");
  auto e = parse_directory_url("etcd://a:2379,b:2379,[::1]:2379");
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->endpoints.size(), 3u);
  EXPECT_EQ(e->ns, "ferry");
  EXPECT_EQ(redact_directory_url("redis://:pw@h:1"), "redis://:***@h:1");
  EXPECT_EQ(redact_directory_url("etcd://h:1/x"), "etcd://h:1/x");
  // Redis's classic form, password@host, is all password.
  auto classic = parse_directory_url("redis://s3cret@10.0.0.1:6379/prod");
  ASSERT_TRUE(classic.ok()) << classic.status().to_string();
  EXPECT_EQ(classic->password, "s3cret");
  EXPECT_EQ(classic->redacted, "redis://***@10.0.0.1:6379/prod");
  auto refused = parse_directory_url("etcd://s3cret@10.0.0.1:2379");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().find("s3cret"), std::string::npos) << refused.status().message();
}

TEST(DirectoryUrl, RefusesWhatIsNotOne) {
  for (const char* bad : {"", "redis:/h:1", "http://h:1", "redis://h", "redis://h:0", "redis://a:1,b:2",
                          "redis://h:1/../x", "redis://h:1/a//b", "redis://h:1/a b", "etcd://u:p@h:1",
                          "redis://p%4@h:1", "redis://h:1/a*b", "etcd://:2379"}) {
    auto r = parse_directory_url(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    }
  }
  auto r = parse_directory_url("redis://u:topsecret@h:1/a b");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find("topsecret"), std::string::npos) << r.status().to_string();
}

TEST(DirectoryEntryCodec, RoundTripsAndChecksEveryField) {
  DirectoryEntry e;
  e.name = "decode-3";
  e.engine_id = 0xfedcba9876543210ull;
  e.incarnation = 1764112345678901ull;
  e.host_id = "gpu-17/6c1e2a";
  e.addresses = {"10.0.0.2:7000", "[fd00::2]:7000"};
  e.pid = 4242;
  e.started_unix_ms = 1764112345678;
  std::string v = encode_entry(e);
  auto d = decode_entry("ns/engines/decode-3", v, "decode-3");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->engine_id, e.engine_id);
  EXPECT_EQ(d->incarnation, e.incarnation);
  EXPECT_EQ(d->addresses, e.addresses);
  EXPECT_EQ(d->host_id, e.host_id);
  EXPECT_EQ(d->pid, 4242);
  EXPECT_EQ(d->metadata(), e.metadata());
  // No secret has a place in it.
  EXPECT_EQ(v.find("token"), std::string::npos);
  EXPECT_EQ(decode_entry("k", v, "other").status().code(), Code::kDataLoss);
  EXPECT_EQ(decode_entry("k", std::string(Directory::kMaxEntryBytes + 1, ' '), "decode-3").status().code(),
            Code::kDataLoss);
}

TEST(DirectoryEntryCodec, RandomBytesAndMutationsNeverCrash) {
  DirectoryEntry e;
  e.name = "n";
  e.engine_id = 1;
  e.incarnation = 1;
  e.host_id = "h";
  e.addresses = {"127.0.0.1:1"};
  std::string good = encode_entry(e);
  std::mt19937_64 rng(42);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string v = good;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      size_t at = rng() % (v.size() + 1);
      switch (rng() % 3) {
        case 0:
          if (at < v.size()) v[at] = static_cast<char>(rng());
          break;
        case 1:
          v.insert(at, 1, "{}[]\",:0\\"[rng() % 9]);
          break;
        default:
          if (at < v.size()) v.erase(at, 1);
      }
    }
    auto d = decode_entry("k", v, "n");
    if (d.ok()) {
      ++accepted;
      EXPECT_FALSE(d->addresses.empty());
    } else {
      EXPECT_EQ(d.status().code(), Code::kDataLoss);
    }
  }
  EXPECT_GT(accepted, 0);
}

TEST(DirectoryJson, DeepNestingIsRefusedBeforeParsing) {
  EXPECT_TRUE(check_json_shape("{\"a\":[{}]}", 100, 3, "x").ok());
  EXPECT_EQ(check_json_shape(std::string(100000, '['), 1 << 20, 8, "x").code(), Code::kDataLoss);
  EXPECT_TRUE(check_json_shape("{\"[[[[[[[[[[\":1}", 100, 1, "x").ok());  // brackets inside strings do not count
  EXPECT_EQ(check_json_shape("{}", 1, 8, "x").code(), Code::kDataLoss);
}

TEST(DirectoryTerminalText, KeepsTextAndEscapesWhatATerminalActsOn) {
  EXPECT_EQ(terminal_text("gpu-17/6c1e ünï 東"), "gpu-17/6c1e ünï 東");
  EXPECT_EQ(terminal_text("\x1b[2J\x07\t\n\x7f"), "\\x1b[2J\\x07\\x09\\x0a\\x7f");
  EXPECT_EQ(terminal_text("a\\b"), "a\\x5cb");  // a literal "\x1b" never reads as an escaped ESC
  EXPECT_EQ(terminal_text(std::string("\xc2\x9b") + "31m"), "\\xc2\\x9b31m");  // U+009B, the one-byte CSI
  EXPECT_EQ(terminal_text("\xc2\xa0"), "\xc2\xa0");                               // U+00A0 is text
  // Not UTF-8: a lone continuation, a cut sequence, an overlong ESC, a surrogate, past U+10FFFF.
  EXPECT_EQ(terminal_text("\x80"), "\\x80");
  EXPECT_EQ(terminal_text("\xe6\x9d"), "\\xe6\\x9d");
  EXPECT_EQ(terminal_text("\xc0\x9b"), "\\xc0\\x9b");
  EXPECT_EQ(terminal_text("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(terminal_text("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 16, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    std::string out = terminal_text(s);
    for (unsigned char c : out) ASSERT_TRUE(c >= 0x20 && c != 0x7f) << printable(s);
    for (size_t k = 0; k + 1 < out.size(); ++k) {
      ASSERT_FALSE(static_cast<unsigned char>(out[k]) == 0xc2 && static_cast<unsigned char>(out[k + 1]) <= 0x9f)
          << printable(s);
    }
  }
}

TEST(DirectoryBase64, StrictBothWays) {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    auto d = base64_decode(base64_encode(s));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.value(), s);
  }
  for (const char* bad : {"a", "ab=", "a===", "ab!d", "=abc"}) EXPECT_FALSE(base64_decode(bad).ok()) << bad;
  // One text per byte string: bits past the last byte must be zero ("ZQ=="
  // is "e"; "ZR==" and "ZmF=" would decode to "e" and "fa" too).
  EXPECT_EQ(base64_decode("ZQ==").value(), "e");
  EXPECT_EQ(base64_decode("ZmE=").value(), "fa");
  for (const char* stray : {"ZR==", "ZmF="}) EXPECT_FALSE(base64_decode(stray).ok()) << stray;
}

// A TCP server on 127.0.0.1 that answers every connection with `reply`
// (repeated `repeat` times, or until the client goes) once it read a byte.
class FakeServer {
 public:
  FakeServer(std::string reply, size_t repeat) : reply_(std::move(reply)), repeat_(repeat) {
    auto s = platform::listen_tcp({"127.0.0.1", 0});
    sock_ = std::move(s).value();
    port_ = platform::local_port(sock_).value();
    thread_ = std::thread([this] { run(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
  }
  uint16_t port() const { return port_; }

 private:
  void run() {
    while (!stop_) {
      pollfd p{sock_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int fd = ::accept(sock_.fd(), nullptr, nullptr);
      if (fd < 0) continue;
      char buf[4096];
      pollfd q{fd, POLLIN, 0};
      if (::poll(&q, 1, 2000) > 0 && ::recv(fd, buf, sizeof(buf), 0) > 0) {
        for (size_t i = 0; i < repeat_ && !stop_; ++i) {
          if (::send(fd, reply_.data(), reply_.size(), MSG_NOSIGNAL) < 0) break;
        }
      }
      // Hold the connection (silent) until the client leaves or we stop.
      while (!stop_) {
        pollfd r{fd, POLLIN, 0};
        if (::poll(&r, 1, 50) > 0 && ::recv(fd, buf, sizeof(buf), 0) <= 0) break;
      }
      ::close(fd);
    }
  }
  std::string reply_;
  size_t repeat_;
  platform::Socket sock_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Result<DirectoryEntry> lookup_at(const std::string& scheme, uint16_t port, std::chrono::milliseconds within) {
  auto dir = Directory::open(scheme + "://127.0.0.1:" + std::to_string(port) + "/t");
  return dir.value()->lookup("x", after(within));
}

TEST(DirectoryHostileServer, ARedisArrayOfBillionsIsRefusedBeforeAllocation) {
  FakeServer s("*2000000000\r\n", 1);
  auto t0 = Clock::now();
  auto r = lookup_at("redis", s.port(), 2s);
  EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().to_string();
  EXPECT_LT(Clock::now() - t0, 1s);
}

TEST(DirectoryHostileServer, AnEndlessRedisBulkIsCutAtTheCap) {
  FakeServer s("$900000000\r\n" + std::string(65536, 'x'), 100000);
  auto r = lookup_at("redis", s.port(), 5s);
  EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().to_string();
  EXPECT_NE(r.status().message().find("larger than"), std::string::npos) << r.status().to_string();
}

TEST(DirectoryHostileServer, GarbageInsteadOfRespIsDataLoss) {
  FakeServer s("HTTP/1.1 200 OK\r\n\r\n", 1);
  EXPECT_EQ(lookup_at("redis", s.port(), 2s).status().code(), Code::kDataLoss);
}

TEST(DirectoryHostileServer, ASilentServerCostsNoMoreThanTheDeadline) {
  for (const char* scheme : {"redis", "etcd"}) {
    FakeServer s("", 0);
    auto t0 = Clock::now();
    auto r = lookup_at(scheme, s.port(), 300ms);
    EXPECT_EQ(r.status().code(), Code::kUnavailable) << scheme << ": " << r.status().to_string();
    EXPECT_LT(Clock::now() - t0, 450ms) << scheme;
  }
}

TEST(DirectoryHostileServer, AnEndlessHttpBodyIsCutAtTheCap) {
  FakeServer s("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"kvs\":[\"" + std::string(65536, 'A'),
               100000);
  auto r = lookup_at("etcd", s.port(), 5s);
  EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().to_string();
}

TEST(DirectoryHostileServer, AnAnnouncedHugeHttpBodyIsRefusedUpFront) {
  FakeServer s("HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n{", 1);
  auto r = lookup_at("etcd", s.port(), 2s);
  EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().to_string();
}

TEST(DirectoryHostileServer, DeeplyNestedHttpJsonIsDataLoss) {
  std::string body = std::string(5000, '[');
  FakeServer s("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body, 1);
  auto r = lookup_at("etcd", s.port(), 2s);
  EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().to_string();
}

TEST(DirectoryHostileServer, AnEtcdValueThatIsNotAnEntryIsDataLoss) {
  std::string body = "{\"kvs\":[{\"key\":\"" + base64_encode("t/engines/x") + "\",\"value\":\"" +
                     base64_encode("{\"ferry\":1}") + "\"}]}";
  FakeServer s("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body, 1);
  auto r = lookup_at("etcd", s.port(), 2s);
  EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status().to_string();
  EXPECT_NE(r.status().message().find("t/engines/x"), std::string::npos) << r.status().to_string();
}

TEST(DirectoryOptions, TheEnvironmentSetsThemAndBadOnesAreRefused) {
  ::setenv("FERRY_DIRECTORY", "redis://u:pw@127.0.0.1:6379/x", 1);
  ::setenv("FERRY_NAME", "decode-3", 1);
  ::setenv("FERRY_DIRECTORY_TTL_MS", "1500", 1);
  auto o = apply_environment(Options{});
  ::unsetenv("FERRY_DIRECTORY");
  ::unsetenv("FERRY_NAME");
  ::unsetenv("FERRY_DIRECTORY_TTL_MS");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->directory, "redis://u:pw@127.0.0.1:6379/x");
  EXPECT_EQ(o->name, "decode-3");
  EXPECT_EQ(o->directory_ttl, 1500ms);
  // `ferry config` shows the URL without its password.
  for (const TunableInfo& t : describe_tunables(o.value())) {
    if (t.name == "directory") {
      EXPECT_EQ(t.value, "redis://u:***@127.0.0.1:6379/x");
    }
  }
  Options bad;
  bad.directory = "memcached://h:1";
  EXPECT_EQ(Engine::create(bad).status().code(), Code::kInvalidArgument);
  bad = Options{};
  bad.directory = "redis://127.0.0.1:1";
  bad.name = "a:b";
  EXPECT_EQ(Engine::create(bad).status().code(), Code::kInvalidArgument);
  bad.name = "ok";
  bad.directory_ttl = 10ms;
  EXPECT_EQ(Engine::create(bad).status().code(), Code::kInvalidArgument);
}

TEST(DirectoryOptions, ANameWithoutADirectoryIsAClearError) {
  Options o;
  o.transport = TransportChoice::kTcp;
  auto e = Engine::create(o);
  ASSERT_TRUE(e.ok());
  auto c = e.value()->connect("decode-3", after(1s));
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_NE(c.status().message().find("FERRY_DIRECTORY"), std::string::npos) << c.status().to_string();
  EXPECT_EQ(e.value()->directory(), nullptr);
  EXPECT_EQ(e.value()->name(), "");
}

TEST(DirectoryOptions, AnUnreachableDirectoryDoesNotStopTheEngine) {
  Options o;
  o.transport = TransportChoice::kTcp;
  o.directory = "redis://127.0.0.1:1/x";  // nothing listens on port 1
  o.directory_ttl = 600ms;
  auto t0 = Clock::now();
  auto e = Engine::create(o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_LT(Clock::now() - t0, 2500ms);
  EXPECT_FALSE(e.value()->name().empty());  // hostname-pid
  auto l = e.value()->lookup("x", after(300ms));
  EXPECT_EQ(l.status().code(), Code::kUnavailable) << l.status().to_string();
}

}  // namespace
}  // namespace ferry::directory
