// Two engines of this process joined by one connection over a given
// transport: where the tests of whole operations start.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string_view>
#include <thread>

#include "ferry/ferry.h"

namespace ferry {

struct EnginePair {
  std::unique_ptr<Engine> a, b;
  std::shared_ptr<Connection> ca, cb;  // a's end and b's end
};

// Connects a to b over `transport` ("tcp" or "local"), both engines made
// with `o`; on failure the test fails and the ends are null.
inline EnginePair connect_pair(std::string_view transport, Options o = {}) {
  using namespace std::chrono_literals;
  o.transport = parse_transport(transport).value();
  o.local_same_process = true;  // both engines live in this test's process
  EnginePair p;
  p.a = Engine::create(o).value();
  p.b = Engine::create(o).value();
  std::thread t([&] {
    auto c = p.b->accept(after(10s));
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (c.ok()) p.cb = std::move(c).value();
  });
  auto c = p.a->connect(p.b->address(), after(10s));
  t.join();
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (c.ok()) p.ca = std::move(c).value();
  if (p.ca) {
    EXPECT_EQ(p.ca->transport_name(), transport);
  }
  return p;
}

// A test run over each transport its parameter names ("tcp", "local") that
// starts from a connected pair: engines a_ and b_, their ends ca_ and cb_.
class PairTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    EnginePair p = connect_pair(GetParam());
    ASSERT_TRUE(p.ca && p.cb);
    a_ = std::move(p.a);
    b_ = std::move(p.b);
    ca_ = std::move(p.ca);
    cb_ = std::move(p.cb);
  }
  std::unique_ptr<Engine> a_, b_;
  std::shared_ptr<Connection> ca_, cb_;
};

}  // namespace ferry
