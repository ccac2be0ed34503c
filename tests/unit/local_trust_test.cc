// The local transport against a hostile peer on the same host: what it can
// write into the shared channel, the file it hands over, and who it claims
// to be. Each test plays the peer by hand and checks the engine's side
// neither trusts nor crashes on what it is given.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "engine_pair.h"
#include "ferry/ferry.h"
#include "process_holdings.h"
#include "squatted_rendezvous.h"
#include "transport/local/copy_pool.h"
#include "transport/local/peer_proof.h"
#include "transport/local/shm_channel.h"

namespace ferry::local {
namespace {

using namespace std::chrono_literals;
using ferry::testing::thread_count;

constexpr size_t kRing = 4096;

// The peer's own view of the channel: a writable mapping of the whole file.
struct PeerMapping {
  explicit PeerMapping(int fd) {
    struct stat st {};
    EXPECT_EQ(::fstat(fd, &st), 0);
    bytes = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    base = static_cast<uint8_t*>(p);
  }
  ~PeerMapping() { ::munmap(base, bytes); }
  void put_u64(size_t at, uint64_t v) { std::memcpy(base + at, &v, 8); }
  uint8_t* base = nullptr;
  size_t bytes = 0;
};

ShmChannel attach_copy(const ShmChannel& c, uint64_t nonce) {
  auto p = ShmChannel::attach(::dup(c.fd()), nonce);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return std::move(p).value();
}

// A copy of a genuine channel's bytes in a new memfd of `size` bytes, sealed
// with `seals` (0: none): what a peer may hand over instead of a channel.
int forged_file(const ShmChannel& genuine, size_t size, int seals) {
  int fd = static_cast<int>(::syscall(SYS_memfd_create, "forged", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
  std::vector<uint8_t> head(512);
  EXPECT_EQ(::pread(genuine.fd(), head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  EXPECT_EQ(::pwrite(fd, head.data(), std::min(head.size(), size), 0),
            static_cast<ssize_t>(std::min(head.size(), size)));
  if (seals != 0) {
    EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, seals), 0);
  }
  return fd;
}

// The producer's head is its own: a peer that rewrites the shared copy so
// that a wrap marker would land at the ring's last two bytes (and two bytes
// past it, into the other ring) moves no write; the next message goes where
// the real head is and arrives intact.
TEST(LocalTrust, AForgedProducerHeadMovesNoWrite) {
  auto a = ShmChannel::create(kRing, 5).value();
  ShmChannel b = attach_copy(a, 5);
  ASSERT_TRUE(a.try_post("first!!!", ""));
  std::string got;
  ASSERT_TRUE(b.receive(got).value());
  PeerMapping peer(a.fd());
  uint8_t* other_ring = peer.base + a.data_offset(1);
  std::memset(other_ring, 0xab, 8);
  peer.put_u64(ShmChannel::head_offset(0), 2 * kRing - 2);
  ASSERT_TRUE(a.try_post("hello", ""));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(other_ring[i], 0xab) << "byte " << i << " of the other ring was written";
  ASSERT_TRUE(b.receive(got).value());
  EXPECT_EQ(got, "hello");
}

// A consumer tail ahead of what was published (or a whole ring behind) is
// garbage, not room: nothing is posted over unread messages, and the
// channel reports the peer broken.
TEST(LocalTrust, AForgedConsumerTailIsGarbageNotRoom) {
  for (uint64_t forged : {uint64_t{1} << 40, uint64_t{kRing} * 3}) {
    auto a = ShmChannel::create(kRing, 6).value();
    ShmChannel b = attach_copy(a, 6);
    PeerMapping peer(a.fd());
    ASSERT_TRUE(a.try_post("unread", ""));
    peer.put_u64(ShmChannel::tail_offset(0), forged);
    EXPECT_FALSE(a.try_post(std::string(3000, 'x'), "")) << "tail " << forged;
    std::string got;
    Result<bool> r = a.receive(got);
    ASSERT_FALSE(r.ok()) << "tail " << forged;
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
  }
}

// The consumer's tail is its own too: a peer that rewinds the shared copy
// cannot make a message be read twice.
TEST(LocalTrust, ARewoundConsumerTailReadsNothingTwice) {
  auto a = ShmChannel::create(kRing, 7).value();
  ShmChannel b = attach_copy(a, 7);
  ASSERT_TRUE(a.try_post("once", ""));
  std::string got;
  ASSERT_TRUE(b.receive(got).value());
  PeerMapping peer(a.fd());
  peer.put_u64(ShmChannel::tail_offset(0), 0);
  Result<bool> again = b.receive(got);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again.value());
}

// The file a peer hands over must be sealed against resizing and exactly the
// size its header announces; otherwise the peer could shrink it under the
// mapping and every later access would kill the engine with SIGBUS.
TEST(LocalTrust, OnlyASealedFileOfTheAnnouncedSizeIsMapped) {
  auto genuine = ShmChannel::create(kRing, 8).value();
  struct stat st {};
  ASSERT_EQ(::fstat(genuine.fd(), &st), 0);
  size_t size = static_cast<size_t>(st.st_size);
  const int seals = F_SEAL_SHRINK | F_SEAL_GROW;

  auto unsealed = ShmChannel::attach(forged_file(genuine, size, 0), 8);
  ASSERT_FALSE(unsealed.ok());
  EXPECT_EQ(unsealed.status().code(), Code::kPermissionDenied) << unsealed.status().to_string();
  EXPECT_NE(unsealed.status().message().find("sealed"), std::string::npos);

  auto shrink_only = ShmChannel::attach(forged_file(genuine, size, F_SEAL_GROW), 8);
  EXPECT_FALSE(shrink_only.ok());

  auto short_file = ShmChannel::attach(forged_file(genuine, size / 2, seals), 8);
  ASSERT_FALSE(short_file.ok());
  EXPECT_EQ(short_file.status().code(), Code::kDataLoss) << short_file.status().to_string();
  EXPECT_NE(short_file.status().message().find("announces"), std::string::npos);

  auto long_file = ShmChannel::attach(forged_file(genuine, size + 4096, seals), 8);
  EXPECT_FALSE(long_file.ok());

  auto right = ShmChannel::attach(forged_file(genuine, size, seals), 8);
  EXPECT_TRUE(right.ok()) << right.status().to_string();

  // The channel this side makes cannot be shrunk by the peer that gets it.
  EXPECT_NE(::ftruncate(genuine.fd(), 0), 0);
  EXPECT_EQ(errno, EPERM);
}

// The rendezvous of this very process: the kernel says the peer is this
// process, and each end refuses it (an engine never becomes its own peer)
// unless two engines of one process were allowed.
TEST(LocalTrust, APeerThatIsThisProcessIsRefusedByEitherEnd) {
  auto channel = ShmChannel::create(kRing, 9).value();
  const PeerPolicy strict{false, false}, lenient{false, true};
  struct Case {
    PeerPolicy owner, fetcher;
  };
  for (const Case& c : {Case{lenient, strict}, Case{strict, lenient}, Case{lenient, lenient}}) {
    auto listener = RendezvousListener::open();
    ASSERT_TRUE(listener.ok()) << listener.status().to_string();
    int control[2];
    ASSERT_EQ(::pipe(control), 0);
    Result<PeerCredentials> handed = Status();
    std::thread owner([&] { handed = listener->hand_over(channel.fd(), control[0], c.owner, after(5s)); });
    Result<ReceivedChannel> got = fetch_channel(listener->name(), listener->ticket(), -1, c.fetcher, after(5s));
    // A fetcher that refused never presents the ticket; the owner would
    // wait for the deadline, so the control stream "answers" instead.
    if (!got.ok()) ::close(control[1]);
    owner.join();
    ::close(control[0]);
    if (got.ok()) ::close(control[1]);
    if (!c.fetcher.same_process) {
      ASSERT_FALSE(got.ok());
      EXPECT_EQ(got.status().code(), Code::kPermissionDenied);
      EXPECT_NE(got.status().message().find("this very process"), std::string::npos) << got.status().to_string();
      EXPECT_FALSE(handed.ok());
    } else if (!c.owner.same_process) {
      ASSERT_FALSE(handed.ok());
      EXPECT_EQ(handed.status().code(), Code::kPermissionDenied) << handed.status().to_string();
      EXPECT_FALSE(got.ok()) << "the owner refused, yet a descriptor arrived";
    } else {
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      ASSERT_TRUE(handed.ok()) << handed.status().to_string();
      EXPECT_EQ(handed->pid, ::getpid());
      EXPECT_EQ(got->peer.pid, ::getpid());
      struct stat mine {
      }, theirs{};
      ASSERT_EQ(::fstat(channel.fd(), &mine), 0);
      ASSERT_EQ(::fstat(got->fd, &theirs), 0);
      EXPECT_EQ(mine.st_ino, theirs.st_ino);
      ::close(got->fd);
    }
  }
  EXPECT_EQ(check_peer({::getpid(), ::geteuid()}, {}).code(), Code::kPermissionDenied);
  EXPECT_EQ(check_peer({::getpid() + 1, ::geteuid() + 1}, {}).code(), Code::kPermissionDenied);
  EXPECT_TRUE(check_peer({::getpid() + 1, ::geteuid() + 1}, {true, false}).ok());
  EXPECT_TRUE(check_peer({::getpid() + 1, ::geteuid()}, {}).ok());
}

// An unprivileged local user (uid 65534) that connects to an engine of
// another uid gets no local channel: asked for the local transport it is
// refused with a reason that names both uids, and under "auto" it ends up on
// TCP. The peer runs as its own process: this binary, re-executed as that
// user, running only the test below.
TEST(LocalTrust, AnotherUidGetsNoLocalChannel) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to start a peer as another uid";
  Options o;
  o.transport = TransportChoice::kAuto;
  auto engine = Engine::create(o).value();
  // The build tree may be closed to other users: the peer runs from a copy
  // that uid 65534 can read and execute.
  char dir[] = "/tmp/ferry-uid-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  ASSERT_EQ(::chmod(dir, 0755), 0);
  std::string exe = std::string(dir) + "/peer";
  {
    std::ifstream in("/proc/self/exe", std::ios::binary);
    std::ofstream out(exe, std::ios::binary);
    out << in.rdbuf();
    ASSERT_TRUE(out.good());
  }
  ASSERT_EQ(::chmod(exe.c_str(), 0755), 0);
  struct Cleanup {
    std::string exe, dir;
    ~Cleanup() {
      ::unlink(exe.c_str());
      ::rmdir(dir.c_str());
    }
  } cleanup{exe, dir};
  std::string target = "FERRY_TEST_TARGET=" + engine->address();
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(90);
    const char* argv[] = {exe.c_str(), "--gtest_filter=LocalTrustPeer.ConnectsAsAnotherUid", nullptr};
    const char* envp[] = {target.c_str(), nullptr};
    ::execve(exe.c_str(), const_cast<char* const*>(argv), const_cast<char* const*>(envp));
    _exit(91);
  }
  ASSERT_GT(child, 0);
  // The peer's connections: one refused on the local transport, one on TCP.
  auto accepted = engine->accept(after(20s));
  int status = 0;
  auto until = Clock::now() + 30s;
  while (::waitpid(child, &status, WNOHANG) == 0 && Clock::now() < until) std::this_thread::sleep_for(10ms);
  if (Clock::now() >= until) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "the peer did not finish in time";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the peer's expectations failed (90/91: it could not start)";
  ASSERT_TRUE(accepted.ok()) << accepted.status().to_string();
  EXPECT_EQ((*accepted)->transport_name(), "tcp");
}

// The peer side of the test above; skipped unless that test started it.
TEST(LocalTrustPeer, ConnectsAsAnotherUid) {
  const char* target = std::getenv("FERRY_TEST_TARGET");
  if (target == nullptr) GTEST_SKIP() << "runs only as the peer of LocalTrust.AnotherUidGetsNoLocalChannel";
  ASSERT_NE(::geteuid(), 0u);
  Options local;
  local.transport = TransportChoice::kLocal;
  auto engine = Engine::create(local).value();
  auto refused = engine->connect(target, after(10s));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kPermissionDenied) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("uid 65534"), std::string::npos) << refused.status().to_string();
  Options automatic;
  automatic.transport = TransportChoice::kAuto;
  auto e2 = Engine::create(automatic).value();
  auto tcp = e2->connect(target, after(10s));
  ASSERT_TRUE(tcp.ok()) << tcp.status().to_string();
  EXPECT_EQ((*tcp)->transport_name(), "tcp");
  EXPECT_TRUE((*tcp)->notify("over tcp", after(5s)).ok());
}

// Anyone can read a rendezvous name in /proc/net/unix and connect; without
// the ticket it gets no descriptor, and the real peer still does.
TEST(LocalTrust, AProberWithoutTheTicketGetsNoChannel) {
  auto channel = ShmChannel::create(kRing, 10).value();
  PeerPolicy policy{false, true};
  auto listener = RendezvousListener::open();
  ASSERT_TRUE(listener.ok());
  int control[2];
  ASSERT_EQ(::pipe(control), 0);
  Result<PeerCredentials> handed = Status();
  std::thread owner([&] { handed = listener->hand_over(channel.fd(), control[0], policy, after(10s)); });

  int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, listener->name().data(), listener->name().size());
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + listener->name().size());
  ASSERT_EQ(::connect(probe, reinterpret_cast<sockaddr*>(&addr), len), 0);
  Ticket wrong = listener->ticket();
  wrong[3] ^= 1;
  ASSERT_EQ(::send(probe, wrong.data(), wrong.size(), MSG_NOSIGNAL), static_cast<ssize_t>(wrong.size()));
  // The owner drops the prober: end of stream, and no descriptor with it.
  char byte;
  alignas(cmsghdr) char cm[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&byte, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cm;
  msg.msg_controllen = sizeof(cm);
  timeval tv{5, 0};
  ::setsockopt(probe, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  EXPECT_EQ(::recvmsg(probe, &msg, 0), 0);
  EXPECT_EQ(msg.msg_controllen, 0u);
  ::close(probe);

  Result<ReceivedChannel> got = fetch_channel(listener->name(), listener->ticket(), -1, policy, after(5s));
  owner.join();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_TRUE(handed.ok()) << handed.status().to_string();
  ::close(got->fd);
  ::close(control[0]);
  ::close(control[1]);
}

// A local user who took a rendezvous name first (abstract names belong to
// whoever binds them) and keeps its backlog full: a blocking connect would
// wait without limit, pinning the handshake thread past handshake_timeout.
// The fetch gives up by its deadline.
TEST(LocalTrust, ARendezvousWhoseBacklogIsKeptFullIsGivenUpByTheDeadline) {
  const std::string name = "ferry-local-0123456789abcdef0123456789abcd00";
  testing::SquattedRendezvous squat(name);
  ASSERT_TRUE(squat.ok()) << std::strerror(errno);
  auto fetched = std::async(std::launch::async, [&] {
    return fetch_channel(name, Ticket{}, -1, PeerPolicy{false, true}, after(1s)).status();
  });
  const bool returned = fetched.wait_for(5s) == std::future_status::ready;
  squat.release();  // unblocks a connect that waits (the bug), so the test ends either way
  ASSERT_TRUE(returned) << "fetch_channel waited past its deadline on a full backlog";
  Status s = fetched.get();
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.to_string();
}

// Peers that connect on the local transport and hang up, while the
// application holds every connection it accepted: each failed connection
// gives its admission and its thread back at once (as a failed TCP one
// does), so twice max_connections of them come and go and honest peers are
// still admitted.
TEST(LocalTrust, ConnectionsThatHungUpGiveTheirAdmissionBackWhileHeld) {
  Options o;
  o.transport = TransportChoice::kLocal;
  o.local_same_process = true;
  o.max_connections = 4;
  o.max_connections_per_peer = 4;
  auto target = Engine::create(o).value();
  Options d = o;
  d.max_connections = 64;
  d.max_connections_per_peer = 64;
  auto dialer = Engine::create(d).value();
  std::vector<std::shared_ptr<Connection>> held;
  const size_t threads_before = thread_count();
  for (int i = 0; i < 2 * o.max_connections; ++i) {
    Result<std::shared_ptr<Connection>> c = Status(Code::kUnavailable, "not tried");
    const Deadline until = after(5s);
    while (Clock::now() < until) {
      c = dialer->connect(target->address(), after(2s));
      if (c.ok()) break;
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_TRUE(c.ok()) << "connection " << i << " (max_connections " << o.max_connections
                        << ") was refused: " << c.status().to_string();
    auto accepted = target->accept(after(5s));
    ASSERT_TRUE(accepted.ok()) << accepted.status().to_string();
    held.push_back(*accepted);
    (*c)->close();
    const Deadline down = after(5s);
    while (held.back()->health().ok() && Clock::now() < down) std::this_thread::sleep_for(5ms);
    ASSERT_FALSE(held.back()->health().ok()) << "the hang-up was not noticed";
  }
  // The held connections keep no thread of their own once the engine saw
  // them fail (a heartbeat tick or two). Each engine's progress worker and
  // copy helpers started with its first connection and serve all of them.
  const size_t workers = 2 * (1 + CopyPool::default_size());
  const Deadline settled = after(5s);
  while (thread_count() > threads_before + workers + 1 && Clock::now() < settled) std::this_thread::sleep_for(20ms);
  EXPECT_LE(thread_count(), threads_before + workers + 1)
      << "failed connections the application holds keep their threads";
  for (auto& c : held) EXPECT_FALSE(c->health().ok());
}

// A LOCAL_SETUP names only a rendezvous of the form this engine makes, so a
// peer cannot point the engine at another program's abstract socket.
TEST(LocalTrust, OnlyRendezvousNamesOfTheEnginesFormAreDialed) {
  EXPECT_TRUE(valid_rendezvous_name("ferry-local-0123456789abcdef0123456789abcdef"));
  for (const char* bad : {"", "ferry-local-", "ferry-local-0123456789abcdef0123456789abcdeF",
                          "ferry-local-0123456789abcdef0123456789abcde", "/tmp/.X11-unix/X0",
                          "ferry-local-0123456789abcdef0123456789abcdef0"}) {
    EXPECT_FALSE(valid_rendezvous_name(bad)) << bad;
    auto r = fetch_channel(bad, Ticket{}, -1, {}, after(1s));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << bad;
  }
}

// Two engines of one process: the kernel says the peer is this process and
// the handshake proves another engine id, so they use the local transport
// with no opt-in and nothing is logged as refused. An engine that dials
// itself is refused on the local transport (auto falls back to TCP).
TEST(LocalTrust, TwoEnginesOfOneProcessUseTheLocalTransportAnEngineNotItself) {
  for (std::string transport : {"auto", "local"}) {
    Options o;
    o.transport = parse_transport(transport).value();
    auto a = Engine::create(o).value();
    auto b = Engine::create(o).value();
    std::thread t([&] { (void)b->accept(after(5s)); });
    auto c = a->connect(b->address(), after(5s));
    t.join();
    ASSERT_TRUE(c.ok()) << transport << ": " << c.status().to_string();
    EXPECT_EQ((*c)->transport_name(), "local") << transport;
    auto self = a->connect(a->address(), after(5s));
    if (transport == "auto") {
      ASSERT_TRUE(self.ok()) << self.status().to_string();
      EXPECT_EQ((*self)->transport_name(), "tcp");
    } else {
      ASSERT_FALSE(self.ok());
      EXPECT_EQ(self.status().code(), Code::kPermissionDenied) << self.status().to_string();
      EXPECT_NE(self.status().message().find("this very process"), std::string::npos) << self.status().to_string();
    }
  }
}

// A peer that sends message after message nobody receives grows what the
// engine holds only up to connection_memory_bytes: past it the connection
// fails with kResourceExhausted, saying why, and what arrived before the
// budget ran out is intact.
TEST(LocalTrust, UnreceivedMessagesPastTheBudgetFailTheConnection) {
  Options o;
  o.connection_memory_bytes = 1u << 20;
  EnginePair p = connect_pair("local", o);
  ASSERT_TRUE(p.ca && p.cb);
  const size_t each = 32 * 1024 + 3;
  std::vector<uint8_t> src(each), dst(each);
  for (size_t i = 0; i < each; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  ASSERT_TRUE(p.a->reg(src.data(), src.size()).ok());
  ASSERT_TRUE(p.b->reg(dst.data(), dst.size()).ok());
  std::vector<Transfer> sends;
  for (int i = 0; i < 20; ++i) sends.push_back(p.ca->send_async(src.data(), each));
  ASSERT_TRUE(p.cb->recv(dst.data(), dst.size(), after(5s)).ok());
  EXPECT_EQ(src, dst);
  for (int i = 0; i < 40; ++i) sends.push_back(p.ca->send_async(src.data(), each));
  auto until = Clock::now() + 10s;
  while (p.cb->health().ok() && Clock::now() < until) std::this_thread::sleep_for(5ms);
  Status h = p.cb->health();
  ASSERT_FALSE(h.ok()) << "60 unreceived messages of 32 KiB and a 1 MiB budget, yet the connection holds them all";
  EXPECT_EQ(h.code(), Code::kResourceExhausted) << h.to_string();
  EXPECT_NE(h.message().find("connection_memory_bytes"), std::string::npos) << h.to_string();
  for (auto& t : sends) (void)t.wait(after(10s));
}

}  // namespace
}  // namespace ferry::local
