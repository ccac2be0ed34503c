// An engine's identity: an Ed25519 key pair made at start, whose public half
// names the engine. The engine id peers see is taken from the public key
// (engine_id_of), and the handshake makes each side sign the session's
// nonces, so an engine id on a connection is proven, not claimed: a peer
// cannot speak as an engine without that engine's private key.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>

#include "ferry/status.h"

namespace ferry::platform {

using PublicKey = std::array<uint8_t, 32>;
using Signature = std::array<uint8_t, 64>;

// The engine id a public key stands for: the first 8 bytes of its SHA-256,
// little endian (never 0: a key whose digest starts with 8 zero bytes is
// refused when made).
uint64_t engine_id_of(const PublicKey& key);

// Whether `signature` is `key`'s over `data`. False for anything malformed.
bool verify_signature(const PublicKey& key, std::string_view data, const Signature& signature);

// A private key. Thread-safe: signing does not change it.
class IdentityKey {
 public:
  // A fresh key from the kernel's randomness. kInternal if OpenSSL cannot
  // make one.
  static Result<std::shared_ptr<const IdentityKey>> generate();
  ~IdentityKey();
  IdentityKey(const IdentityKey&) = delete;
  IdentityKey& operator=(const IdentityKey&) = delete;

  const PublicKey& public_key() const { return public_; }
  uint64_t engine_id() const { return engine_id_of(public_); }
  Signature sign(std::string_view data) const;

 private:
  IdentityKey() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PublicKey public_{};
};

}  // namespace ferry::platform
