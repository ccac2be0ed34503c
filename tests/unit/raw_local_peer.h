// A same-host peer made by hand for tests that play a hostile one on the
// local transport: it speaks the handshake as an engine does (from another
// engine id, in this very process; its first half is the shared
// testing/hand_made_handshake.h), then does only what the test tells it:
// read or post on the channel, or nothing, and hang up when told.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "ferry/ferry.h"
#include "platform/crypto.h"
#include "platform/socket.h"
#include "testing/hand_made_handshake.h"
#include "transport/handshake_io.h"
#include "transport/local/peer_proof.h"
#include "transport/local/shm_channel.h"
#include "wire/frame.h"
#include "wire/handshake.h"

namespace ferry::local {

// A same-host peer that speaks the handshake for the local transport.
struct RawLocalPeer {
  platform::Socket ctl;
  ShmChannel channel;

  // Up to and with LOCAL_SETUP naming `rendezvous`; a REJECTED answer comes
  // back as its code and message.
  Status setup(const std::string& address, const std::string& rendezvous, const Ticket& ticket, uint64_t nonce,
               Deadline d) {
    FERRY_ASSIGN_OR_RETURN(platform::HostPort hp, platform::parse_host_port(address));
    FERRY_ASSIGN_OR_RETURN(ctl, platform::connect_tcp(hp, d));
    // streams 0: the local transport.
    FERRY_RETURN_IF_ERROR(testing::hand_made_hello(ctl.fd(), platform::host_id(), 0, d).status());
    wire::EncodedFrame frame;
    frame.header.type = wire::FrameType::kLocalSetup;
    std::memcpy(&frame.header.a, ticket.data(), 8);
    std::memcpy(&frame.header.b, ticket.data() + 8, 8);
    frame.header.c = nonce;
    frame.aux = rendezvous;
    frame.header.aux_len = static_cast<uint16_t>(frame.aux.size());
    return bootstrap::write_handshake_frame(ctl.fd(), frame, d);
  }

  // The whole handshake, with a channel of this peer's own.
  Status dial(const std::string& address, Deadline d) {
    const uint64_t nonce = platform::random_u64();
    FERRY_ASSIGN_OR_RETURN(channel, ShmChannel::create(4 << 20, nonce));
    FERRY_ASSIGN_OR_RETURN(RendezvousListener rendezvous, RendezvousListener::open());
    FERRY_RETURN_IF_ERROR(setup(address, rendezvous.name(), rendezvous.ticket(), nonce, d));
    FERRY_RETURN_IF_ERROR(rendezvous.hand_over(channel.fd(), ctl.fd(), PeerPolicy{false, true}, d).status());
    FERRY_ASSIGN_OR_RETURN(auto ready, bootstrap::read_handshake_frame(ctl.fd(), d));
    FERRY_RETURN_IF_ERROR(testing::rejected_status(ready));
    if (ready.header.type != wire::FrameType::kLocalReady) return Status(Code::kDataLoss, "expected LOCAL_READY");
    return Status();
  }

  // Retries dial() while the engine refuses (its admissions not back yet).
  Status dial_within(const std::string& address, Deadline until) {
    Status s = dial(address, after(std::chrono::seconds(2)));
    while (!s.ok() && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      s = dial(address, after(std::chrono::seconds(2)));
    }
    return s;
  }

  // Posts one message on the channel, and rings the engine's doorbell (a
  // byte on the control stream) when its reader asked for it, as an engine
  // does; false if the ring lacks room.
  bool post(wire::FrameHeader h, std::string_view aux = {}, std::string_view payload = {}) {
    h.aux_len = static_cast<uint16_t>(aux.size());
    h.payload_len = static_cast<uint32_t>(payload.size());
    wire::HeaderBytes hb;
    wire::encode_header(h, hb);
    std::string head(reinterpret_cast<const char*>(hb.data()), hb.size());
    head.append(aux);
    bool ring = false;
    if (!channel.try_post(head, payload, &ring)) return false;
    if (ring && ctl.fd() >= 0) {
      const char r = 'r';
      (void)::send(ctl.fd(), &r, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    return true;
  }

  // The next message the engine posted, waiting for it until `until`: its
  // header, and its aux and payload bytes after it in `body`.
  Result<wire::FrameHeader> next(std::string& body, Deadline until) {
    std::string msg;
    for (;;) {
      FERRY_ASSIGN_OR_RETURN(bool got, channel.receive(msg));
      if (got) break;
      if (Clock::now() >= until) return Status(Code::kDeadlineExceeded, "no message from the engine");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    FERRY_ASSIGN_OR_RETURN(wire::FrameHeader h,
                           wire::decode_header(reinterpret_cast<const uint8_t*>(msg.data()), msg.size()));
    body = msg.substr(wire::kHeaderSize);
    return h;
  }

  void hang_up() {
    ctl.reset();
    channel = ShmChannel();
  }
};

inline bool eventually(const std::function<bool()>& pred, Deadline deadline) {
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace ferry::local
