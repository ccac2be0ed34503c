// What a hostile peer can make a TCP engine hold: connections, handshakes,
// data streams and descriptors are capped, a thread that cannot start fails
// one handshake (or, for the engine's own workers, the engine's creation)
// instead of the process, and a connection that failed gives its
// descriptors back.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <random>

#include "hostile_peer.h"
#include "platform/thread.h"

namespace ferry::hostile {
namespace {

Status dial(const std::string& address, int streams, Peer& p) { return p.dial(address, streams); }

// Each new peer is refused, with `code` and a message naming `limit`, while
// the ones before hold what it would need.
void expect_refused(const std::string& address, int streams, Code code, const std::string& limit) {
  Peer p;
  Status s = p.dial(address, streams);
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(limit), std::string::npos) << s.to_string();
}

TEST(TcpHostileLimits, AskingForMoreStreamsThanTheEngineHoldsIsRefused) {
  Options o = Target::options();
  o.max_streams = 4;
  auto engine = Engine::create(o).value();
  expect_refused(engine->address(), 5, Code::kResourceExhausted, "max_streams");
  Peer three;
  ASSERT_TRUE(dial(engine->address(), 3, three).ok());
  expect_refused(engine->address(), 2, Code::kResourceExhausted, "max_streams");
  Peer one;
  ASSERT_TRUE(dial(engine->address(), 1, one).ok());
  // A connection that ends gives its streams back.
  three.hang_up();
  EXPECT_TRUE(eventually([&] { return Peer().dial(engine->address(), 3).ok(); }, after(5s)));
}

// The engine's own side of max_streams: a connection with an automatic
// stream count takes what is left (at least one), a chosen count is all or
// nothing. Each target admits no more streams than the dialer should open.
TEST(TcpHostileLimits, AnAutomaticStreamCountTakesWhatMaxStreamsLeaves) {
  Options mine = Target::options();
  mine.max_streams = 3;
  ASSERT_EQ(mine.streams, kAutoStreams);
  auto dialer = Engine::create(mine).value();
  auto target = [](int max_streams) {
    Options o = Target::options();
    o.max_streams = max_streams;
    return Engine::create(o).value();
  };
  const int first = std::min(auto_streams(platform::usable_cpu_count()), 3);
  auto t1 = target(first);
  auto c1 = dialer->connect(t1->address(), after(5s));
  ASSERT_TRUE(c1.ok()) << c1.status().to_string();
  // Bytes still travel over the streams it got.
  auto in = t1->accept(after(5s));
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  std::vector<char> a((3 << 20) + 13), b(a.size() + 1, 0);
  std::mt19937 rng(std::random_device{}());
  for (char& c : a) c = static_cast<char>(rng());
  ASSERT_TRUE(dialer->reg(a.data(), a.size()).ok());
  ASSERT_TRUE(t1->reg(b.data(), b.size()).ok());
  Transfer r = (*in)->recv_async(b.data(), b.size());
  Status sent = (*c1)->send_async(a.data(), a.size()).wait(after(10s));
  ASSERT_TRUE(sent.ok()) << sent.to_string();
  Status got = r.wait(after(10s));
  ASSERT_TRUE(got.ok()) << got.to_string();
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()));
  std::vector<std::unique_ptr<Engine>> targets;
  if (first < 3) {
    targets.push_back(target(3 - first));
    auto c2 = dialer->connect(targets.back()->address(), after(5s));
    ASSERT_TRUE(c2.ok()) << c2.status().to_string();
  }
  targets.push_back(target(64));
  auto refused = dialer->connect(targets.back()->address(), after(5s));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kResourceExhausted) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("max_streams"), std::string::npos) << refused.status().to_string();

  // A chosen count is not cut down.
  mine.streams = 2;
  auto chosen = Engine::create(mine).value();
  auto t3 = target(64);
  ASSERT_TRUE(chosen->connect(t3->address(), after(5s)).ok());
  auto second = chosen->connect(t3->address(), after(5s));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("max_streams"), std::string::npos) << second.status().to_string();
}

TEST(TcpHostileLimits, ConnectionsPastMaxConnectionsAreRefusedUntilOneEnds) {
  Options o = Target::options();
  o.max_connections = 2;
  auto engine = Engine::create(o).value();
  Peer a, b;
  ASSERT_TRUE(dial(engine->address(), 1, a).ok());
  ASSERT_TRUE(dial(engine->address(), 1, b).ok());
  // Neither was accepted by the application: waiting in the accept queue counts.
  expect_refused(engine->address(), 1, Code::kResourceExhausted, "max_connections");
  a.hang_up();
  EXPECT_TRUE(eventually([&] { return Peer().dial(engine->address(), 1).ok(); }, after(5s)));
  // The connection that failed while queued is not handed to the application.
  auto first = engine->accept(after(2s));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_TRUE((*first)->health().ok()) << (*first)->health().to_string();
}

TEST(TcpHostileLimits, ConnectionsFromOnePeerAddressAreCapped) {
  Options o = Target::options();
  o.max_connections_per_peer = 2;
  auto engine = Engine::create(o).value();
  Peer a, b;
  ASSERT_TRUE(dial(engine->address(), 1, a).ok());
  ASSERT_TRUE(dial(engine->address(), 1, b).ok());
  expect_refused(engine->address(), 1, Code::kResourceExhausted, "max_connections_per_peer");
  b.hang_up();
  EXPECT_TRUE(eventually([&] { return Peer().dial(engine->address(), 1).ok(); }, after(5s)));
}

// Streams that connect and say nothing hold a handshake each until
// handshake_timeout; past max_handshakes of them, a new stream is closed
// without a byte read or written, and the engine serves peers again once
// the silent ones are gone.
TEST(TcpHostileLimits, StreamsPastMaxHandshakesAreClosedUnread) {
  Options o = Target::options();
  o.max_handshakes = 2;
  o.handshake_timeout = 30s;
  auto engine = Engine::create(o).value();
  auto hp = platform::parse_host_port(engine->address()).value();
  std::vector<platform::Socket> silent;
  for (int i = 0; i < 2; ++i) silent.push_back(platform::connect_tcp(hp, after(5s)).value());
  auto late = platform::connect_tcp(hp, after(5s)).value();
  wire::Hello hello;
  hello.engine_id = Peer::kEngineId;
  hello.host_id = "hostile-peer";
  (void)bootstrap::write_handshake_frame(late.fd(), wire::encode(hello), after(5s));
  auto answer = bootstrap::read_handshake_frame(late.fd(), after(5s));
  EXPECT_FALSE(answer.ok()) << "a stream past max_handshakes was answered (frame type "
                            << static_cast<int>(answer.ok() ? answer->header.type : wire::FrameType{}) << ")";
  EXPECT_NE(answer.status().code(), Code::kDeadlineExceeded) << "a stream past max_handshakes was left open";
  silent.clear();
  EXPECT_TRUE(eventually([&] { return Peer().dial(engine->address(), 1).ok(); }, after(5s)));
}

// One address opens far more silent streams than max_handshakes: it gets at
// most half of the handshakes, the rest of its streams are closed unread
// without holding up anyone else's, and a peer in another address group
// (loopback answers every 127/8 address; groups are /24s) completes its
// handshake at once. Once the silent streams are gone, the first address is
// served again, a connection of more data streams than its share included
// (they wait their turn).
TEST(TcpHostileLimits, OnePeerAddressHoldsAtMostHalfOfTheHandshakes) {
  Options o = Target::options();
  o.max_handshakes = 4;
  o.handshake_timeout = 30s;
  auto engine = Engine::create(o).value();
  auto hp = platform::parse_host_port(engine->address()).value();
  std::vector<platform::Socket> silent;
  for (int i = 0; i < 24; ++i) silent.push_back(platform::connect_tcp(hp, after(5s), "127.0.0.1").value());
  Peer other;
  auto start = Clock::now();
  Status s = other.dial(engine->address(), 2, after(2s), "127.0.1.2");
  EXPECT_TRUE(s.ok()) << "a peer at another address was locked out: " << s.to_string();
  EXPECT_LT(Clock::now() - start, 1s) << "the streams of one address held up another's handshake";
  auto closed = [&] {
    int n = 0;
    for (const platform::Socket& q : silent) {
      char c;
      ssize_t r = ::recv(q.fd(), &c, 1, MSG_DONTWAIT);
      n += r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
    return n;
  };
  EXPECT_TRUE(eventually([&] { return closed() >= 22; }, after(5s)))
      << "more than half of max_handshakes held by one address (" << closed() << " of 24 closed)";
  silent.clear();
  EXPECT_TRUE(eventually([&] { return Peer().dial(engine->address(), 8, after(1s), "127.0.0.1").ok(); }, after(5s)))
      << "the first address is not served after its silent streams closed";
}

// Silent streams from two address groups fill every handshake slot (each
// group its half) and keep coming; before, honest handshakes from a third
// group got 0 of 20 through. A new stream cuts off the oldest stream still
// silent, of the group holding the most, so honest peers get in; silent
// streams are closed once their HELLO is overdue anyway.
TEST(TcpHostileLimits, SilentStreamsOfTwoGroupsLockNobodyOut) {
  Options o = Target::options();
  o.max_handshakes = 4;
  o.handshake_timeout = 30s;
  auto engine = Engine::create(o).value();
  auto hp = platform::parse_host_port(engine->address()).value();
  std::atomic<bool> stop{false};
  // Each flooder keeps 12 silent streams open, reopening what is closed.
  auto flood = [&](const char* from) {
    std::vector<platform::Socket> silent;
    while (!stop.load()) {
      std::erase_if(silent, [](const platform::Socket& q) {
        char c;
        ssize_t r = ::recv(q.fd(), &c, 1, MSG_DONTWAIT);
        return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
      });
      while (silent.size() < 12) {
        auto q = platform::connect_tcp(hp, after(1s), from);
        if (!q.ok()) break;
        silent.push_back(std::move(q).value());
      }
      std::this_thread::sleep_for(5ms);
    }
  };
  std::thread a(flood, "127.0.0.1"), b(flood, "127.0.2.1");
  std::this_thread::sleep_for(300ms);
  int honest = 0;
  for (int i = 0; i < 20; ++i) {
    Peer p;
    honest += p.dial(engine->address(), 1, after(2s), "127.0.3.1").ok();
  }
  stop = true;
  a.join();
  b.join();
  EXPECT_GE(honest, 18) << "honest handshakes got " << honest << " of 20 through two groups' silent streams";
}

// A stream that sends no complete HELLO is closed once kHelloWait (1 s)
// passed, whatever handshake_timeout says.
TEST(TcpHostileLimits, AStreamWithoutAHelloIsClosedAfterASecond) {
  Options o = Target::options();
  o.handshake_timeout = 30s;
  auto engine = Engine::create(o).value();
  auto hp = platform::parse_host_port(engine->address()).value();
  auto quiet = platform::connect_tcp(hp, after(5s)).value();
  auto half = platform::connect_tcp(hp, after(5s)).value();
  char some[10] = {};
  ASSERT_EQ(::send(half.fd(), some, sizeof some, MSG_NOSIGNAL), 10);  // a HELLO cut short
  const auto start = Clock::now();
  EXPECT_TRUE(closed_by_engine(quiet.fd(), after(5s)));
  EXPECT_TRUE(closed_by_engine(half.fd(), after(5s)));
  EXPECT_LT(Clock::now() - start, 3s) << "a stream without a HELLO was held past the HELLO wait";
}

// A handshake thread that cannot start (the process or user is out of
// threads) fails that connection on whichever side it happens; the process
// goes on and the next connection works. (A connection starts no thread of
// its own: its streams run on the engine's workers.)
TEST(TcpHostileLimits, AThreadThatCannotStartFailsOneConnectionNotTheProcess) {
  Options o = Target::options();
  o.streams = 2;
  auto target = Engine::create(o).value();
  auto dialer = Engine::create(o).value();
  for (const char* which : {"ferry-hs-"}) {
    SCOPED_TRACE(which);
    platform::set_thread_start_fault([which](std::string_view name) { return name.find(which) != name.npos; });
    auto c = dialer->connect(target->address(), after(5s));
    platform::set_thread_start_fault(nullptr);
    ASSERT_FALSE(c.ok());
    if (std::string_view(which) != "ferry-hs-") {
      EXPECT_EQ(c.status().code(), Code::kResourceExhausted) << c.status().to_string();
      EXPECT_NE(c.status().message().find("thread"), std::string::npos) << c.status().to_string();
    }
    auto again = dialer->connect(target->address(), after(5s));
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    (*again)->close();
  }
}

// The engine's data plane starts with the engine: a worker the kernel
// refuses fails the engine's creation with a status that names the thread,
// and the process goes on.
TEST(TcpHostileLimits, ADataPlaneWorkerThatCannotStartFailsTheEngineNotTheProcess) {
  for (const char* which : {"ferry-rx-", "ferry-tx-"}) {
    SCOPED_TRACE(which);
    platform::set_thread_start_fault([which](std::string_view name) { return name.find(which) != name.npos; });
    auto e = Engine::create(Target::options());
    platform::set_thread_start_fault(nullptr);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), Code::kResourceExhausted) << e.status().to_string();
    EXPECT_NE(e.status().message().find(which), std::string::npos) << e.status().to_string();
  }
  auto again = Engine::create(Target::options());
  EXPECT_TRUE(again.ok()) << again.status().to_string();
}

// ---- in a process of its own, under lowered limits ------------------------------------

// An engine in a forked child under `limit`, for as long as the test needs
// it; the child reports whether it ended in order.
class LimitedEngine {
 public:
  // `as_other_user`: the child also drops to a uid of its own, that nothing
  // else on the host runs as (RLIMIT_NPROC binds no root process, and
  // counts every process of the user).
  LimitedEngine(int resource, rlim_t limit, bool as_other_user, Options o) {
    int addr[2], done[2];
    if (::pipe2(addr, O_CLOEXEC) != 0 || ::pipe2(done, O_CLOEXEC) != 0) return;
    const uid_t uid = 61000 + static_cast<uid_t>(::getpid() % 4000);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(addr[0]);
      ::close(done[1]);
      rlimit r{limit, limit};
      if (::setrlimit(resource, &r) != 0) ::_exit(3);
      if (as_other_user && (::setgid(uid) != 0 || ::setuid(uid) != 0)) ::_exit(4);
      {
        auto e = Engine::create(o);
        if (!e.ok()) ::_exit(5);
        std::string a = (*e)->address() + "\n";
        if (::write(addr[1], a.data(), a.size()) != static_cast<ssize_t>(a.size())) ::_exit(6);
        char c;
        (void)::read(done[0], &c, 1);  // until the test is done (or gone)
      }
      ::_exit(0);
    }
    ::close(addr[1]);
    ::close(done[0]);
    done_ = done[1];
    char c;
    while (::read(addr[0], &c, 1) == 1 && c != '\n') address_ += c;
    ::close(addr[0]);
  }

  ~LimitedEngine() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (done_ >= 0) ::close(done_);
  }

  const std::string& address() const { return address_; }

  // Tells the child to end and returns its wait status (-1: it did not end
  // within 10 s and was killed).
  int finish() {
    if (pid_ <= 0) return -1;
    if (done_ >= 0) ::close(done_);
    done_ = -1;
    int status = 0;
    auto until = after(10s);
    while (Clock::now() < until) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return status;
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int done_ = -1;
  bool reaped_ = false;
  std::string address_;
};

// Connections of 8 streams against an engine whose user may run 40
// threads: a connection costs the engine no thread (its streams are served
// by the engine's workers), so all of them are served, the engine does not
// abort, and once they are gone a modest peer connects. (With threads of
// their own, 18 a connection, most were refused.)
TEST(TcpHostileLimits, RunningOutOfThreadsDoesNotKillTheEngine) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the engine as another user under RLIMIT_NPROC";
  Options o = Target::options();
  o.handshake_timeout = 1s;  // streams whose handshake thread could not start are not waited for long
  LimitedEngine child(RLIMIT_NPROC, 40, /*as_other_user=*/true, o);
  if (child.address().empty()) {
    int status = child.finish();
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 4) GTEST_SKIP() << "cannot change uid here";
    FAIL() << "the engine did not start (wait status " << status << ")";
  }
  {
    std::vector<Peer> greedy(6);
    int refused = 0;
    for (Peer& p : greedy) refused += !p.dial(child.address(), 8, after(2s)).ok();
    EXPECT_EQ(refused, 0);
  }
  EXPECT_TRUE(eventually([&] { return Peer().dial(child.address(), 1).ok(); }, after(5s)))
      << "no peer is served after the greedy ones left";
  int status = child.finish();
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the engine's process ended with wait status " << status;
}

// Peers that connect and hang up, again and again, against an engine whose
// application accepts nobody and which may hold 64 descriptors: each dead
// connection gives its descriptors back, so an honest peer still connects.
TEST(TcpHostileLimits, ConnectionsThatHangUpGiveTheirDescriptorsBack) {
  LimitedEngine child(RLIMIT_NOFILE, 64, /*as_other_user=*/false, Target::options());
  ASSERT_FALSE(child.address().empty()) << "the engine did not start";
  for (int i = 0; i < 60; ++i) {
    Peer p;
    (void)p.dial(child.address(), 2, after(2s));
    p.hang_up();
  }
  EXPECT_TRUE(eventually([&] { return Peer().dial(child.address(), 1, after(1s)).ok(); }, after(5s)))
      << "an honest peer could not connect after others hung up";
  int status = child.finish();
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the engine's process ended with wait status " << status;
}

}  // namespace
}  // namespace ferry::hostile
