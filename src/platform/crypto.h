// Randomness and message authentication, from the kernel and OpenSSL.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ferry::platform {

// Fills `buf` from getrandom(2). Cryptographically strong.
void fill_random(void* buf, size_t len);
uint64_t random_u64();

// HMAC-SHA256 of `data` under `key`.
std::array<uint8_t, 32> hmac_sha256(std::string_view key, std::string_view data);

// Compares without leaking where the first difference is.
bool constant_time_equal(const uint8_t* a, const uint8_t* b, size_t len);

// Identifies this host for the lifetime of its kernel (hostname + boot id).
std::string_view host_id();

}  // namespace ferry::platform
