// Which sanitizer this translation unit is compiled for, one way for both
// compilers (gcc defines __SANITIZE_*__, clang answers __has_feature):
// FERRY_ASAN under AddressSanitizer, FERRY_TSAN under ThreadSanitizer. Code
// that must tell the sanitizers what they cannot see (fiber switches, the
// order a socket gives) or that sizes memory for them reads these.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define FERRY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define FERRY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_TSAN 1
#endif
#endif
