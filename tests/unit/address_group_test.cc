// core::address_group: which handshakes share one peer's part of
// max_handshakes.
#include <gtest/gtest.h>

#include "core/admission.h"

namespace ferry::core {
namespace {

TEST(AddressGroup, IPv4ByItsSlash24AndIPv6ByItsSlash64) {
  EXPECT_EQ(address_group("10.1.2.3"), "10.1.2.0/24");
  EXPECT_EQ(address_group("10.1.2.250"), "10.1.2.0/24");
  EXPECT_NE(address_group("10.1.3.3"), address_group("10.1.2.3"));
  EXPECT_EQ(address_group("127.0.0.1"), address_group("127.0.0.2"));
  EXPECT_EQ(address_group("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64");
  EXPECT_EQ(address_group("2001:db8:1:2::9"), address_group("2001:db8:1:2:ffff::1"));
  EXPECT_NE(address_group("2001:db8:1:3::1"), address_group("2001:db8:1:2::1"));
  EXPECT_EQ(address_group("::1"), "::/64");
}

TEST(AddressGroup, AnIPv4MappedAddressCountsAsItsIPv4Address) {
  EXPECT_EQ(address_group("::ffff:127.0.0.2"), "127.0.0.0/24");
  EXPECT_EQ(address_group("::ffff:127.0.0.2"), address_group("127.0.0.9"));
  EXPECT_NE(address_group("::ffff:127.0.0.2"), address_group("::1"));
}

TEST(AddressGroup, AZoneIsIgnoredAndAnythingElseIsItsOwnGroup) {
  EXPECT_EQ(address_group("fe80::1%eth0"), "fe80::/64");
  EXPECT_EQ(address_group("localhost"), "localhost");
  EXPECT_EQ(address_group(""), "");
  EXPECT_EQ(address_group("1.2.3"), "1.2.3");
}

}  // namespace
}  // namespace ferry::core
