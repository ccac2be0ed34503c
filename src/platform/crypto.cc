// Randomness, HMAC and host identity.
#include "platform/crypto.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace ferry::platform {

void fill_random(void* buf, size_t len) {
  auto* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    ssize_t n = ::getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      // getrandom cannot fail on a running Linux once the pool is initialised;
      // fall back to /dev/urandom rather than return weak bytes.
      std::ifstream in("/dev/urandom", std::ios::binary);
      in.read(reinterpret_cast<char*>(p), static_cast<std::streamsize>(len));
      return;
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

uint64_t random_u64() {
  uint64_t v = 0;
  while (v == 0) fill_random(&v, sizeof(v));
  return v;
}

std::array<uint8_t, 32> hmac_sha256(std::string_view key, std::string_view data) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out.data(), &len);
  return out;
}

bool constant_time_equal(const uint8_t* a, const uint8_t* b, size_t len) {
  uint8_t diff = 0;
  for (size_t i = 0; i < len; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

std::string_view host_id() {
  static const std::string id = [] {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    std::string boot;
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::getline(in, boot);
    return std::string(host) + "/" + boot;
  }();
  return id;
}

}  // namespace ferry::platform
