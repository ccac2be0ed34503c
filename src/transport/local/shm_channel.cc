// Shared-memory message rings; the reader asks for a ring on its doorbell
// when it stops polling.
#include "transport/local/shm_channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "platform/system_error.h"

namespace ferry::local {

namespace {
// Version 2: a reader that stopped polling is woken by a byte on the
// control stream, no longer by a futex in the shared page.
constexpr uint64_t kMagic = 0x324d485359524546ull;  // "FERYSHM2"
constexpr uint64_t kMagicV1 = 0x314d485359524546ull;  // "FERYSHM1"
constexpr uint32_t kWrap = 0xffffffffu;             // "continue at the ring's start"
// A peer that could shrink or grow the file under our mapping could make
// every later access fault (SIGBUS): both are sealed before it is shared.
constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW;

size_t align8(size_t n) { return (n + 7) & ~size_t{7}; }
}  // namespace

struct ShmChannel::Ring {
  alignas(64) std::atomic<uint64_t> head;   // bytes published by the producer
  alignas(64) std::atomic<uint64_t> tail;   // bytes consumed by the consumer
  alignas(64) std::atomic<uint32_t> unused;  // version 1's futex word
  std::atomic<uint32_t> sleeping;            // the consumer armed the channel: ring after posting
  alignas(64) std::atomic<uint64_t> beats;  // liveness of the consumer's side
  std::atomic<uint32_t> gave_up;            // the consumer's side failed the connection
};

struct ShmChannel::Layout {
  uint64_t magic;
  uint64_t nonce;
  uint64_t ring_bytes;
  uint64_t reserved[5];
  Ring rings[2];
};

ShmChannel::ShmChannel(ShmChannel&& o) noexcept { *this = std::move(o); }

ShmChannel& ShmChannel::operator=(ShmChannel&& o) noexcept {
  if (this != &o) {
    // Nothing posts on a channel while it moves; the locks only let the
    // analysis see head_ taken under its lock.
    platform::MutexLock mine(post_mu_);
    platform::MutexLock theirs(o.post_mu_);
    release();
    fd_ = o.fd_;
    side_ = o.side_;
    ring_bytes_ = o.ring_bytes_;
    map_bytes_ = o.map_bytes_;
    base_ = o.base_;
    head_ = o.head_;
    tail_.store(o.tail_.load());
    broken_.store(o.broken_.load());
    o.fd_ = -1;
    o.base_ = nullptr;
  }
  return *this;
}

ShmChannel::~ShmChannel() { release(); }

void ShmChannel::release() {
  if (base_ != nullptr) ::munmap(base_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

size_t ShmChannel::head_offset(int i) { return offsetof(Layout, rings) + i * sizeof(Ring) + offsetof(Ring, head); }
size_t ShmChannel::tail_offset(int i) { return offsetof(Layout, rings) + i * sizeof(Ring) + offsetof(Ring, tail); }
size_t ShmChannel::data_offset(int i) const { return static_cast<size_t>(data(i) - base_); }

ShmChannel::Ring& ShmChannel::ring(int i) const { return reinterpret_cast<Layout*>(base_)->rings[i]; }
uint8_t* ShmChannel::data(int i) const { return base_ + align8(sizeof(Layout)) + static_cast<size_t>(i) * ring_bytes_; }

Result<ShmChannel> ShmChannel::create(size_t ring_bytes, uint64_t nonce) {
  ShmChannel c;
  c.fd_ = static_cast<int>(::syscall(SYS_memfd_create, "ferry-local", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (c.fd_ < 0) return platform::errno_status(Code::kResourceExhausted, "memfd_create");
  c.ring_bytes_ = ring_bytes;
  c.map_bytes_ = align8(sizeof(Layout)) + 2 * ring_bytes;
  if (::ftruncate(c.fd_, static_cast<off_t>(c.map_bytes_)) != 0) {
    return platform::errno_status(Code::kResourceExhausted, "ftruncate of the local channel");
  }
  if (::fcntl(c.fd_, F_ADD_SEALS, kRequiredSeals | F_SEAL_SEAL) != 0) {
    return platform::errno_status(Code::kUnavailable, "sealing the local channel");
  }
  void* p = ::mmap(nullptr, c.map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, c.fd_, 0);
  if (p == MAP_FAILED) return platform::errno_status(Code::kResourceExhausted, "mmap");
  c.base_ = static_cast<uint8_t*>(p);
  auto* l = new (c.base_) Layout{};  // zero-filled by ftruncate; placement makes the atomics live
  l->nonce = nonce;
  l->ring_bytes = ring_bytes;
  l->magic = kMagic;
  c.side_ = 0;
  return c;
}

Result<ShmChannel> ShmChannel::attach(int fd, uint64_t nonce) {
  ShmChannel c;
  c.fd_ = fd;
  // The file is the peer's: only one whose size can no longer change, and is
  // exactly what the header announces, is mapped.
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kRequiredSeals) != kRequiredSeals) {
    return Status(Code::kPermissionDenied,
                  "local channel: the peer's shared segment is not sealed against shrinking and growing");
  }
  Layout head{};
  if (::pread(fd, &head, sizeof(head), 0) == static_cast<ssize_t>(sizeof(head)) && head.magic == kMagicV1) {
    return Status(Code::kUnimplemented,
                  "local channel: the peer runs an older ferry (channel version 1, this side speaks 2)");
  }
  if (::pread(fd, &head, sizeof(head), 0) != static_cast<ssize_t>(sizeof(head)) || head.magic != kMagic ||
      head.nonce != nonce || head.ring_bytes < 4096 || head.ring_bytes > (1u << 30) || head.ring_bytes % 8 != 0) {
    return Status(Code::kDataLoss, "local channel: the shared segment is not the one the peer announced");
  }
  c.ring_bytes_ = head.ring_bytes;
  c.map_bytes_ = align8(sizeof(Layout)) + 2 * c.ring_bytes_;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != c.map_bytes_) {
    return Status(Code::kDataLoss, "local channel: the shared segment is " + std::to_string(st.st_size) +
                                       " bytes, its header announces " + std::to_string(c.map_bytes_));
  }
  void* p = ::mmap(nullptr, c.map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return platform::errno_status(Code::kResourceExhausted, "mmap");
  c.base_ = static_cast<uint8_t*>(p);
  c.side_ = 1;
  return c;
}

// A message never straddles the ring's end, so only one of at most half the
// ring is sure to find room wherever the head stands.
bool ShmChannel::fits(size_t bytes) const { return align8(4 + bytes) <= ring_bytes_ / 2; }

bool ShmChannel::try_post(std::string_view head, std::string_view body, bool* ring_peer) {
  platform::UseGate::Use use = users_.enter();
  if (!use) return false;
  platform::MutexLock lock(post_mu_);
  Ring& r = ring(side_);
  uint8_t* d = data(side_);
  size_t len = head.size() + body.size();
  size_t need = align8(4 + len);
  // Our head is ours (head_); the shared copy is only published. The tail
  // is the peer's: one that claims more than was published, or less than a
  // ring behind, is garbage and leaves the ring unused from here on.
  uint64_t h = head_;
  uint64_t t = r.tail.load(std::memory_order_acquire);
  if (broken_.load(std::memory_order_relaxed) || t > h || h - t > ring_bytes_) {
    broken_.store(true, std::memory_order_relaxed);
    return false;
  }
  size_t at = h % ring_bytes_;
  size_t to_end = ring_bytes_ - at;
  size_t total = need <= to_end ? need : to_end + need;  // a message never straddles the end
  if (ring_bytes_ - (h - t) < total) return false;
  if (need > to_end) {
    uint32_t wrap = kWrap;
    std::memcpy(d + at, &wrap, 4);
    h += to_end;
    at = 0;
  }
  uint32_t n = static_cast<uint32_t>(len);
  std::memcpy(d + at, &n, 4);
  std::memcpy(d + at + 4, head.data(), head.size());
  if (!body.empty()) std::memcpy(d + at + 4 + head.size(), body.data(), body.size());
  head_ = h + need;
  r.head.store(head_, std::memory_order_release);
  // seq_cst pairs with arm()'s store of `sleeping` then re-check of head.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ring_peer != nullptr) *ring_peer = r.sleeping.load(std::memory_order_relaxed) != 0;
  return true;
}

bool ShmChannel::readable() const {
  return ring(1 - side_).head.load(std::memory_order_acquire) != tail_.load(std::memory_order_relaxed);
}

Result<bool> ShmChannel::receive(std::string& out) {
  Ring& r = ring(1 - side_);
  uint8_t* d = data(1 - side_);
  // Our tail is ours (tail_); the head is the peer's, checked before use.
  uint64_t t = tail_.load(std::memory_order_relaxed);
  uint64_t h = r.head.load(std::memory_order_acquire);
  if (broken_.load(std::memory_order_relaxed))
    return Status(Code::kDataLoss, "local control ring: the peer published a tail that cannot be right");
  if (t == h) return false;
  // The ring is shared with the peer: a length it wrote is checked against
  // what it published and against the ring's end before a byte is read.
  auto garbage = [&](const char* what) {
    return Status(Code::kDataLoss, std::string("local control ring: ") + what + " at offset " +
                                       std::to_string(t % ring_bytes_) + " (the peer wrote garbage)");
  };
  if (h < t || h - t > ring_bytes_) return garbage("a head behind what was read, or more bytes than the ring holds");
  size_t at = t % ring_bytes_;
  uint32_t n = 0;
  std::memcpy(&n, d + at, 4);
  if (n == kWrap) {
    if (h - t < ring_bytes_ - at) return garbage("a wrap marker past the published bytes");
    t += ring_bytes_ - at;
    at = 0;
    if (t == h) return garbage("a wrap marker with no message after it");
    std::memcpy(&n, d, 4);
  }
  if (n > ring_bytes_ - at - 4 || align8(4 + size_t{n}) > h - t) return garbage("a message length past the ring");
  out.assign(reinterpret_cast<const char*>(d + at + 4), n);
  tail_.store(t + align8(4 + n), std::memory_order_relaxed);
  r.tail.store(t + align8(4 + n), std::memory_order_release);
  return true;
}

bool ShmChannel::arm() {
  ring(1 - side_).sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return !readable();
}

void ShmChannel::disarm() { ring(1 - side_).sleeping.store(0, std::memory_order_relaxed); }

void ShmChannel::beat() {
  platform::UseGate::Use use = users_.enter();
  if (use) ring(1 - side_).beats.fetch_add(1, std::memory_order_relaxed);
}

uint64_t ShmChannel::peer_beats() const {
  platform::UseGate::Use use = users_.enter();
  return use ? ring(side_).beats.load(std::memory_order_relaxed) : 0;
}

// Sequentially consistent on both sides: the giver's later reuse of its
// memory cannot be seen by a copy whose reader then finds the flag clear.
void ShmChannel::give_up() {
  platform::UseGate::Use use = users_.enter();
  if (use) ring(1 - side_).gave_up.store(1, std::memory_order_seq_cst);
}

bool ShmChannel::peer_gave_up() const {
  platform::UseGate::Use use = users_.enter();
  if (!use) return true;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return ring(side_).gave_up.load(std::memory_order_seq_cst) != 0;
}

bool ShmChannel::close(std::chrono::steady_clock::time_point deadline) {
  give_up();  // while the record can still be made
  if (!users_.retire(deadline)) return false;
  release();
  return true;
}

}  // namespace ferry::local
