// CPU lists and NCCL-format binding strings: good strings parse to the right
// sets and format back; every malformed string is refused with the position
// and what was expected there.
#include "platform/cpu_binding.h"

#include <gtest/gtest.h>

#include <string>

namespace ferry::platform {
namespace {

CpuList cpus(std::string_view text) {
  auto r = parse_cpu_list(text, "test");
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().to_string();
  return r.ok() ? *r : CpuList{-1};
}

CpuList range(int lo, int hi) {
  CpuList out;
  for (int c = lo; c <= hi; ++c) out.push_back(c);
  return out;
}

CpuList join(CpuList a, const CpuList& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string bad_cpus(std::string_view text) {
  auto r = parse_cpu_list(text, "/sys/x/cpulist");
  EXPECT_FALSE(r.ok()) << "\"" << text << "\" parsed";
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  return r.status().message();
}

std::string bad_bindings(std::string_view text) {
  auto r = parse_bindings(text, "FERRY_TX_BINDINGS");
  EXPECT_FALSE(r.ok()) << "\"" << text << "\" parsed";
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  return r.status().message();
}

TEST(CpuList, ParsesKernelLists) {
  EXPECT_EQ(cpus("0-3,8,10-11"), (CpuList{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(cpus("0-51,104-155\n"), join(range(0, 51), range(104, 155)));
  EXPECT_EQ(cpus("7"), (CpuList{7}));
  EXPECT_EQ(cpus(" 3 , 1,2,2 "), (CpuList{1, 2, 3}));  // sorted, deduplicated
  EXPECT_EQ(cpus(""), CpuList{});                      // a node without CPUs
  EXPECT_EQ(cpus("\n"), CpuList{});
  EXPECT_EQ(cpus("65535"), (CpuList{65535}));
}

TEST(CpuList, FormatsWithRanges) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list(join(range(8, 21), range(112, 125))), "8-21,112-125");
  EXPECT_EQ(format_cpu_list({5}), "5");
  EXPECT_EQ(format_cpu_list({4, 5}), "4-5");
  EXPECT_EQ(format_cpu_list({}), "");
  for (std::string_view s : {"0-207", "1,3,5", "0,2-4,6-7,100"}) EXPECT_EQ(format_cpu_list(cpus(s)), s);
}

TEST(CpuList, RefusesMalformedListsWithPosition) {
  EXPECT_EQ(bad_cpus("a"), "/sys/x/cpulist: position 1: expected a CPU number, found 'a' in \"a\"");
  EXPECT_EQ(bad_cpus("1-"), "/sys/x/cpulist: position 3: expected a CPU number, found end of text in \"1-\"");
  EXPECT_EQ(bad_cpus("5-3"), "/sys/x/cpulist: position 1: range 5-3 is descending (write it low-high) in \"5-3\"");
  EXPECT_EQ(bad_cpus("0,,1"), "/sys/x/cpulist: position 3: expected a CPU number, found ',' in \"0,,1\"");
  EXPECT_EQ(bad_cpus("1 2"),
            "/sys/x/cpulist: position 3: expected ',' or the end of the CPU list, found '2' in \"1 2\"");
  EXPECT_NE(bad_cpus("65536").find("position 1: CPU number too large (at most 65535)"), std::string::npos);
  EXPECT_NE(bad_cpus("-1").find("position 1: expected a CPU number"), std::string::npos);
}

TEST(Bindings, ParsesGooglesA3HighStrings) {
  auto tx = parse_bindings("eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177", "tx");
  ASSERT_TRUE(tx.ok()) << tx.status().to_string();
  ASSERT_EQ(tx->size(), 4u);
  EXPECT_EQ(tx->at("eth1"), join(range(8, 21), range(112, 125)));
  EXPECT_EQ(tx->at("eth2"), join(range(8, 21), range(112, 125)));
  EXPECT_EQ(tx->at("eth3"), join(range(60, 73), range(164, 177)));
  EXPECT_EQ(tx->at("eth4"), join(range(60, 73), range(164, 177)));
  EXPECT_EQ(tx->at("eth1").size(), 28u);
  EXPECT_EQ(format_bindings(*tx), "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177");
}

TEST(Bindings, BlanksTrailingSemicolonAndNaturalOrder) {
  auto b = parse_bindings(" eth10 : 3 , 1 ;eth2:0-1; ", "x");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->at("eth10"), (CpuList{1, 3}));
  EXPECT_EQ(b->at("eth2"), (CpuList{0, 1}));
  EXPECT_EQ(format_bindings(*b), "eth2:0-1;eth10:1,3");  // eth2 before eth10
  auto round = parse_bindings(format_bindings(*b), "x");
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(*round, *b);
  auto odd = parse_bindings("enp0s3.100:1;bond0@x_y-z:2", "x");
  ASSERT_TRUE(odd.ok()) << odd.status().to_string();
  EXPECT_EQ(odd->count("enp0s3.100"), 1u);
}

TEST(Bindings, RefusesMalformedStringsWithPosition) {
  EXPECT_EQ(bad_bindings("eth1:8-21,112-125;eth2:x"),
            "FERRY_TX_BINDINGS: position 24: expected a CPU number, found 'x' in \"eth1:8-21,112-125;eth2:x\"");
  EXPECT_EQ(bad_bindings("eth1"),
            "FERRY_TX_BINDINGS: position 5: expected ':' after NIC name eth1, found end of text in \"eth1\"");
  EXPECT_EQ(bad_bindings(""), "FERRY_TX_BINDINGS: position 1: expected a NIC name, found end of text in \"\"");
  EXPECT_EQ(bad_bindings(":1-2"), "FERRY_TX_BINDINGS: position 1: expected a NIC name, found ':' in \":1-2\"");
  EXPECT_EQ(bad_bindings("eth1:21-8"),
            "FERRY_TX_BINDINGS: position 6: range 21-8 is descending (write it low-high) in \"eth1:21-8\"");
  EXPECT_EQ(bad_bindings("eth1:1,,2"),
            "FERRY_TX_BINDINGS: position 8: expected a CPU number, found ',' in \"eth1:1,,2\"");
  EXPECT_EQ(bad_bindings("eth1:1;eth1:2"),
            "FERRY_TX_BINDINGS: position 8: NIC eth1 is named twice in \"eth1:1;eth1:2\"");
  EXPECT_EQ(bad_bindings("eth1:1-"),
            "FERRY_TX_BINDINGS: position 8: expected a CPU number, found end of text in \"eth1:1-\"");
  EXPECT_EQ(bad_bindings("eth1:"),
            "FERRY_TX_BINDINGS: position 6: expected a CPU number, found end of text in \"eth1:\"");
  EXPECT_EQ(bad_bindings("eth1:1 2"),
            "FERRY_TX_BINDINGS: position 8: expected ',' or ';' or the end of the bindings, found '2' in \"eth1:1 2\"");
  EXPECT_EQ(bad_bindings("eth1:1;;eth2:2"),
            "FERRY_TX_BINDINGS: position 8: expected a NIC name, found ';' in \"eth1:1;;eth2:2\"");
  EXPECT_EQ(bad_bindings("eth#1:1"),
            "FERRY_TX_BINDINGS: position 4: expected ':' after NIC name eth, found '#' in \"eth#1:1\"");
  EXPECT_NE(bad_bindings("eth1:99999999").find("position 6: CPU number too large"), std::string::npos);
  EXPECT_NE(bad_bindings("eth1=1").find("position 5: expected ':'"), std::string::npos);
}

TEST(NaturalLess, OrdersNumbersByValue) {
  NaturalLess less;
  EXPECT_TRUE(less("eth2", "eth10"));
  EXPECT_FALSE(less("eth10", "eth2"));
  EXPECT_TRUE(less("eth1", "eth2"));
  EXPECT_TRUE(less("eth", "eth0"));
  EXPECT_FALSE(less("eth1", "eth1"));
  EXPECT_TRUE(less("enp0s3", "enp0s10"));
  EXPECT_TRUE(less("eth01", "eth1") != less("eth1", "eth01"));  // strict even with leading zeros
}

}  // namespace
}  // namespace ferry::platform
