// Options: FERRY_* environment overrides, validate() ranges, the auth token file, describe_tunables.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ferry/ferry.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kTunableEnvs = {"FERRY_LISTEN",
                                               "FERRY_STREAMS",
                                               "FERRY_CHUNK",
                                               "FERRY_WINDOW",
                                               "FERRY_INLINE_MAX",
                                               "FERRY_AUTH_TOKEN",
                                               "FERRY_HEARTBEAT_MS",
                                               "FERRY_PEER_TIMEOUT_MS",
                                               "FERRY_HANDSHAKE_TIMEOUT_MS",
                                               "FERRY_SOCKET_BUFFER",
                                               "FERRY_TRANSPORT",
                                               "FERRY_LOG",
                                               "FERRY_NICS",
                                               "FERRY_PATH_TIMEOUT_MS",
                                               "FERRY_TX_BINDINGS",
                                               "FERRY_RX_BINDINGS",
                                               "FERRY_WORKERS",
                                               "FERRY_NIC_POLICY",
                                               "FERRY_STAGING_DEPTH",
                                               "FERRY_STAGING_CHUNK",
                                               "FERRY_PATH_POLICY",
                                               "FERRY_WAIT_SPIN_US",
                                               "FERRY_STAGING_COPY",
                                               "FERRY_STAGING_LEND",
                                               "FERRY_GATHER_LINGER_US",
                                               "FERRY_MAX_CONNECTIONS",
                                               "FERRY_MAX_HANDSHAKES",
                                               "FERRY_MAX_CONNECTIONS_PER_PEER",
                                               "FERRY_MAX_STREAMS",
                                               "FERRY_CONNECTION_MEMORY",
                                               "FERRY_ENGINE_MEMORY",
                                               "FERRY_METRICS",
                                               "FERRY_METRICS_ADDR",
                                               "FERRY_LOCAL_OTHER_UIDS",
                                               "FERRY_LOCAL_SAME_PROCESS",
                                               "FERRY_DIRECTORY",
                                               "FERRY_NAME",
                                               "FERRY_DIRECTORY_TTL_MS"};

// Clears every FERRY_* variable ferry reads for the test's lifetime and puts
// back whatever the process had before, including anything set through it.
class EnvGuard {
 public:
  EnvGuard() {
    std::vector<std::string> all = kTunableEnvs;
    all.push_back("FERRY_AUTH_TOKEN_FILE");
    for (const auto& name : all) {
      const char* v = std::getenv(name.c_str());
      saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(name.c_str());
    }
  }
  ~EnvGuard() {
    for (const auto& [name, v] : saved_) {
      if (v)
        ::setenv(name.c_str(), v->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  void set(const std::string& name, const std::string& value) {
    ASSERT_TRUE(saved_.count(name)) << name << " is not a variable this guard restores";
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) { ::unsetenv(name.c_str()); }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

std::map<std::string, std::string> values_by_env(const Options& o) {
  std::map<std::string, std::string> m;
  for (const auto& t : describe_tunables(o)) m[t.env] = t.value;
  return m;
}

TEST(Options, DefaultsAreValidAndUnchangedWithoutEnvironment) {
  EnvGuard env;
  EXPECT_TRUE(validate(Options{}).ok());
  Options base;
  base.window = 7;
  auto r = apply_environment(base);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->window, 7);
  EXPECT_EQ(r->streams, Options{}.streams);
}

TEST(Options, EnvironmentOverridesAreApplied) {
  EnvGuard env;
  env.set("FERRY_STREAMS", "4");
  env.set("FERRY_CHUNK", "1M");
  env.set("FERRY_PEER_TIMEOUT_MS", "1500");
  env.set("FERRY_LOG", "debug");
  Options base;
  base.window = 9;  // not in the environment: kept
  auto r = apply_environment(base);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->streams, 4);
  EXPECT_EQ(r->chunk_bytes, size_t{1} << 20);
  EXPECT_EQ(r->peer_timeout, 1500ms);
  EXPECT_EQ(r->log_level, LogLevel::kDebug);
  EXPECT_EQ(r->window, 9);
  EXPECT_EQ(r->heartbeat_interval, Options{}.heartbeat_interval);
}

// Each tunable alone, through its own variable: only that field changes.
TEST(Options, EveryTunableIsReadFromItsVariable) {
  const std::map<std::string, std::pair<std::string, std::string>> cases = {
      // env -> (value set, value describe_tunables reports)
      {"FERRY_LISTEN", {"0.0.0.0:7000", "0.0.0.0:7000"}},
      {"FERRY_STREAMS", {"5", "5"}},
      {"FERRY_CHUNK", {"64K", "65536"}},
      {"FERRY_WINDOW", {"32", "32"}},
      {"FERRY_INLINE_MAX", {"1K", "1024"}},
      {"FERRY_AUTH_TOKEN", {"hunter2", "(set)"}},
      {"FERRY_HEARTBEAT_MS", {"250", "250"}},
      {"FERRY_PEER_TIMEOUT_MS", {"9000", "9000"}},
      {"FERRY_HANDSHAKE_TIMEOUT_MS", {"3000", "3000"}},
      {"FERRY_SOCKET_BUFFER", {"4M", "4194304"}},
      {"FERRY_TRANSPORT", {"tcp", "tcp"}},
      {"FERRY_LOG", {"trace", "trace"}},
      {"FERRY_NICS", {"eth1,eth2", "eth1,eth2"}},
      {"FERRY_PATH_TIMEOUT_MS", {"750", "750"}},
      {"FERRY_TX_BINDINGS", {"eth1:0-1", "eth1:0-1"}},
      {"FERRY_RX_BINDINGS", {"eth1:2", "eth1:2"}},
      {"FERRY_NIC_POLICY", {"all", "all"}},
      {"FERRY_STAGING_DEPTH", {"8", "8"}},
      {"FERRY_STAGING_CHUNK", {"2M", "2097152"}},
      {"FERRY_WORKERS", {"3", "3"}},
      {"FERRY_PATH_POLICY", {"all", "all"}},
      {"FERRY_WAIT_SPIN_US", {"2000", "2000"}},
      {"FERRY_STAGING_COPY", {"engine", "engine"}},
      {"FERRY_STAGING_LEND", {"0", "0"}},
      {"FERRY_GATHER_LINGER_US", {"500", "500"}},
      {"FERRY_MAX_CONNECTIONS", {"17", "17"}},
      {"FERRY_MAX_HANDSHAKES", {"3", "3"}},
      {"FERRY_MAX_CONNECTIONS_PER_PEER", {"5", "5"}},
      {"FERRY_MAX_STREAMS", {"40", "40"}},
      {"FERRY_CONNECTION_MEMORY", {"8M", "8388608"}},
      {"FERRY_ENGINE_MEMORY", {"2G", "2147483648"}},
      {"FERRY_LOCAL_OTHER_UIDS", {"1", "1"}},
      {"FERRY_METRICS", {"0", "0"}},
      {"FERRY_METRICS_ADDR", {"127.0.0.1:9464", "127.0.0.1:9464"}},
      {"FERRY_DIRECTORY", {"redis://pw@10.0.0.1:6379/prod", "redis://***@10.0.0.1:6379/prod"}},
      {"FERRY_NAME", {"decode-3", "decode-3"}},
      {"FERRY_DIRECTORY_TTL_MS", {"1500", "1500"}},
      {"FERRY_LOCAL_SAME_PROCESS", {"1", "1"}},
  };
  ASSERT_EQ(cases.size(), kTunableEnvs.size());
  const auto defaults = values_by_env(Options{});
  for (const auto& [name, vals] : cases) {
    EnvGuard env;
    env.set(name, vals.first);
    auto r = apply_environment(Options{});
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
    auto got = values_by_env(r.value());
    for (const auto& [other, v] : got) {
      if (other == name) {
        EXPECT_EQ(v, vals.second) << name;
        EXPECT_NE(v, defaults.at(other)) << name << " did not change";
      } else {
        EXPECT_EQ(v, defaults.at(other)) << other << " changed when only " << name << " was set";
      }
    }
    if (name == "FERRY_AUTH_TOKEN") {
      EXPECT_EQ(r->auth_token, "hunter2");
    }
  }
}

void expect_rejected(const std::string& name, const std::string& value) {
  EnvGuard env;
  env.set(name, value);
  auto r = apply_environment(Options{});
  ASSERT_FALSE(r.ok()) << name << "=" << value << " was accepted";
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
}

TEST(Options, MalformedValuesNameTheVariable) {
  expect_rejected("FERRY_STREAMS", "abc");
  expect_rejected("FERRY_STREAMS", "");
  expect_rejected("FERRY_STREAMS", "-1");
  expect_rejected("FERRY_CHUNK", "12Q");
  expect_rejected("FERRY_CHUNK", "M");
  expect_rejected("FERRY_LOG", "loud");
  expect_rejected("FERRY_PEER_TIMEOUT_MS", "1.5");
  expect_rejected("FERRY_PEER_TIMEOUT_MS", "0");
  expect_rejected("FERRY_HEARTBEAT_MS", "-5");
  expect_rejected("FERRY_WAIT_SPIN_US", "-1");
  expect_rejected("FERRY_WAIT_SPIN_US", "10ms");
  expect_rejected("FERRY_GATHER_LINGER_US", "-1");
  // The offending value is quoted too.
  EnvGuard env;
  env.set("FERRY_CHUNK", "12Q");
  EXPECT_NE(apply_environment(Options{}).status().message().find("12Q"), std::string::npos);
}

// Well-formed numbers too large for their field must not wrap into a valid
// but different setting (e.g. 2^32 + 4 streams read as 4).
TEST(Options, ValuesTooLargeForTheFieldAreRejected) {
  expect_rejected("FERRY_STREAMS", "4294967300");             // 2^32 + 4
  expect_rejected("FERRY_WINDOW", "4294967297");              // 2^32 + 1
  expect_rejected("FERRY_CHUNK", "18014398509482008K");       // (2^54 + 2^10) KiB = 2^64 + 1 MiB
  expect_rejected("FERRY_CHUNK", "99999999999999999999999");  // beyond uint64
}

// Well-formed but out of range: apply_environment runs validate(), whose
// message names the field.
TEST(Options, EnvironmentIsValidated) {
  for (const auto& [name, value, field] :
       {std::tuple{"FERRY_STREAMS", "65", "streams"}, std::tuple{"FERRY_CHUNK", "100", "chunk_bytes"},
        std::tuple{"FERRY_TRANSPORT", "udp", "transport"}, std::tuple{"FERRY_HEARTBEAT_MS", "6000", "peer_timeout"},
        std::tuple{"FERRY_GATHER_LINGER_US", "10000001", "gather_linger"}}) {
    EnvGuard env;
    env.set(name, value);
    auto r = apply_environment(Options{});
    ASSERT_FALSE(r.ok()) << name << "=" << value << " was accepted";
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  }
}

TEST(Options, ValidateRejectsOutOfRangeFields) {
  auto expect_bad = [](const Options& o, const std::string& field) {
    Status s = validate(o);
    ASSERT_FALSE(s.ok()) << field;
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  };
  Options o;
  o.streams = -1;
  expect_bad(o, "streams");
  o = Options{};
  o.streams = 65;
  expect_bad(o, "streams");
  o = Options{};
  o.workers = -1;
  expect_bad(o, "workers");
  o = Options{};
  o.workers = 65;
  expect_bad(o, "workers");
  o = Options{};
  o.chunk_bytes = 100;
  expect_bad(o, "chunk_bytes");
  o = Options{};
  o.window = 0;
  expect_bad(o, "window");
  o = Options{};
  o.gather_linger = std::chrono::microseconds(-1);
  expect_bad(o, "gather_linger");
  o = Options{};
  o.max_connections = 0;
  expect_bad(o, "max_connections");
  o = Options{};
  o.max_handshakes = 0;
  expect_bad(o, "max_handshakes");
  o = Options{};
  o.max_connections_per_peer = 0;
  expect_bad(o, "max_connections_per_peer");
  o = Options{};
  o.max_streams = 0;
  expect_bad(o, "max_streams");
  o = Options{};
  o.connection_memory_bytes = 4096;
  expect_bad(o, "connection_memory_bytes");
  o = Options{};
  o.engine_memory_bytes = o.connection_memory_bytes - 1;
  expect_bad(o, "engine_memory_bytes");
  o = Options{};
  o.peer_timeout = o.heartbeat_interval;
  expect_bad(o, "peer_timeout");
  o = Options{};
  o.peer_timeout = 100ms;
  o.heartbeat_interval = 200ms;
  expect_bad(o, "peer_timeout");
  o = Options{};
  o.transport = static_cast<TransportChoice>(7);  // only a cast can make one
  expect_bad(o, "transport");
  o = Options{};
  o.listen = "localhost";
  expect_bad(o, "listen");
  o = Options{};
  o.path_policy = static_cast<PathPolicy>(2);
  expect_bad(o, "path_policy");
  o = Options{};
  o.nic_policy = static_cast<NicPolicy>(2);
  expect_bad(o, "nic_policy");
  o = Options{};
  o.staging_copy = static_cast<StagingCopy>(2);
  expect_bad(o, "staging_copy");

  // The edges that are allowed.
  o = Options{};
  EXPECT_EQ(o.streams, kAutoStreams) << "the default lets the engine choose";
  EXPECT_TRUE(validate(o).ok());
  o.streams = 1;
  o.chunk_bytes = 4096;
  o.window = 1;
  o.peer_timeout = o.heartbeat_interval + 1ms;
  o.transport = TransportChoice::kTcp;
  EXPECT_TRUE(validate(o).ok()) << validate(o).to_string();
}

// The fields that hold one of a few names: each name parses to its value and
// back; any other name (wrong case included) is refused with the names it
// could have been, whether it comes from the parse function or from the
// variable, whose message names it too.
TEST(Options, ChoicesTakeExactlyTheirNames) {
  EXPECT_EQ(to_string(TransportChoice::kAuto), "auto");
  EXPECT_EQ(to_string(TransportChoice::kTcp), "tcp");
  EXPECT_EQ(to_string(TransportChoice::kLocal), "local");
  EXPECT_EQ(to_string(NicPolicy::kNearest), "nearest");
  EXPECT_EQ(to_string(NicPolicy::kAll), "all");
  EXPECT_EQ(to_string(PathPolicy::kAdaptive), "adaptive");
  EXPECT_EQ(to_string(PathPolicy::kAll), "all");
  EXPECT_EQ(to_string(StagingCopy::kKernel), "kernel");
  EXPECT_EQ(to_string(StagingCopy::kCopyEngine), "engine");
  EXPECT_EQ(to_string(static_cast<TransportChoice>(7)), "");
  for (auto t : {TransportChoice::kAuto, TransportChoice::kTcp, TransportChoice::kLocal}) {
    auto r = parse_transport(to_string(t));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r.value(), t);
  }
  for (auto p : {NicPolicy::kNearest, NicPolicy::kAll}) EXPECT_EQ(parse_nic_policy(to_string(p)).value(), p);
  for (auto p : {PathPolicy::kAdaptive, PathPolicy::kAll}) EXPECT_EQ(parse_path_policy(to_string(p)).value(), p);
  for (auto c : {StagingCopy::kKernel, StagingCopy::kCopyEngine}) {
    EXPECT_EQ(parse_staging_copy(to_string(c)).value(), c);
  }

  struct Bad {
    std::string env, value, message;
    Status parsed;
  };
  const Bad cases[] = {
      {"FERRY_TRANSPORT", "udp", "transport must be auto, tcp or local, got \"udp\"", parse_transport("udp").status()},
      {"FERRY_TRANSPORT", "TCP", "transport must be auto, tcp or local, got \"TCP\"", parse_transport("TCP").status()},
      {"FERRY_TRANSPORT", "", "transport must be auto, tcp or local, got \"\"", parse_transport("").status()},
      {"FERRY_NIC_POLICY", "closest", "nic_policy must be nearest or all, got \"closest\"",
       parse_nic_policy("closest").status()},
      {"FERRY_PATH_POLICY", "sometimes", "path_policy must be adaptive or all, got \"sometimes\"",
       parse_path_policy("sometimes").status()},
      {"FERRY_STAGING_COPY", "dma", "staging_copy must be kernel or engine, got \"dma\"",
       parse_staging_copy("dma").status()},
  };
  for (const Bad& b : cases) {
    EXPECT_EQ(b.parsed.code(), Code::kInvalidArgument) << b.message;
    EXPECT_EQ(b.parsed.message(), b.message);
    EnvGuard env;
    env.set(b.env, b.value);
    auto r = apply_environment(Options{});
    ASSERT_FALSE(r.ok()) << b.env << "=" << b.value << " was accepted";
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status().message(), b.env + ": " + b.message);
  }
}

class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    char name[] = "/tmp/ferry_options_test_XXXXXX";
    int fd = ::mkstemp(name);
    EXPECT_GE(fd, 0);
    path_ = name;
    EXPECT_EQ(::write(fd, contents.data(), contents.size()), static_cast<ssize_t>(contents.size()));
    ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Options, AuthTokenFromFile) {
  for (const std::string& contents : {std::string("s3cret\n"), std::string("s3cret\r\n"), std::string("s3cret")}) {
    TempFile f(contents);
    EnvGuard env;
    env.set("FERRY_AUTH_TOKEN_FILE", f.path());
    auto r = apply_environment(Options{});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->auth_token, "s3cret");
  }
}

TEST(Options, UnreadableAuthTokenFileIsAnError) {
  EnvGuard env;
  env.set("FERRY_AUTH_TOKEN_FILE", "/nonexistent/ferry/token");
  auto r = apply_environment(Options{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("FERRY_AUTH_TOKEN_FILE"), std::string::npos);
}

TEST(Options, DescribeTunablesListsEveryVariableOnce) {
  Options o;
  o.streams = 5;
  o.auth_token = "do-not-print";
  auto list = describe_tunables(o);
  std::multiset<std::string> envs, names;
  for (const auto& t : list) {
    envs.insert(t.env);
    names.insert(t.name);
    EXPECT_FALSE(t.doc.empty()) << t.env;
    EXPECT_EQ(t.env.rfind("FERRY_", 0), 0u) << t.env;
    EXPECT_EQ(t.value.find("do-not-print"), std::string::npos) << "secret leaked by " << t.env;
  }
  for (const auto& e : kTunableEnvs) EXPECT_EQ(envs.count(e), 1u) << e;
  EXPECT_EQ(envs.size(), kTunableEnvs.size());
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << "duplicate names";

  auto m = values_by_env(o);
  EXPECT_EQ(m["FERRY_STREAMS"], "5");
  EXPECT_EQ(m["FERRY_AUTH_TOKEN"], "(set)");
  for (const auto& t : list) {
    if (t.env == "FERRY_STREAMS") {
      EXPECT_EQ(t.default_value, "0");
    }
    if (t.env == "FERRY_CHUNK") {
      EXPECT_EQ(t.default_value, "524288");
      EXPECT_EQ(t.unit, "bytes");
    }
    if (t.env == "FERRY_LOG") {
      EXPECT_EQ(t.default_value, "warn");
    }
    if (t.env == "FERRY_AUTH_TOKEN") {
      EXPECT_EQ(t.default_value, "(unset)");
    }
  }
}

// FERRY_LOG takes a level in any case; anything else is one error naming the
// variable, the value and every accepted level.
TEST(Options, LogLevelInAnyCase) {
  for (const char* v : {"INFO", "Info", "info", "iNfO"}) {
    EnvGuard env;
    env.set("FERRY_LOG", v);
    auto r = apply_environment(Options{});
    ASSERT_TRUE(r.ok()) << v << ": " << r.status().to_string();
    EXPECT_EQ(r->log_level, LogLevel::kInfo) << v;
  }
  EnvGuard env;
  env.set("FERRY_LOG", "verbose");
  auto r = apply_environment(Options{});
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("FERRY_LOG"), std::string::npos) << m;
  EXPECT_NE(m.find("\"verbose\""), std::string::npos) << m;
  for (const char* level : {"error", "warn", "info", "debug", "trace"}) {
    EXPECT_NE(m.find(level), std::string::npos) << level << " missing from: " << m;
  }
  EXPECT_EQ(parse_log_level("TRACE").value(), LogLevel::kTrace);
  EXPECT_EQ(parse_log_level("Warn").value(), LogLevel::kWarn);
  EXPECT_EQ(parse_log_level("warning").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(to_string(LogLevel::kDebug), "debug");
}

// A FERRY_* variable that ferry does not read (a typo) is named, so that
// `ferry config` and the engine's log can say so; real ones, the variables
// read outside the tunables and the test suites' FERRY_TEST_* are not.
TEST(Options, UnknownFerryVariablesAreListed) {
  EnvGuard env;
  ::setenv("FERRY_STREAMZ", "4", 1);
  ::setenv("FERRY_ZZZ_TYPO", "", 1);
  env.set("FERRY_STREAMS", "4");
  env.set("FERRY_AUTH_TOKEN_FILE", "/nonexistent");
  ::setenv("FERRY_TEST_SOMETHING", "1", 1);
  std::vector<std::string> unknown = unknown_environment();
  ::unsetenv("FERRY_STREAMZ");
  ::unsetenv("FERRY_ZZZ_TYPO");
  ::unsetenv("FERRY_TEST_SOMETHING");
  EXPECT_EQ(unknown, (std::vector<std::string>{"FERRY_STREAMZ", "FERRY_ZZZ_TYPO"}));
  EXPECT_TRUE(unknown_environment().empty());
}

TEST(Options, AutoStreamsAreHalfTheCpusFromTwoToSixteen) {
  EXPECT_EQ(auto_streams(1), 2);
  EXPECT_EQ(auto_streams(2), 2);
  EXPECT_EQ(auto_streams(5), 2);
  EXPECT_EQ(auto_streams(6), 3);
  EXPECT_EQ(auto_streams(32), 16);
  EXPECT_EQ(auto_streams(192), 16);
}

}  // namespace
}  // namespace ferry
