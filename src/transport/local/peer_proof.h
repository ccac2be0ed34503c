// PeerProof: how two engines on one host learn, from the kernel and not from
// each other's word, which process is at the other end, and how the shared
// channel's descriptor moves between them.
//
// The control stream is TCP, which carries no credentials. So the connector
// listens on a Unix socket with a random abstract name and sends that name
// and a random ticket over the authenticated control stream; the acceptor
// connects and presents the ticket. Each side then reads the other's pid and
// uid with SO_PEERCRED (what the kernel recorded when that process called
// listen() or connect()), and the connector passes the channel's memfd with
// SCM_RIGHTS. A side refuses a peer that is its own process (an engine never
// becomes its own peer) and a peer of another uid, unless its PeerPolicy
// says otherwise. Abstract names are visible in
// /proc/net/unix to every local user; the ticket, known only to the control
// stream's peer, is what makes the connector hand the descriptor to the right
// process.
//
// Threading: each object belongs to the handshake thread that made it.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"
#include "ferry/transfer.h"
#include "platform/socket.h"

namespace ferry::local {

// Who the kernel says a peer process is.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
};

using Ticket = std::array<uint8_t, 16>;

// Which peers a side accepts besides same-uid processes other than itself.
struct PeerPolicy {
  bool other_uids = false;    // Options::local_other_uids
  bool same_process = false;  // Options::local_same_process
};

// kPermissionDenied, naming what is wrong, if `peer` is this process (unless
// `policy.same_process`) or runs as another uid than this process's
// effective uid (unless `policy.other_uids`).
Status check_peer(const PeerCredentials& peer, const PeerPolicy& policy);

// The name a connector listens on: "ferry-local-" and 32 hex digits. A peer
// names it in LOCAL_SETUP; anything else is refused before a connect.
bool valid_rendezvous_name(std::string_view name);

// Connector side: a listening Unix socket under a fresh random name.
class RendezvousListener {
 public:
  static Result<RendezvousListener> open();

  const std::string& name() const { return name_; }
  const Ticket& ticket() const { return ticket_; }

  // Waits for the peer that presents the ticket, checks its credentials,
  // passes `fd` to it and returns who it is. Connections without the ticket
  // are dropped and the wait goes on. If `control_fd` becomes readable
  // first (the peer refused over the control stream), returns kCancelled so
  // the caller reads why. kDeadlineExceeded, kPermissionDenied, kUnavailable.
  Result<PeerCredentials> hand_over(int fd, int control_fd, const PeerPolicy& policy, Deadline deadline);

 private:
  platform::Socket listener_;
  std::string name_;
  Ticket ticket_{};
};

// Acceptor side: connects to the connector's `name`, checks the connector's
// credentials, presents `ticket` and receives the channel's descriptor
// (owned by the caller). Never blocks past `deadline`, whoever listens on
// the name. kPermissionDenied for a refused peer, kUnavailable if the name
// cannot be reached (another network namespace), kDataLoss for anything but
// exactly one descriptor, kDeadlineExceeded. If `control_fd` (-1: none)
// ends or becomes readable first (the peer hung up, or the engine is
// stopping and shut it), returns kCancelled at once.
struct ReceivedChannel {
  PeerCredentials peer;
  int fd = -1;
};
Result<ReceivedChannel> fetch_channel(std::string_view name, const Ticket& ticket, int control_fd,
                                      const PeerPolicy& policy, Deadline deadline);

}  // namespace ferry::local
