// The identity of a peer that tests build by hand from wire frames (hostile
// peers, fuzz harnesses): one key per process, its engine id, and the
// signature the engine's handshake asks of a connector (protocol 5).
#pragma once

#include <cstdint>
#include <memory>

#include "platform/identity.h"
#include "transport/handshake_io.h"
#include "wire/handshake.h"

namespace ferry::testing {

inline const platform::IdentityKey& hand_made_key() {
  static const std::shared_ptr<const platform::IdentityKey> key = platform::IdentityKey::generate().value();
  return *key;
}

inline uint64_t hand_made_engine_id() { return hand_made_key().engine_id(); }

// Names the key in a control HELLO.
inline void present_identity(wire::Hello& hello) {
  hello.engine_id = hand_made_engine_id();
  hello.identity = hand_made_key().public_key();
}

// Signs `auth` for the session `hello` opened and the engine's WELCOME frame
// answered; kDataLoss if that frame is not a WELCOME.
inline Status sign_auth(const wire::Hello& hello, const bootstrap::RawFrame& welcome_frame, wire::Auth& auth) {
  FERRY_ASSIGN_OR_RETURN(wire::Welcome welcome, wire::decode_welcome(welcome_frame.header, welcome_frame.aux));
  auth.signature = hand_made_key().sign(wire::identity_input(wire::Signer::kConnector, hello, welcome));
  return Status();
}

}  // namespace ferry::testing
