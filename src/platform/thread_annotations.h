// Lock annotations that clang checks (-Wthread-safety): a member marked
// GUARDED_BY(mu_) may be touched only with mu_ held, a function marked
// REQUIRES(mu_) may be called only with it held, EXCLUDES(mu_) only without.
// Other compilers see nothing. std::mutex carries no annotations, so the
// analysis cannot see it taken: lock through platform/mutex.h's types.
//
// Every clang build turns a report into an error (CMakeLists.txt); CI builds
// everything with clang. What the attributes mean: clang's ThreadSafetyAnalysis
// documentation; the names follow its mutex.h.
#pragma once

#if defined(__clang__)
#define FERRY_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define FERRY_THREAD_ANNOTATION(x)
#endif

// On a class: it is a lock (`x` names its kind in reports).
#define CAPABILITY(x) FERRY_THREAD_ANNOTATION(capability(x))
// On a class: an object that holds a lock from its construction to its
// destruction (MutexLock).
#define SCOPED_CAPABILITY FERRY_THREAD_ANNOTATION(scoped_lockable)

// On a data member: touched only with the lock held (reads: at least shared).
#define GUARDED_BY(x) FERRY_THREAD_ANNOTATION(guarded_by(x))
// On a pointer member: what it points at is touched only with the lock held.
#define PT_GUARDED_BY(x) FERRY_THREAD_ANNOTATION(pt_guarded_by(x))
// On a lock member: the order in which locks are taken.
#define ACQUIRED_BEFORE(...) FERRY_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) FERRY_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// On a function: the caller holds the lock (exclusively / at least shared).
#define REQUIRES(...) FERRY_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) FERRY_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// On a function: the caller does not hold the lock (the function takes it).
#define EXCLUDES(...) FERRY_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// On a function: it returns holding the lock / having released it; with no
// argument, the object's own (a lock's lock() and unlock()).
#define ACQUIRE(...) FERRY_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) FERRY_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) FERRY_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) FERRY_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) FERRY_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
// On a function: it holds the lock on return when it returns `b` (then the rest).
#define TRY_ACQUIRE(...) FERRY_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define TRY_ACQUIRE_SHARED(...) FERRY_THREAD_ANNOTATION(try_acquire_shared_capability(__VA_ARGS__))

// On a function: the calling thread holds the lock from here on, by means the
// analysis cannot follow (it trusts the claim).
#define ASSERT_CAPABILITY(x) FERRY_THREAD_ANNOTATION(assert_capability(x))
#define ASSERT_SHARED_CAPABILITY(x) FERRY_THREAD_ANNOTATION(assert_shared_capability(x))
// On a function: it returns (a reference to) the lock named.
#define RETURN_CAPABILITY(x) FERRY_THREAD_ANNOTATION(lock_returned(x))

// On a function: its body is not checked. Only where the locking is right
// but beyond the analysis; say why next to it.
#define NO_THREAD_SAFETY_ANALYSIS FERRY_THREAD_ANNOTATION(no_thread_safety_analysis)
