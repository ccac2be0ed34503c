// DynamicLibrary (opening a library at run time, looking up entry points) and
// the errno-to-Status wording of system_error.h.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "platform/dynamic_library.h"
#include "platform/system_error.h"

namespace ferry::platform {
namespace {

TEST(DynamicLibrary, OpensTheFirstCandidateThatLoadsAndFindsItsEntryPoints) {
  auto lib = DynamicLibrary::open({"libferry-no-such-library.so.9", "libc.so.6"});
  ASSERT_TRUE(lib.ok()) << lib.status().to_string();
  EXPECT_TRUE(lib->is_open());
  EXPECT_EQ(lib->name(), "libc.so.6");
  size_t (*length)(const char*) = nullptr;
  ASSERT_TRUE(lib->lookup("strlen", length).ok());
  ASSERT_NE(length, nullptr);
  EXPECT_EQ(length("ferry"), 5u);
}

TEST(DynamicLibrary, NamesEveryCandidateThatFailedToLoad) {
  auto lib = DynamicLibrary::open({"libferry-no-such-a.so.1", "libferry-no-such-b.so.2"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), Code::kUnavailable);
  std::string m = lib.status().message();
  EXPECT_NE(m.find("libferry-no-such-a.so.1"), std::string::npos) << m;
  EXPECT_NE(m.find("; "), std::string::npos) << m;
  EXPECT_NE(m.find("libferry-no-such-b.so.2"), std::string::npos) << m;

  auto none = DynamicLibrary::open(std::vector<std::string>{});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kUnavailable);
}

TEST(DynamicLibrary, AMissingEntryPointNamesTheLibraryAndTheSymbol) {
  auto lib = DynamicLibrary::open({"libc.so.6"});
  ASSERT_TRUE(lib.ok()) << lib.status().to_string();
  int (*fn)() = reinterpret_cast<int (*)()>(1);
  Status s = lib->lookup("ferry_no_such_symbol", fn);
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(fn, nullptr);
  // dlerror's text: the file loaded, and the symbol.
  EXPECT_NE(s.message().find("libc.so.6: undefined symbol: ferry_no_such_symbol"), std::string::npos) << s.message();

  EXPECT_FALSE(lib->lookup_optional("ferry_no_such_symbol", fn));
  EXPECT_EQ(fn, nullptr);
  EXPECT_TRUE(lib->lookup_optional("strlen", fn));
  EXPECT_NE(fn, nullptr);
}

TEST(DynamicLibrary, MovesOwnershipAndAnEmptyHandleFindsNothing) {
  auto opened = DynamicLibrary::open({"libc.so.6"});
  ASSERT_TRUE(opened.ok());
  DynamicLibrary a = std::move(opened).value();
  DynamicLibrary b = std::move(a);
  EXPECT_FALSE(a.is_open());  // NOLINT(bugprone-use-after-move): moved-from state is part of the contract
  EXPECT_TRUE(b.is_open());
  void (*fn)() = nullptr;
  EXPECT_EQ(a.lookup("strlen", fn).code(), Code::kNotFound);
  EXPECT_TRUE(b.lookup("strlen", fn).ok());
  b = DynamicLibrary();
  EXPECT_FALSE(b.is_open());
}

TEST(SystemError, WhatThenTheSystemsText) {
  EXPECT_EQ(errno_message("open /x", EACCES), std::string("open /x: ") + std::strerror(EACCES));
  Status s = errno_status(Code::kUnavailable, "memfd_create", EMFILE);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.message(), std::string("memfd_create: ") + std::strerror(EMFILE));
  errno = ENOENT;
  EXPECT_EQ(errno_status(Code::kNotFound, "stat").message(), std::string("stat: ") + std::strerror(ENOENT));
}

}  // namespace
}  // namespace ferry::platform
