// Whether this test binary runs under ThreadSanitizer, for the few tests
// whose subject is something it reports by design, or under either
// sanitizer, for the tests whose subject is timing (scripts/sanitize.sh).
#pragma once

#include "platform/sanitizers.h"

namespace ferry::sanitizer_build {

#if defined(FERRY_TSAN)
inline constexpr bool kThread = true;
#else
inline constexpr bool kThread = false;
#endif

#if defined(FERRY_ASAN)
inline constexpr bool kAddress = true;
#else
inline constexpr bool kAddress = false;
#endif

// Why a test that measures how long one connection's messages wait behind
// another's bulk transfer does not run under a sanitizer: the sanitizers
// slow copies, locks and thread switches unevenly, so the times say nothing
// of the data plane (the plain build runs it in every suite).
inline constexpr const char* kTimingTest = "a timing test: the sanitizers change the timing it measures";

// Why a test of one chunk landing twice (a peer resending it on a second
// path while the first copy is still arriving) does not run under it: both
// copies write the same bytes of the application's memory from two threads,
// on purpose, and nothing orders them.
inline constexpr const char* kTwoPathsLandOneChunk =
    "two paths land the same chunk at once by design; ThreadSanitizer reports exactly that";

// Why a test that looks at an export's memory after a peer's write to it
// broke off does not run under it: a one-sided write has no completion on
// the exporting side, so the test's access is ordered after the engine's
// last write only by the stalled path's socket closing, which the sanitizer
// does not see.
inline constexpr const char* kExportWrittenBySocketOrder =
    "only a socket's closing orders the test's look at the export after the peer's write; ThreadSanitizer cannot see it";

// Why the local transport's cancel tests of large writes do not run under
// it: a large host copy handed to the copier's helpers holds its regions'
// shared locks from the thread that started it until the thread that ends
// it lets go, so the sanitizer counts them as held by the progress thread
// while it passes the next export's gate, and reports a lock-order cycle.
inline constexpr const char* kCopyLocksOutliveTheirThread =
    "a local copy handed to the helpers keeps its region locks past the thread that took them; "
    "ThreadSanitizer reports that as a lock-order cycle";

}  // namespace ferry::sanitizer_build
