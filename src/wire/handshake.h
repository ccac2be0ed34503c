// Handshake messages and their codecs (pure functions, no I/O).
//
// Control stream:  connector HELLO -> acceptor WELCOME -> connector AUTH ->
//                  acceptor ACCEPTED (or REJECTED) ... acceptor READY once
//                  every data stream has attached.
// Data stream:     connector HELLO(role=data, cookie, index); no reply.
// The secret never travels: AUTH and ACCEPTED carry HMAC-SHA256 proofs over
// both sides' nonces, so each side proves it knows the secret.
// Each side's engine id is the id of the identity key its HELLO or WELCOME
// carries (platform/identity.h); AUTH and ACCEPTED carry each side's
// signature over both nonces and both keys, so an engine id on a connection
// is proven whether or not a secret is configured.
//
// Versions: a HELLO offers the range of protocol versions its engine speaks
// (its header's code: the lowest in the low 16 bits, the highest in the high
// 16; engines before ranges wrote one version and 0 above it). The acceptor
// picks the highest version both speak and answers with it in WELCOME, or
// REJECTED (unimplemented) naming both sides' versions. The HELLO frame keeps
// its version-5 layout in every later version, so that any two engines can
// read each other's offer; what a later version adds travels after WELCOME.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/status.h"
#include "wire/frame.h"

namespace ferry::wire {

using Nonce = std::array<uint8_t, 32>;
using Proof = std::array<uint8_t, 32>;
using IdentityKey = std::array<uint8_t, 32>;  // an Ed25519 public key
using Signature = std::array<uint8_t, 64>;    // an Ed25519 signature

enum class StreamRole : uint8_t { kControl = 1, kData = 2 };

// The protocol versions an engine speaks, lowest and highest.
struct VersionRange {
  uint16_t min = kMinProtocolVersion;
  uint16_t max = kProtocolVersion;
  bool operator==(const VersionRange&) const = default;
};
// What this build speaks.
inline constexpr VersionRange kSpokenVersions{kMinProtocolVersion, kProtocolVersion};

struct Hello {
  // The versions the connector speaks (HELLO's code, see above).
  uint16_t min_version = kMinProtocolVersion;
  uint16_t version = kProtocolVersion;  // the highest
  StreamRole role = StreamRole::kControl;
  uint64_t engine_id = 0;
  uint32_t streams = 0;       // control: data streams that will follow
  uint64_t cookie = 0;        // data: names the connection (from ACCEPTED)
  uint32_t stream_index = 0;  // data: which path this is
  Nonce nonce{};              // control: the connector's challenge
  IdentityKey identity{};     // control: the connector's public key
  std::string host_id;        // identifies the host (same-host detection)
};

struct Welcome {
  uint16_t version = kProtocolVersion;  // the version the acceptor chose
  uint64_t engine_id = 0;
  bool auth_required = false;
  Nonce nonce{};  // the acceptor's challenge
  IdentityKey identity{};  // the acceptor's public key
  std::string host_id;
  // The acceptor would serve a same-host connector through the local
  // transport (it is not forced to TCP).
  bool local_ok = false;
  // "ip:port" of every NIC the acceptor serves on, preferred first (at most
  // 32, each under 256 bytes). The connector pairs its NICs with these.
  std::vector<std::string> addresses;
};

struct Auth {
  Signature signature{};  // the connector's, over identity_input(kConnector, ...)
  bool has_proof = false;
  Proof proof{};
  uint32_t streams = 0;  // data streams the connector will open (1..1024); 0: local transport
};

struct Accepted {
  uint64_t cookie = 0;
  uint64_t connection_id = 0;  // the acceptor's id for this connection (for logs)
  Signature signature{};       // the acceptor's, over identity_input(kAcceptor, ...)
  bool has_proof = false;
  Proof proof{};
};

struct Rejected {
  Code code = Code::kUnavailable;
  std::string message;
};

// Each encode returns the header and the aux bytes to send after it.
struct EncodedFrame {
  FrameHeader header;
  std::string aux;
};

EncodedFrame encode(const Hello& m);
EncodedFrame encode(const Welcome& m);
EncodedFrame encode(const Auth& m);
EncodedFrame encode(const Accepted& m);
EncodedFrame encode(const Rejected& m);

// The versions a HELLO offers, read from its header alone (a HELLO of any
// version has one), so that an offer is judged before its aux bytes, whose
// layout is the version's. kDataLoss: not a HELLO, or no range (0, or the
// lowest above the highest).
Result<VersionRange> hello_versions(const FrameHeader& h);

// The highest version in both `ours` (the acceptor's) and `theirs` (the
// connector's). kUnimplemented when there is none, naming both ranges and
// which side to upgrade.
Result<uint16_t> negotiate(VersionRange ours, VersionRange theirs);

// "version 5" or "versions 5..7".
std::string to_string(VersionRange r);

// Each decode checks the frame type and aux layout; kDataLoss says what is wrong.
Result<Hello> decode_hello(const FrameHeader& h, const std::string& aux);
Result<Welcome> decode_welcome(const FrameHeader& h, const std::string& aux);
Result<Auth> decode_auth(const FrameHeader& h, const std::string& aux);
Result<Accepted> decode_accepted(const FrameHeader& h, const std::string& aux);
Result<Rejected> decode_rejected(const FrameHeader& h, const std::string& aux);

// The bytes each side signs. Roles differ so a proof cannot be reflected.
std::string client_proof_input(const Nonce& client, const Nonce& server);
std::string server_proof_input(const Nonce& client, const Nonce& server);

// The bytes each side signs with its identity key: its role, both nonces and
// both public keys, so a signature made for one session, one peer or one
// role is worth nothing in another.
enum class Signer : uint8_t { kConnector = 1, kAcceptor = 2 };
std::string identity_input(Signer signer, const Hello& hello, const Welcome& welcome);

}  // namespace ferry::wire
