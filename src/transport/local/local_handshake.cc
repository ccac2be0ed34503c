// Local channel setup over the authenticated control stream.
#include "transport/local/local_handshake.h"

#include <unistd.h>

#include <cstring>

#include "platform/crypto.h"
#include "transport/local/local_transport.h"
#include "transport/local/peer_proof.h"
#include "transport/handshake_io.h"
#include "wire/local_messages.h"

namespace ferry::local {
namespace {
// Each direction's ring. Control messages are small (span lists, eager
// messages up to inline_max); 4 MiB holds hundreds in flight.
constexpr size_t kRingBytes = 4u << 20;

wire::EncodedFrame rejected(Code code, const std::string& why) { return wire::encode(wire::Rejected{code, why}); }

// A peer the kernel says is this very process is another engine sharing
// this address space, one trust domain, when its engine id (proven by the
// handshake's signature) is not this engine's: allowed. An engine is its
// own peer only with Options::local_same_process.
PeerPolicy policy_of(const core::EngineContext& ctx, uint64_t peer_engine) {
  return PeerPolicy{ctx.options.local_other_uids, ctx.options.local_same_process || peer_engine != ctx.engine_id};
}

}  // namespace

Result<std::shared_ptr<transport::ConnectionCore>> connect_local(const std::shared_ptr<core::EngineContext>& ctx,
                                                                uint64_t id, uint64_t peer_engine,
                                                                platform::Socket control, Deadline deadline) {
  uint64_t nonce = platform::random_u64();
  FERRY_ASSIGN_OR_RETURN(ShmChannel channel, ShmChannel::create(kRingBytes, nonce));
  FERRY_ASSIGN_OR_RETURN(RendezvousListener rendezvous, RendezvousListener::open());
  wire::EncodedFrame setup;
  setup.aux = rendezvous.name();
  setup.header = wire::encode(wire::LocalSetup{rendezvous.ticket(), nonce, setup.aux});
  FERRY_RETURN_IF_ERROR(bootstrap::write_handshake_frame(control.fd(), setup, deadline));
  Result<PeerCredentials> proven = rendezvous.hand_over(channel.fd(), control.fd(), policy_of(*ctx, peer_engine), deadline);
  if (!proven.ok() && proven.status().code() != Code::kCancelled) return proven.status();
  FERRY_ASSIGN_OR_RETURN(bootstrap::RawFrame reply, bootstrap::read_handshake_frame(control.fd(), deadline));
  if (reply.header.type == wire::FrameType::kRejected) {
    FERRY_ASSIGN_OR_RETURN(wire::Rejected r, wire::decode_rejected(reply.header, reply.aux));
    return Status(r.code, "the peer could not attach the local channel: " + r.message);
  }
  if (!proven.ok()) return proven.status();
  // The peer's word on its pid must agree with the kernel's; only the
  // kernel's is used.
  if (reply.header.type != wire::FrameType::kLocalReady) {
    return Status(Code::kDataLoss, "expected LOCAL_READY from process " + std::to_string(proven->pid) + ", got " +
                                       std::string(wire::frame_type_name(reply.header.type)));
  }
  FERRY_ASSIGN_OR_RETURN(wire::LocalReady ready, wire::decode_local_ready(reply.header, reply.aux, {}));
  if (ready.pid != static_cast<uint64_t>(proven->pid)) {
    return Status(Code::kDataLoss, "LOCAL_READY names process " + std::to_string(ready.pid) + "; the kernel says " +
                                       std::to_string(proven->pid));
  }
  LocalPeer peer{peer_engine, proven->pid, platform::peer_name(control.fd())};
  return LocalTransport::connection(ctx, id, std::move(peer), std::move(control), std::move(channel));
}

Result<std::shared_ptr<transport::ConnectionCore>> accept_local(const std::shared_ptr<core::EngineContext>& ctx,
                                                               uint64_t id, uint64_t peer_engine,
                                                               platform::Socket control, Deadline deadline) {
  int fd = control.fd();
  FERRY_ASSIGN_OR_RETURN(bootstrap::RawFrame setup, bootstrap::read_handshake_frame(fd, deadline));
  auto refuse = [&](const Status& why) {
    (void)bootstrap::write_handshake_frame(fd, rejected(why.code(), why.message()), deadline);
    return why;
  };
  if (setup.header.type != wire::FrameType::kLocalSetup) {
    return refuse(
        Status(Code::kDataLoss, "expected LOCAL_SETUP, got " + std::string(wire::frame_type_name(setup.header.type))));
  }
  Result<wire::LocalSetup> asked = wire::decode_local_setup(setup.header, setup.aux, {});
  if (!asked.ok()) return refuse(asked.status());
  Result<ReceivedChannel> received =
      fetch_channel(asked->rendezvous, asked->ticket, fd, policy_of(*ctx, peer_engine), deadline);
  if (!received.ok()) return refuse(received.status());
  Result<ShmChannel> channel = ShmChannel::attach(received->fd, asked->nonce);
  if (!channel.ok()) return refuse(channel.status());
  wire::EncodedFrame ready;
  ready.header = wire::encode(wire::LocalReady{static_cast<uint64_t>(::getpid())});
  FERRY_RETURN_IF_ERROR(bootstrap::write_handshake_frame(fd, ready, deadline));
  LocalPeer peer{peer_engine, received->peer.pid, platform::peer_name(fd)};
  return LocalTransport::connection(ctx, id, std::move(peer), std::move(control), std::move(channel).value());
}

}  // namespace ferry::local
