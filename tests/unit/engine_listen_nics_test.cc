// Serving named NICs while listening on one specific address would advertise
// addresses nobody accepts on: Engine::create refuses the combination.
#include <gtest/gtest.h>

#include "ferry/ferry.h"
#include "platform/interfaces.h"

namespace ferry {
namespace {

TEST(EngineListenNics, NicsWithAListenAddressOfAnotherHostAreRefused) {
  if (!platform::select_interfaces("lo").ok()) GTEST_SKIP() << "no loopback interface with an IPv4 address";
  Options o;
  o.transport = TransportChoice::kTcp;
  o.nics = "lo";
  o.listen = "127.0.0.2:0";
  auto e = Engine::create(o);
  ASSERT_FALSE(e.ok()) << "listens on 127.0.0.2 but advertises " << (*e)->metadata();
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument) << e.status().to_string();
  EXPECT_NE(e.status().message().find("nics"), std::string::npos) << e.status().to_string();
  EXPECT_NE(e.status().message().find("127.0.0.2"), std::string::npos) << e.status().to_string();
}

TEST(EngineListenNics, NicsWithTheirOwnOrAWildcardAddressAreServed) {
  if (!platform::select_interfaces("lo").ok()) GTEST_SKIP() << "no loopback interface with an IPv4 address";
  for (const char* listen : {"127.0.0.1:0", "0.0.0.0:0"}) {
    Options o;
    o.transport = TransportChoice::kTcp;
    o.nics = "lo";
    o.listen = listen;
    auto e = Engine::create(o);
    ASSERT_TRUE(e.ok()) << listen << ": " << e.status().to_string();
    Options peer;
    peer.transport = TransportChoice::kTcp;
    auto p = Engine::create(peer).value();
    auto c = p->connect((*e)->metadata(), after(std::chrono::seconds(5)));
    EXPECT_TRUE(c.ok()) << listen << ": " << c.status().to_string();
  }
}

}  // namespace
}  // namespace ferry
