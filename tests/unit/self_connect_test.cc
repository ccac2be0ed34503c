// A TCP connect to a port nobody listens on can connect the socket to itself:
// when the kernel happens to pick the destination port as the source port,
// the SYN meets itself (a simultaneous open) and the connect succeeds. The
// dialer then reads its own hello back, and a caller that retries a refused
// address until the peer listens (the Python door, a directory client) gets a
// garbled-handshake error instead of a refusal. connect_tcp must refuse it.
//
// The tests make it certain, not rare: in a network namespace of its own (a
// thread's, so nothing else sees it) the ephemeral range is the one port
// dialed, so every connect there picks it as its source. Needs root; skips
// otherwise.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "ferry/engine.h"
#include "own_network_namespace.h"
#include "platform/socket.h"

namespace ferry {
namespace {

constexpr uint16_t kOnlyEphemeralPort = 40000;

// `body` in a network namespace whose ephemeral range is kOnlyEphemeralPort alone.
std::string in_namespace_with_one_ephemeral_port(const std::function<void()>& body) {
  const std::string range = std::to_string(kOnlyEphemeralPort) + " " + std::to_string(kOnlyEphemeralPort);
  return netns::in_own_network_namespace({{"ipv4/ip_local_port_range", range}}, body);
}

TEST(SelfConnect, ASocketThatConnectedToItselfIsARefusal) {
  Status got;
  bool connected = false;
  std::string why = in_namespace_with_one_ephemeral_port([&] {
    auto s = platform::connect_tcp(platform::HostPort{"127.0.0.1", kOnlyEphemeralPort},
                                   Clock::now() + std::chrono::seconds(5));
    connected = s.ok();
    got = s.status();
  });
  if (!why.empty()) GTEST_SKIP() << why;
  EXPECT_FALSE(connected) << "connect_tcp handed back a socket connected to itself";
  EXPECT_EQ(got.code(), Code::kUnavailable) << got.message();
  EXPECT_NE(got.message().find("Connection refused"), std::string::npos) << got.message();
  EXPECT_NE(got.message().find("127.0.0.1:40000"), std::string::npos) << got.message();
}

TEST(SelfConnect, AnEngineDialingAnAddressNobodyListensOnIsRefusedNotGarbled) {
  Status got;
  bool connected = false;
  int refusals = 0;  // each try must be refused, and leave nothing that fails the next
  std::string why = in_namespace_with_one_ephemeral_port([&] {
    Options o;
    o.listen = "127.0.0.1:" + std::to_string(kOnlyEphemeralPort - 1);  // outside the ephemeral range
    auto engine = Engine::create(o);
    if (!engine.ok()) {
      got = engine.status();
      return;
    }
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto c = engine.value()->connect("127.0.0.1:" + std::to_string(kOnlyEphemeralPort),
                                       Clock::now() + std::chrono::seconds(5));
      connected = c.ok();
      got = c.status();
      if (connected || got.code() != Code::kUnavailable ||
          got.message().find("Connection refused") == std::string::npos) {
        break;
      }
      ++refusals;
    }
  });
  if (!why.empty()) GTEST_SKIP() << why;
  EXPECT_FALSE(connected) << "the engine connected to nobody";
  EXPECT_EQ(refusals, 3) << got.message();
}

}  // namespace
}  // namespace ferry
