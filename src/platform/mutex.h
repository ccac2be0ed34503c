// The locks ferry takes: std::mutex and std::shared_mutex with the
// annotations clang needs to check GUARDED_BY and REQUIRES
// (thread_annotations.h), at the same cost (every call is inline).
//
//   Mutex        std::mutex that the analysis sees taken and released.
//   MutexLock    std::lock_guard for a Mutex.
//   UniqueLock   std::unique_lock for a Mutex, for waiting on a
//                std::condition_variable: wait(lock.native(), ...) takes the
//                std::unique_lock<std::mutex> inside (so the waits keep
//                std::condition_variable's speed; condition_variable_any
//                would take a second lock on every wait). The analysis does
//                not see the wait release the lock and take it back, which is
//                right for what it checks: the lock is held before and after.
//   SharedMutex  std::shared_mutex, likewise; WriterLock and ReaderLock take
//                it exclusively and shared for a scope.
//
// Example:
//
//   platform::Mutex mu_;
//   std::condition_variable changed_;
//   int count_ GUARDED_BY(mu_) = 0;
//
//   void add() EXCLUDES(mu_) {
//     { platform::MutexLock lock(mu_); ++count_; }
//     changed_.notify_all();
//   }
//   void wait_for_one() EXCLUDES(mu_) {
//     platform::UniqueLock lock(mu_);
//     while (count_ == 0) changed_.wait(lock.native());
//     --count_;
//   }
//
// The analysis checks a lambda as a function of its own that holds nothing,
// so a predicate passed to wait() that reads guarded members says what it
// needs: changed_.wait(lock.native(), [&]() REQUIRES(mu_) { return count_ > 0; }).
#pragma once

#include <mutex>
#include <shared_mutex>

#include "platform/thread_annotations.h"

namespace ferry::platform {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the calling thread holds this mutex where it
  // cannot see that itself; checks nothing at run time.
  void assert_held() const ASSERT_CAPABILITY(this) {}

 private:
  friend class UniqueLock;
  std::mutex mu_;
};

// Holds `mu` for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Holds `mu` for its scope, except between unlock() and lock(); native() is
// what std::condition_variable waits with.
class SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~UniqueLock() RELEASE() {}
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  void lock() ACQUIRE() { lock_.lock(); }
  void unlock() RELEASE() { lock_.unlock(); }
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

class CAPABILITY("shared mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  void lock_shared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { mu_.unlock_shared(); }
  bool try_lock_shared() TRY_ACQUIRE_SHARED(true) { return mu_.try_lock_shared(); }
  // As Mutex::assert_held; the second for a shared hold.
  void assert_held() const ASSERT_CAPABILITY(this) {}
  void assert_shared_held() const ASSERT_SHARED_CAPABILITY(this) {}

 private:
  std::shared_mutex mu_;
};

// Holds `mu` exclusively for its scope.
class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds `mu` shared for its scope.
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() RELEASE() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace ferry::platform
