// Local channel setup over the authenticated control stream.
#include "transport/local/local_handshake.h"

#include <unistd.h>

#include "platform/crypto.h"
#include "transport/local/cross_memory.h"
#include "transport/local/local_connection.h"
#include "transport/tcp/handshake_io.h"

namespace ferry::local {
namespace {
// Each direction's ring. Control messages are small (span lists, eager
// messages up to inline_max); 4 MiB holds hundreds in flight.
constexpr size_t kRingBytes = 4u << 20;

wire::EncodedFrame rejected(Code code, const std::string& why) { return wire::encode(wire::Rejected{code, why}); }
}  // namespace

Result<std::shared_ptr<ConnectionBase>> connect_local(const std::shared_ptr<core::EngineContext>& ctx, uint64_t id,
                                                      uint64_t peer_engine, platform::Socket control,
                                                      Deadline deadline) {
  uint64_t nonce = platform::random_u64();
  FERRY_ASSIGN_OR_RETURN(ShmChannel channel, ShmChannel::create(kRingBytes, nonce));
  wire::EncodedFrame setup;
  setup.header.type = wire::FrameType::kLocalSetup;
  setup.header.a = static_cast<uint64_t>(::getpid());
  setup.header.b = static_cast<uint64_t>(channel.fd());
  setup.header.c = nonce;
  FERRY_RETURN_IF_ERROR(tcp::write_handshake_frame(control.fd(), setup, deadline));
  FERRY_ASSIGN_OR_RETURN(tcp::RawFrame reply, tcp::read_handshake_frame(control.fd(), deadline));
  if (reply.header.type == wire::FrameType::kRejected) {
    FERRY_ASSIGN_OR_RETURN(wire::Rejected r, wire::decode_rejected(reply.header, reply.aux));
    return Status(r.code, "the peer could not attach the local channel: " + r.message);
  }
  if (reply.header.type != wire::FrameType::kLocalReady || reply.header.a == 0) {
    return Status(Code::kDataLoss, "expected LOCAL_READY, got " + std::string(wire::frame_type_name(reply.header.type)));
  }
  LocalPeer peer{peer_engine, static_cast<pid_t>(reply.header.a), platform::peer_name(control.fd())};
  auto conn = std::make_shared<LocalConnection>(ctx, id, std::move(peer), std::move(control), std::move(channel));
  conn->start();
  return std::shared_ptr<ConnectionBase>(std::move(conn));
}

Result<std::shared_ptr<ConnectionBase>> accept_local(const std::shared_ptr<core::EngineContext>& ctx, uint64_t id,
                                                     uint64_t peer_engine, platform::Socket control,
                                                     Deadline deadline) {
  int fd = control.fd();
  FERRY_ASSIGN_OR_RETURN(tcp::RawFrame setup, tcp::read_handshake_frame(fd, deadline));
  if (setup.header.type != wire::FrameType::kLocalSetup || setup.header.a == 0 || setup.header.a > INT32_MAX ||
      setup.header.b > INT32_MAX) {
    std::string why = "expected LOCAL_SETUP, got " + std::string(wire::frame_type_name(setup.header.type));
    (void)tcp::write_handshake_frame(fd, rejected(Code::kDataLoss, why), deadline);
    return Status(Code::kDataLoss, why);
  }
  auto pid = static_cast<pid_t>(setup.header.a);
  auto channel_fd = fetch_peer_fd(pid, static_cast<int>(setup.header.b));
  Result<ShmChannel> channel = channel_fd.ok() ? ShmChannel::attach(*channel_fd, setup.header.c)
                                               : Result<ShmChannel>(channel_fd.status());
  if (!channel.ok()) {
    (void)tcp::write_handshake_frame(fd, rejected(channel.status().code(), channel.status().message()), deadline);
    return channel.status();
  }
  wire::EncodedFrame ready;
  ready.header.type = wire::FrameType::kLocalReady;
  ready.header.a = static_cast<uint64_t>(::getpid());
  FERRY_RETURN_IF_ERROR(tcp::write_handshake_frame(fd, ready, deadline));
  LocalPeer peer{peer_engine, pid, platform::peer_name(fd)};
  auto conn = std::make_shared<LocalConnection>(ctx, id, std::move(peer), std::move(control), std::move(channel).value());
  conn->start();
  return std::shared_ptr<ConnectionBase>(std::move(conn));
}

}  // namespace ferry::local
