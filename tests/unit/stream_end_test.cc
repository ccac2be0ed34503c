// How recv_all reports the end of a TCP stream over loopback: a peer's
// orderly close reads as kClosedByPeer; an aborted stream whose error another
// call already took (the data path's sender takes TCP_USER_TIMEOUT's
// ETIMEDOUT while its reader waits) reads as kAbortedStream, not as a close;
// and the StreamEnd a caller decides on says which.
#include "platform/socket.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace ferry::platform {
namespace {

struct Pair {
  Socket client;
  int server = -1;  // accepted end
  ~Pair() {
    if (server >= 0) ::close(server);
  }
};

void connect_pair(Pair& p) {
  auto listener = listen_tcp(HostPort{"127.0.0.1", 0});
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  auto port = local_port(listener.value());
  ASSERT_TRUE(port.ok());
  auto client = connect_tcp(HostPort{"127.0.0.1", port.value()}, Clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(client.ok()) << client.status().message();
  p.client = std::move(client.value());
  p.server = ::accept(listener.value().fd(), nullptr, nullptr);
  ASSERT_GE(p.server, 0);
}

// Waits (at most 5 s) until the client socket has something to report.
void await_readable(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1) << "nothing arrived within 5 s";
}

TEST(StreamEnd, APeersCloseIsAnOrderlyEnd) {
  Pair p;
  connect_pair(p);
  ::close(p.server);
  p.server = -1;
  await_readable(p.client.fd());
  char byte = 0;
  StreamEnd end = StreamEnd::kError;
  Status s = recv_exact(p.client.fd(), &byte, 1, &end);
  EXPECT_EQ(s.code(), Code::kPeerLost);
  EXPECT_EQ(s.message(), kClosedByPeer);
  EXPECT_EQ(end, StreamEnd::kClosedInOrder);
}

TEST(StreamEnd, AnAbortWhoseErrorWasTakenIsNotAClose) {
  Pair p;
  connect_pair(p);
  linger hard{1, 0};  // close with a reset
  ASSERT_EQ(::setsockopt(p.server, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard)), 0);
  ::close(p.server);
  p.server = -1;
  await_readable(p.client.fd());
  // Another thread's call takes the error first, as the sender's send()
  // takes ETIMEDOUT when TCP_USER_TIMEOUT expires.
  int err = 0;
  socklen_t len = sizeof(err);
  ASSERT_EQ(::getsockopt(p.client.fd(), SOL_SOCKET, SO_ERROR, &err, &len), 0);
  ASSERT_EQ(err, ECONNRESET);
  char byte = 0;
  StreamEnd end = StreamEnd::kClosedInOrder;
  Status s = recv_exact(p.client.fd(), &byte, 1, &end);
  EXPECT_EQ(s.code(), Code::kPeerLost);
  EXPECT_EQ(s.message(), kAbortedStream);
  EXPECT_EQ(end, StreamEnd::kAborted);
}

TEST(StreamEnd, AResetIsAnError) {
  Pair p;
  connect_pair(p);
  linger hard{1, 0};  // close with a reset, and let the read take its error
  ASSERT_EQ(::setsockopt(p.server, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard)), 0);
  ::close(p.server);
  p.server = -1;
  await_readable(p.client.fd());
  char byte = 0;
  StreamEnd end = StreamEnd::kClosedInOrder;
  Status s = recv_exact(p.client.fd(), &byte, 1, &end);
  EXPECT_EQ(s.code(), Code::kPeerLost);
  EXPECT_EQ(end, StreamEnd::kError);
}

}  // namespace
}  // namespace ferry::platform
