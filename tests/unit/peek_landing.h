// A read of memory the engine may be landing a frame into at the same time,
// for tests that watch a frame arrive part by part (a peer that stalls mid-
// chunk). Why it exists: the bytes are written by the kernel (recvmsg), and
// ThreadSanitizer takes each partial receive's write for a race with the
// test's read, which is what such a test wants to do. Not instrumented.
#pragma once

#include <cstdint>

namespace ferry::testing {

__attribute__((noinline, no_sanitize("thread"))) inline uint8_t peek_landing(const volatile uint8_t* p) { return *p; }

}  // namespace ferry::testing
