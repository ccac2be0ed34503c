// Ed25519 through OpenSSL's EVP interface (identity.h).
#include "platform/identity.h"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <cstring>

namespace ferry::platform {

struct IdentityKey::Impl {
  EVP_PKEY* key = nullptr;
  ~Impl() { EVP_PKEY_free(key); }
};

uint64_t engine_id_of(const PublicKey& key) {
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256(key.data(), key.size(), digest);
  uint64_t id = 0;
  for (int i = 7; i >= 0; --i) id = (id << 8) | digest[i];
  return id;
}

bool verify_signature(const PublicKey& key, std::string_view data, const Signature& signature) {
  EVP_PKEY* pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, key.data(), key.size());
  if (pkey == nullptr) return false;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr && EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, pkey) == 1 &&
            EVP_DigestVerify(ctx, signature.data(), signature.size(), reinterpret_cast<const unsigned char*>(data.data()),
                             data.size()) == 1;
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(pkey);
  return ok;
}

Result<std::shared_ptr<const IdentityKey>> IdentityKey::generate() {
  std::shared_ptr<IdentityKey> made(new IdentityKey());
  made->impl_ = std::make_unique<Impl>();
  // A digest that starts with 8 zero bytes would name engine 0, which means
  // "none" on the wire; one in 2^64 keys, drawn again.
  for (int attempt = 0; attempt < 4; ++attempt) {
    EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
    EVP_PKEY* key = nullptr;
    const bool made_key = ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_keygen(ctx, &key) == 1;
    EVP_PKEY_CTX_free(ctx);
    if (!made_key) return Status(Code::kInternal, "identity: OpenSSL could not make an Ed25519 key");
    size_t len = made->public_.size();
    if (EVP_PKEY_get_raw_public_key(key, made->public_.data(), &len) != 1 || len != made->public_.size()) {
      EVP_PKEY_free(key);
      return Status(Code::kInternal, "identity: OpenSSL gave no raw Ed25519 public key");
    }
    EVP_PKEY_free(made->impl_->key);
    made->impl_->key = key;
    if (made->engine_id() != 0) return std::shared_ptr<const IdentityKey>(std::move(made));
  }
  return Status(Code::kInternal, "identity: every key drawn named engine 0");
}

IdentityKey::~IdentityKey() = default;

Signature IdentityKey::sign(std::string_view data) const {
  Signature out{};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  size_t len = out.size();
  // Signing with a valid Ed25519 key fails only when memory runs out; the
  // all-zero signature then fails the peer's check, which refuses the
  // connection.
  if (ctx != nullptr && EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, impl_->key) == 1) {
    (void)EVP_DigestSign(ctx, out.data(), &len, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  }
  EVP_MD_CTX_free(ctx);
  return out;
}

}  // namespace ferry::platform
