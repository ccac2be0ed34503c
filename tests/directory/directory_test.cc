// The directory against real servers: redis-server and etcd from Debian,
// started here on loopback with random ports and temporary data directories
// (each case skips, saying why, when its server is not installed). Every
// case runs on both. Data is random and checked end to end; every wait has
// a deadline; TTLs are short (1 s) so the suite stays quick.
#include <gtest/gtest.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <thread>

#include "core/pattern.h"
#include "directory/backend.h"
#include "directory/entry.h"
#include "directory/processes.h"
#include "ferry/ferry.h"
#include "platform/crypto.h"
#include "platform/thread.h"

using namespace std::chrono_literals;

namespace ferry {
namespace {

using test::DirectoryServer;
using testing::ChildProcess;
using Kind = DirectoryServer::Kind;

constexpr auto kTtl = 1000ms;

std::string unique(const std::string& base) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "-%08x", static_cast<unsigned>(platform::random_u64()));
  return base + buf;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class DirectoryServers : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    std::string prog = DirectoryServer::program(GetParam());
    if (prog.empty()) {
      GTEST_SKIP() << (GetParam() == Kind::kRedis ? "redis-server" : "etcd")
                   << " is not installed (Debian: redis-server, etcd-server; scripts/setup.sh installs them)";
    }
    server_ = std::make_unique<DirectoryServer>(GetParam());
    ASSERT_TRUE(server_->start()) << "the directory server did not answer within 15 s";
    ns_ = unique("ns");
  }

  std::string url() const { return server_->url(ns_); }

  Options options(const std::string& name) const {
    Options o;
    o.directory = url();
    o.name = name;
    o.directory_ttl = kTtl;
    o.transport = TransportChoice::kTcp;
    return o;
  }

  std::unique_ptr<Engine> engine(const std::string& name, Options o) {
    auto e = Engine::create(std::move(o));
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  std::unique_ptr<Engine> engine(const std::string& name) { return engine(name, options(name)); }

  // Polls lookup(name) until `pred` holds for its result or `within` passes.
  template <typename Pred>
  bool eventually(Directory& dir, const std::string& name, std::chrono::milliseconds within, Pred pred) {
    auto deadline = Clock::now() + within;
    while (Clock::now() < deadline) {
      if (pred(dir.lookup(name, after(500ms)))) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // A peer process publishing `name`; its READY line gives engine id and incarnation.
  struct Peer {
    ChildProcess child;
    uint64_t engine_id = 0;
    uint64_t incarnation = 0;
  };
  Peer spawn_peer(const std::string& name, const std::string& transport = "tcp") {
    Peer p;
    p.child = ChildProcess::start_ready({FERRY_DIRECTORY_PEER, url(), name, std::to_string(kTtl.count()), transport});
    unsigned long long id = 0, inc = 0;
    EXPECT_EQ(std::sscanf(p.child.line().c_str(), "READY %llx %llu", &id, &inc), 2) << p.child.line();
    p.engine_id = id;
    p.incarnation = inc;
    return p;
  }

  void restart_case(const std::string& transport);

  std::unique_ptr<DirectoryServer> server_;
  std::string ns_;
};

// Sends `n` random bytes over `c` to an echo peer and checks what comes back.
void echo_verified(Connection& c, Engine& e, size_t n, uint64_t seed) {
  std::vector<uint8_t> out(n), in(n + 7);
  core::fill_random(out.data(), n, seed);
  auto r1 = e.reg(out.data(), out.size());
  auto r2 = e.reg(in.data(), in.size());
  ASSERT_TRUE(r1.ok() && r2.ok());
  ASSERT_TRUE(c.send(out.data(), n, after(20s)).ok());
  auto got = c.recv(in.data(), in.size(), after(20s));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got.value(), n);
  EXPECT_EQ(core::fnv1a(in.data(), n), core::fnv1a(out.data(), n));
  (void)e.dereg(r1.value());
  (void)e.dereg(r2.value());
}

TEST_P(DirectoryServers, PublishLookupListAndWatch) {
  auto a = engine("alpha");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->name(), "alpha");
  EXPECT_GT(a->incarnation(), 0u);
  auto e = a->lookup("alpha", after(2s));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->engine_id, a->id());
  EXPECT_EQ(e->incarnation, a->incarnation());
  EXPECT_EQ(e->addresses, std::vector<std::string>{a->address()});
  EXPECT_EQ(e->pid, ::getpid());
  EXPECT_FALSE(e->host_id.empty());
  // The blob an entry stands for is the engine's own.
  EXPECT_EQ(e->metadata(), a->metadata());

  auto nobody = a->lookup("nobody", after(2s));
  EXPECT_EQ(nobody.status().code(), Code::kNotFound) << nobody.status().to_string();

  auto watch = a->directory()->watch();
  auto first = watch->poll(after(2s));
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].kind, DirectoryEvent::Kind::kAppeared);

  auto b = engine("beta");
  ASSERT_NE(b, nullptr);
  auto ev = watch->next(after(5s), 20ms);
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->size(), 1u);
  EXPECT_EQ((*ev)[0].kind, DirectoryEvent::Kind::kAppeared);
  EXPECT_EQ((*ev)[0].entry.name, "beta");
  EXPECT_EQ((*ev)[0].entry.engine_id, b->id());

  auto listing = a->list(after(2s));
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->entries.size(), 2u);
  EXPECT_EQ(listing->entries[0].name, "alpha");
  EXPECT_EQ(listing->entries[1].name, "beta");
  EXPECT_TRUE(listing->malformed.empty());

  // A clean shutdown deletes the entry at once, not after the TTL.
  auto t0 = Clock::now();
  b.reset();
  ev = watch->next(after(5s), 20ms);
  double vanished = seconds_since(t0);
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->size(), 1u);
  EXPECT_EQ((*ev)[0].kind, DirectoryEvent::Kind::kVanished);
  EXPECT_EQ((*ev)[0].entry.name, "beta");
  EXPECT_LT(vanished, 0.5 * kTtl.count() / 1000.0 + 0.2);
  // A listing long after: the entry stays published while its engine lives.
  std::this_thread::sleep_for(kTtl * 2);
  EXPECT_TRUE(a->lookup("alpha", after(2s)).ok());
}

TEST_P(DirectoryServers, ConnectByNameMovesVerifiedBytes) {
  auto server = engine("decode-3");
  auto client = engine("prefill-0");
  ASSERT_TRUE(server && client);
  std::thread echo([&] {
    auto c = server->accept(after(10s));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    std::vector<uint8_t> buf(9 << 20);
    auto r = server->reg(buf.data(), buf.size());
    for (int i = 0; i < 3; ++i) {
      auto n = c.value()->recv(buf.data(), buf.size(), after(20s));
      ASSERT_TRUE(n.ok()) << n.status().to_string();
      ASSERT_TRUE(c.value()->send(buf.data(), n.value(), after(20s)).ok());
    }
    (void)server->dereg(r.value());
  });
  auto c = client->connect("decode-3", after(5s));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value()->peer_engine_id(), server->id());
  echo_verified(*c.value(), *client, 1, 1);
  echo_verified(*c.value(), *client, 65537, 2);
  echo_verified(*c.value(), *client, (8 << 20) + 13, 3);
  echo.join();
  // host:port and the blob still work beside names.
  EXPECT_TRUE(client->connect(server->address(), after(5s)).ok());
  EXPECT_EQ(client->connect("no-such-engine", after(2s)).status().code(), Code::kNotFound);
}

TEST_P(DirectoryServers, AKilledEngineVanishesWithinTheTtlAndItsPeerSeesPeerLost) {
  auto client = engine("watcher");
  ASSERT_NE(client, nullptr);
  Peer victim = spawn_peer("victim");
  ASSERT_NE(victim.engine_id, 0u);
  auto c = client->connect("victim", after(5s));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  echo_verified(*c.value(), *client, 1 << 20, 7);
  std::vector<uint8_t> buf(4096);
  auto r = client->reg(buf.data(), buf.size());
  Transfer pending = c.value()->recv_async(buf.data(), buf.size());

  auto t0 = Clock::now();
  victim.child.kill_now();  // SIGKILL: no goodbye, no delete
  Status s = pending.wait(after(10s));
  EXPECT_EQ(s.code(), Code::kPeerLost) << s.to_string();
  double lost = seconds_since(t0);
  bool gone = eventually(*client->directory(), "victim", kTtl + 1500ms,
                         [](const Result<DirectoryEntry>& e) { return e.status().code() == Code::kNotFound; });
  double vanished = seconds_since(t0);
  EXPECT_TRUE(gone);
  EXPECT_LT(vanished, kTtl.count() / 1000.0 + 1.0) << "TTL " << kTtl.count() << " ms";
  std::printf("[ measured ] %s: peer_lost after %.3f s, entry gone %.3f s after SIGKILL (ttl %.1f s)\n",
              GetParam() == Kind::kRedis ? "redis" : "etcd", lost, vanished, kTtl.count() / 1000.0);
  (void)client->dereg(r.value());
}

// A restart under the same name, with the old engine frozen (SIGSTOP) rather
// than dead: its sockets stay open and heartbeats would take a minute to
// notice, so only the directory's incarnation check can end the old
// connection in time.
void DirectoryServers::restart_case(const std::string& transport) {
  Options o = options("client");
  o.transport = parse_transport(transport).value();
  o.peer_timeout = 60s;  // only the directory can tell in time
  auto client = engine("client", o);
  ASSERT_NE(client, nullptr);
  Peer old_peer = spawn_peer("svc", transport);
  auto c = client->connect("svc", after(5s));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  echo_verified(*c.value(), *client, 300000, 11);
  std::vector<uint8_t> buf(4096);
  auto r = client->reg(buf.data(), buf.size());
  Transfer pending = c.value()->recv_async(buf.data(), buf.size());

  old_peer.child.signal(SIGSTOP);
  auto t0 = Clock::now();
  Peer new_peer = spawn_peer("svc", transport);
  ASSERT_NE(new_peer.engine_id, old_peer.engine_id);
  EXPECT_GT(new_peer.incarnation, old_peer.incarnation);
  Status s = pending.wait(after(10s));
  double lost = seconds_since(t0);
  EXPECT_EQ(s.code(), Code::kPeerLost) << s.to_string();
  EXPECT_NE(s.message().find("restarted"), std::string::npos) << s.to_string();
  EXPECT_LT(lost, 3.0);
  EXPECT_EQ(c.value()->health().code(), Code::kPeerLost);
  EXPECT_EQ(c.value()->transport_name(), transport);
  std::printf("[ measured ] %s, %s: connection to the old incarnation failed %.3f s after the new one started\n",
              GetParam() == Kind::kRedis ? "redis" : "etcd", transport.c_str(), lost);

  auto c2 = client->connect("svc", after(5s));
  ASSERT_TRUE(c2.ok()) << c2.status().to_string();
  EXPECT_EQ(c2.value()->peer_engine_id(), new_peer.engine_id);
  echo_verified(*c2.value(), *client, (2 << 20) + 5, 12);
  (void)client->dereg(r.value());
  old_peer.child.kill_now();
}

TEST_P(DirectoryServers, ARestartUnderTheSameNameEndsTheOldConnectionAndIsReachedByNameTcp) { restart_case("tcp"); }

TEST_P(DirectoryServers, ARestartUnderTheSameNameEndsTheOldConnectionAndIsReachedByNameLocal) { restart_case("local"); }

TEST_P(DirectoryServers, AStaleEntryIsRefusedAfterTheHandshake) {
  auto live = engine("live");
  auto client = engine("client");
  ASSERT_TRUE(live && client);
  // An entry naming an engine that is no longer at its address (a port
  // reused by another engine): the one that answers is not the one named.
  auto u = directory::parse_directory_url(url()).value();
  auto raw = directory::make_backend(u);
  DirectoryEntry ghost = live->lookup("live", after(2s)).value();
  ghost.name = "ghost";
  ghost.engine_id ^= 1;
  ASSERT_TRUE(
      raw->put_with_ttl(directory::entry_key(u.ns, "ghost"), directory::encode_entry(ghost), 60s, after(2s)).ok());
  auto c = client->connect("ghost", after(5s));
  EXPECT_EQ(c.status().code(), Code::kUnavailable) << c.status().to_string();
  EXPECT_NE(c.status().message().find("stale"), std::string::npos) << c.status().to_string();
}

TEST_P(DirectoryServers, EntriesHoldNoSecretAndSkipNoHandshake) {
  const std::string token = "s3cret-token-0f9e8d7c";
  Options so = options("secure");
  so.auth_token = token;
  auto secure = engine("secure", so);
  ASSERT_NE(secure, nullptr);
  auto u = directory::parse_directory_url(url()).value();
  auto raw = directory::make_backend(u);
  auto value = raw->get(directory::entry_key(u.ns, "secure"), 1 << 20, after(2s));
  ASSERT_TRUE(value.ok() && value->has_value());
  EXPECT_EQ(value->value().find(token), std::string::npos);
  EXPECT_EQ(value->value().find("s3cret"), std::string::npos);
  // Knowing the name and the entry gets an engine without the token nowhere.
  auto intruder = engine("intruder");
  ASSERT_NE(intruder, nullptr);
  auto c = intruder->connect("secure", after(5s));
  EXPECT_EQ(c.status().code(), Code::kUnauthenticated) << c.status().to_string();
  Options fo = options("friend");
  fo.auth_token = token;
  auto friendly = engine("friend", fo);
  ASSERT_NE(friendly, nullptr);
  EXPECT_TRUE(friendly->connect("secure", after(5s)).ok());
}

// Whoever can write the directory (no token needed) writes an entry that
// claims a newer incarnation of "svc" for an engine of its own, without the
// token. Before it ends anything it is verified by a dial (engine ids are
// proven in the handshake, and the forger lacks the token): the client's
// authenticated connection to the real engine lives on, and the real engine
// publishes its own entry again.
TEST_P(DirectoryServers, AForgedNewerIncarnationEndsNothingAndTheRealEngineKeepsItsName) {
  const std::string token = "t0ken-7d6c5b4a";
  Options so = options("svc");
  so.auth_token = token;
  auto real = engine("svc", so);
  Options co = options("client");
  co.auth_token = token;
  auto client = engine("client", co);
  auto forger = engine("forger");
  ASSERT_TRUE(real && client && forger);
  auto c = client->connect("svc", after(5s));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto u = directory::parse_directory_url(url()).value();
  auto raw = directory::make_backend(u);
  DirectoryEntry forged = real->lookup("svc", after(2s)).value();
  forged.engine_id = forger->id();
  forged.incarnation += 1000;
  forged.addresses = {forger->address()};
  ASSERT_TRUE(raw->put_with_ttl(directory::entry_key(u.ns, "svc"), directory::encode_entry(forged), 60s, after(2s)).ok());
  // Several of the client's checks and the real engine's refreshes.
  std::this_thread::sleep_for(kTtl);
  EXPECT_TRUE((*c)->health().ok()) << "a forged entry ended a live connection: " << (*c)->health().to_string();
  auto dirr = Directory::open(url());
  ASSERT_TRUE(dirr.ok());
  EXPECT_TRUE(eventually(*dirr.value(), "svc", 5000ms,
                         [&](const Result<DirectoryEntry>& e) { return e.ok() && e->engine_id == real->id(); }))
      << "the real engine did not take its name back";
}

TEST_P(DirectoryServers, TwoLiveEnginesUnderOneNameTheNewerKeepsIt) {
  auto first = engine("dup");
  ASSERT_NE(first, nullptr);
  auto second = engine("dup");
  ASSERT_NE(second, nullptr);
  EXPECT_GT(second->incarnation(), first->incarnation());
  // The older one must not take the name back on its next refreshes.
  std::this_thread::sleep_for(kTtl);
  auto e = second->lookup("dup", after(2s));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->engine_id, second->id());
  // Nor delete it when it shuts down.
  first.reset();
  e = second->lookup("dup", after(2s));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->engine_id, second->id());
}

TEST_P(DirectoryServers, ADirectoryThatGoesDownAndComesBack) {
  auto server = engine("srv");
  auto client = engine("cli");
  ASSERT_TRUE(server && client);
  std::atomic<bool> served{false};
  std::thread echo([&] {
    auto c = server->accept(after(10s));
    ASSERT_TRUE(c.ok());
    std::vector<uint8_t> buf(33 << 20);
    auto r = server->reg(buf.data(), buf.size());
    for (int i = 0; i < 2; ++i) {
      auto n = c.value()->recv(buf.data(), buf.size(), after(30s));
      ASSERT_TRUE(n.ok()) << n.status().to_string();
      ASSERT_TRUE(c.value()->send(buf.data(), n.value(), after(30s)).ok());
    }
    (void)server->dereg(r.value());
    served = true;
  });
  auto c = client->connect("srv", after(5s));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  echo_verified(*c.value(), *client, 4096, 21);

  auto u = directory::parse_directory_url(url()).value();
  auto raw = directory::make_backend(u);
  ASSERT_TRUE(raw->put("t/marker", "before", after(2s)).ok());
  server_->kill();
  // Connections made keep working, a large transfer included.
  echo_verified(*c.value(), *client, (32 << 20) + 3, 22);
  echo.join();
  EXPECT_TRUE(served);
  // Lookups fail with kUnavailable within their deadline.
  auto t0 = Clock::now();
  auto e = client->lookup("srv", after(300ms));
  EXPECT_EQ(e.status().code(), Code::kUnavailable) << e.status().to_string();
  EXPECT_LT(seconds_since(t0), 0.7);  // a 0.3 s deadline, with room for a busy host
  t0 = Clock::now();
  auto c2 = client->connect("srv", after(300ms));
  EXPECT_EQ(c2.status().code(), Code::kUnavailable) << c2.status().to_string();
  EXPECT_LT(seconds_since(t0), 0.7);  // a 0.3 s deadline, with room for a busy host

  // Down for longer than a refresh period: the publishers fail, back off
  // and keep trying.
  std::this_thread::sleep_for(kTtl);
  // Back, and empty: both engines publish themselves again.
  ASSERT_TRUE(server_->start(/*wipe=*/true));
  t0 = Clock::now();
  auto marker = raw->get("t/marker", 100, after(2s));
  ASSERT_TRUE(marker.ok()) << marker.status().to_string();
  EXPECT_FALSE(marker->has_value()) << "the server did not restart empty";
  for (const char* name : {"srv", "cli"}) {
    EXPECT_TRUE(eventually(*client->directory(), name, 8s, [](const Result<DirectoryEntry>& r) { return r.ok(); }))
        << name << " did not come back";
  }
  std::printf("[ measured ] %s: entries back %.3f s after the directory restarted empty\n",
              GetParam() == Kind::kRedis ? "redis" : "etcd", seconds_since(t0));
  auto c3 = client->connect("srv", after(5s));
  EXPECT_TRUE(c3.ok()) << c3.status().to_string();
}

TEST_P(DirectoryServers, ADirectoryThatHangsDoesNotHangTheEngine) {
  auto a = engine("hang");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(server_->freeze()) << "the directory server did not stop within 2 s";
  auto t0 = Clock::now();
  auto e = a->lookup("hang", after(300ms));
  double looked = seconds_since(t0);
  EXPECT_EQ(e.status().code(), Code::kUnavailable) << e.status().to_string();
  EXPECT_LT(looked, 0.7);  // a 0.3 s deadline, with room for a busy host
  // Nor its shutdown (the refresh under way and the delete are bounded).
  t0 = Clock::now();
  a.reset();
  double shut = seconds_since(t0);
  EXPECT_LT(shut, 2.0);
  std::printf("[ measured ] %s hung: lookup with a 0.3 s deadline returned after %.3f s; engine shut down in %.3f s\n",
              GetParam() == Kind::kRedis ? "redis" : "etcd", looked, shut);
  server_->stop_signal(SIGCONT);
}

TEST_P(DirectoryServers, MalformedEntriesAreClearErrors) {
  auto dirr = Directory::open(url());
  ASSERT_TRUE(dirr.ok());
  auto& dir = *dirr.value();
  auto u = directory::parse_directory_url(url()).value();
  auto raw = directory::make_backend(u);
  auto key = [&](const std::string& n) { return directory::entry_key(u.ns, n); };
  DirectoryEntry good;
  good.name = "good";
  good.engine_id = 0x1234;
  good.incarnation = 5;
  good.host_id = "h";
  good.addresses = {"127.0.0.1:9"};
  ASSERT_TRUE(raw->put(key("good"), directory::encode_entry(good), after(2s)).ok());
  DirectoryEntry other = good;
  other.name = "someone-else";
  std::string nested(3000, '[');
  std::vector<std::pair<std::string, std::string>> bad = {
      {"notjson", "hello"},
      {"empty", ""},
      {"huge", std::string(20000, ' ') + "{}"},
      {"nested", nested},
      {"array", "[1,2]"},
      {"badutf8", std::string("{\"ferry\":1,\"name\":\"badutf8\",\"host\":\"\xff\xfe\"}")},
      {"wrongname", directory::encode_entry(other)},
      {"badaddr", R"({"ferry":1,"name":"badaddr","engine":"0000000000001234","incarnation":1,"host":"h",)"
                  R"("addresses":["nohost"],"pid":1,"started_unix_ms":1})"},
      {"badengine", R"({"ferry":1,"name":"badengine","engine":"xyz","incarnation":1,"host":"h",)"
                    R"("addresses":["127.0.0.1:9"],"pid":1,"started_unix_ms":1})"},
      {"version2", R"({"ferry":2})"},
  };
  for (auto& [n, v] : bad) ASSERT_TRUE(raw->put(key(n), v, after(2s)).ok()) << n;
  for (auto& [n, v] : bad) {
    auto e = dir.lookup(n, after(2s));
    EXPECT_EQ(e.status().code(), Code::kDataLoss) << n << ": " << e.status().to_string();
    EXPECT_NE(e.status().message().find(key(n)), std::string::npos) << e.status().to_string();
  }
  auto listing = dir.list(after(2s));
  ASSERT_TRUE(listing.ok()) << listing.status().to_string();
  ASSERT_EQ(listing->entries.size(), 1u);
  EXPECT_EQ(listing->entries[0].name, "good");
  EXPECT_EQ(listing->malformed.size(), bad.size());
  // connect() by a malformed name is the same error, not a dial.
  auto a = engine("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->connect("notjson", after(2s)).status().code(), Code::kDataLoss);
  // A name that is not one is refused before the directory is asked.
  EXPECT_EQ(dir.lookup("a/b", after(2s)).status().code(), Code::kInvalidArgument);
}

TEST_P(DirectoryServers, AThousandEntriesListInUnderASecond) {
  auto u = directory::parse_directory_url(url()).value();
  auto raw = directory::make_backend(u);
  std::vector<std::string> names;
  for (int i = 0; i < 1000; ++i) {
    DirectoryEntry e;
    e.name = "worker-" + std::to_string(i);
    e.engine_id = platform::random_u64();
    e.incarnation = 1 + i;
    e.host_id = "host-" + std::to_string(i % 16) + "/0123456789abcdef";
    e.addresses = {"10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":7000",
                   "10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":7000"};
    e.pid = 1000 + i;
    e.started_unix_ms = 1700000000000;
    ASSERT_TRUE(raw->put_with_ttl(directory::entry_key(u.ns, e.name), directory::encode_entry(e), 60s, after(5s)).ok());
  }
  auto dir = Directory::open(url()).value();
  auto t0 = Clock::now();
  auto listing = dir->list(after(5s));
  double took = seconds_since(t0);
  ASSERT_TRUE(listing.ok()) << listing.status().to_string();
  EXPECT_EQ(listing->entries.size(), 1000u);
  EXPECT_TRUE(listing->malformed.empty());
  EXPECT_LT(took, 1.0);
  std::printf("[ measured ] %s: 1000 entries listed in %.3f s\n", GetParam() == Kind::kRedis ? "redis" : "etcd", took);
}

// Entries as large as an entry may be (64 addresses of 228 bytes, about
// 14.8 KB each) until the namespace holds more than a listing may: listing
// them must fail with resource_exhausted naming the bound, in a process whose
// peak memory grows by less than the bound and a margin for one batch of
// replies and the allocator.
TEST_P(DirectoryServers, AListingHoldsNoMoreThanItsBound) {
  auto u = directory::parse_directory_url(url()).value();
  constexpr int kEntries = 4500;  // about 67 MB as stored, 82 MB decoded
  constexpr int kWriters = 8;     // etcd commits each put on its own: in parallel, they share commits
  auto t0 = Clock::now();
  std::atomic<int> written{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      auto raw = directory::make_backend(u);
      for (int i = w; i < kEntries; i += kWriters) {
        DirectoryEntry e;
        e.name = "big-" + std::to_string(i);
        e.engine_id = platform::random_u64();
        e.incarnation = 1;
        e.host_id = "host/" + std::to_string(i);
        for (int a = 0; a < 64; ++a)
          e.addresses.push_back(std::string(222, 'a') + "-" + std::to_string(i % 1000) + ":7000");
        std::string value = directory::encode_entry(e);
        if (value.size() > Directory::kMaxEntryBytes) return;
        if (!raw->put(directory::entry_key(u.ns, e.name), value, after(10s)).ok()) return;
        written.fetch_add(1);
      }
    });
  }
  for (auto& t : writers) t.join();
  ASSERT_EQ(written.load(), kEntries) << "the entries could not all be written";
  double wrote = seconds_since(t0);
  ChildProcess lister = ChildProcess::start_ready({FERRY_DIRECTORY_PEER, "--list", url()}, 60s);
  const std::string& line = lister.line();
  size_t at = line.rfind(" hwm_kib ");
  ASSERT_NE(at, std::string::npos) << "the lister said: " << line;
  long before = 0, after_kib = 0;
  ASSERT_EQ(std::sscanf(line.c_str() + at, " hwm_kib %ld %ld", &before, &after_kib), 2) << line;
  double grew_mib = static_cast<double>(after_kib - before) / 1024;
  std::string result = line.substr(0, at);
  std::printf("[ measured ] %s: %d entries of 14.8 KB written in %.1f s; listing: %s; peak memory grew %.0f MiB\n",
              GetParam() == Kind::kRedis ? "redis" : "etcd", kEntries, wrote, result.c_str(), grew_mib);
  constexpr double kBoundMiB = static_cast<double>(Directory::kMaxListingBytes) / (1 << 20);
  EXPECT_EQ(result.rfind("FAILED resource_exhausted", 0), 0u) << result;
  EXPECT_NE(result.find(std::to_string(Directory::kMaxListingBytes >> 20) + " MiB"), std::string::npos) << result;
  EXPECT_LT(grew_mib, kBoundMiB + 32) << "a listing held more than its bound of " << kBoundMiB << " MiB";
}

TEST_P(DirectoryServers, AKeepAliveThreadThatCannotStartFailsCreationNotTheProcess) {
  platform::set_thread_start_fault([](std::string_view name) { return name == "ferry-directory"; });
  auto e = Engine::create(options("nothread"));
  platform::set_thread_start_fault(nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kResourceExhausted) << e.status().to_string();
  EXPECT_NE(e.status().message().find("ferry-directory"), std::string::npos) << e.status().to_string();
  // And it left no entry behind.
  auto dir = Directory::open(url()).value();
  EXPECT_EQ(dir->lookup("nothread", after(2s)).status().code(), Code::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Servers, DirectoryServers, ::testing::Values(Kind::kRedis, Kind::kEtcd),
                         [](const ::testing::TestParamInfo<Kind>& i) {
                           return std::string(i.param == Kind::kRedis ? "redis" : "etcd");
                         });

}  // namespace
}  // namespace ferry
