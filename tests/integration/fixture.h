// Shared pieces of the integration tests: a local engine with registered
// memory, connecting to a PeerProcess, and status assertions.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/ferry.h"
#include "integration/peer_process.h"
#include "integration/test_data.h"

namespace ferry::test {

using namespace std::chrono_literals;

#define ASSERT_OK(expr)                                      \
  do {                                                       \
    ::ferry::Status s_ = (expr);                             \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.to_string(); \
  } while (0)
#define EXPECT_CODE(expr, code_)                                        \
  do {                                                                  \
    ::ferry::Status s_ = (expr);                                        \
    EXPECT_EQ(s_.code(), code_) << #expr << " gave " << s_.to_string(); \
  } while (0)

// An engine plus one registered block of host memory.
struct LocalSide {
  std::unique_ptr<Engine> engine;
  std::vector<uint8_t> mem;
  Region region;

  explicit LocalSide(size_t bytes, Options o = {}) : mem(bytes) {
    auto e = Engine::create(o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (!e.ok()) return;
    engine = std::move(e).value();
    auto r = engine->reg(mem.data(), mem.size());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) region = r.value();
  }
  uint8_t* at(size_t off) { return mem.data() + off; }
};

inline std::shared_ptr<Connection> connect_to(Engine& e, const PeerProcess& p) {
  auto c = e.connect(p.address(), after(10s));
  EXPECT_TRUE(c.ok()) << "connect to " << p.address() << ": " << c.status().to_string();
  return c.ok() ? c.value() : nullptr;
}

// Receives the descriptor a target peer sends first, through `buf`
// (registered, at least 1 MiB).
inline Result<RemoteDescriptor> recv_descriptor(Connection& c, uint8_t* buf) {
  auto n = c.recv(buf, 1 << 20, after(10s));
  if (!n.ok()) return n.status();
  return RemoteDescriptor::parse(std::string(reinterpret_cast<char*>(buf), n.value()));
}

// Sends a text command from `buf` (registered) and returns the peer's reply.
inline std::string command(Connection& c, uint8_t* buf, size_t cap, const std::string& text) {
  std::memcpy(buf, text.data(), text.size());
  Status s = c.send(buf, text.size(), after(30s));
  if (!s.ok()) return "send failed: " + s.to_string();
  auto n = c.recv(buf, cap, after(30s));
  if (!n.ok()) return "recv failed: " + n.status().to_string();
  return std::string(reinterpret_cast<char*>(buf), n.value());
}

}  // namespace ferry::test
