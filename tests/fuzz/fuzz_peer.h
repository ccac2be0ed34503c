// What the stateful harnesses (fuzz_tcp_connection, fuzz_local_connection)
// and the seed recorder share: the input format, a peer that speaks the
// handshake by hand (the tests' own, testing/hand_made_handshake.h), a
// reader that splits what the engine sends into frames, guarded memory, and
// the operations the engine's application posts before the peer's frames
// arrive.
//
// Input of a stateful harness:
//   u8  setup: which operations the engine's application posts (kSetup*)
//   u8  streams: data streams the peer opens (TCP; 1 + value % 2)
//   records, until the input ends:
//     u8 kind < 0x80     send: a message (see each harness), preceded by
//                        u16 length, little-endian
//     u8 kind 0x80..0xbf sync: wait for the engine's next frame of type
//                        kind & 0x3f, so that an answer follows what it
//                        answers, as in the traffic it was recorded from
//                        (all waits of one input together: kSyncBudget)
//     u8 kind >= 0xc0    a harness's own action (the local ring's indices)
// Export ids and keys cannot be recorded: a frame field equal to kExportTag
// or kKeyTag is replaced by the id or key of the engine's export before it
// is sent. The peer's own export, which the engine's application writes to
// and reads from, is named by kPeerExportTag and kPeerKeyTag as they are.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../hand_made_identity.h"
#include "ferry/ferry.h"
#include "platform/socket.h"
#include "testing/hand_made_handshake.h"
#include "transport/handshake_io.h"
#include "wire/frame.h"
#include "wire/handshake.h"

namespace ferry::fuzz {

using namespace std::chrono_literals;

inline constexpr uint64_t kExportTag = 0x45585054'41474731ull;
inline constexpr uint64_t kKeyTag = 0x4b455954'41474732ull;
inline constexpr uint64_t kPeerExportTag = 0x45585054'41474733ull;
inline constexpr uint64_t kPeerKeyTag = 0x4b455954'41474734ull;
inline const uint64_t kPeerEngineId = testing::hand_made_engine_id();
// Waits for the engine's frames end, all together, after this long: enough
// for a recorded exchange (a millisecond or two) on a busy machine, and
// spent only by inputs that wait for what never comes on a connection that
// did not fail.
inline constexpr std::chrono::milliseconds kSyncBudget{30};

inline void require(bool ok, const char* what = nullptr) {
  if (ok) return;
  if (what != nullptr) std::fprintf(stderr, "fuzz: %s\n", what);
  std::abort();
}

inline void require_ok(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "fuzz: %s: %s\n", what, s.to_string().c_str());
  std::abort();
}

// Reads an input front to back; past its end, zeros and empty strings.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool done() const { return at_ >= n_; }
  uint8_t u8() { return at_ < n_ ? p_[at_++] : 0; }
  uint16_t u16() {
    uint16_t lo = u8();
    return static_cast<uint16_t>(lo | (u8() << 8));
  }
  std::string bytes(size_t k) {
    k = std::min(k, n_ - std::min(at_, n_));
    std::string s(reinterpret_cast<const char*>(p_ + at_), k);
    at_ += k;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

// Writes inputs in that format (the seed recorder).
struct InputWriter {
  std::string out;
  void u8(uint8_t v) { out += static_cast<char>(v); }
  void u16(uint16_t v) {
    u8(static_cast<uint8_t>(v & 0xff));
    u8(static_cast<uint8_t>(v >> 8));
  }
  void send(uint8_t kind, std::string_view bytes) {
    u8(kind);
    u16(static_cast<uint16_t>(std::min<size_t>(bytes.size(), 0xffff)));
    out.append(bytes.substr(0, 0xffff));
  }
  void sync(uint8_t type) { u8(static_cast<uint8_t>(0x80 | (type & 0x3f))); }
};

// Replaces the tags in a frame's a and b fields (bytes 24 and 32 of its header).
inline void patch_tags(std::string& frame, uint64_t export_id, uint64_t key) {
  if (frame.size() < wire::kHeaderSize) return;
  auto* p = reinterpret_cast<uint8_t*>(frame.data());
  if (wire::get_u64(p + 24) == kExportTag) wire::put_u64(p + 24, export_id);
  if (wire::get_u64(p + 32) == kKeyTag) wire::put_u64(p + 32, key);
}

// Splits a byte stream the engine sends into frames (header, aux, payload)
// and counts them by type. A stream that stops being frames is dropped.
class FrameSplitter {
 public:
  explicit FrameSplitter(bool keep = false) : keep_(keep) {}
  void feed(const char* p, size_t n) {
    if (broken_) return;
    buf_.append(p, n);
    while (buf_.size() >= wire::kHeaderSize) {
      auto h = wire::decode_header(reinterpret_cast<const uint8_t*>(buf_.data()), wire::kHeaderSize);
      if (!h.ok()) {
        broken_ = true;
        buf_.clear();
        return;
      }
      size_t need = wire::kHeaderSize + h->aux_len + h->payload_len;
      if (buf_.size() < need) return;
      ++seen_[static_cast<uint8_t>(h->type)];
      if (keep_) frames_.push_back(buf_.substr(0, need));
      buf_.erase(0, need);
    }
  }
  int seen(uint8_t type) const {
    auto it = seen_.find(type);
    return it == seen_.end() ? 0 : it->second;
  }
  std::vector<std::string> take_frames() { return std::move(frames_); }

 private:
  bool keep_;
  bool broken_ = false;
  std::string buf_;
  std::map<uint8_t, int> seen_;
  std::vector<std::string> frames_;
};

// Reads what is waiting on `fd` without blocking into `s`; false at EOF or
// on an error.
inline bool drain_fd(int fd, FrameSplitter& s) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      s.feed(buf, static_cast<size_t>(n));
      continue;
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  }
}

// A peer over TCP that speaks the handshake itself (no secret), then sends
// whatever it is given and reads whatever the engine sends.
struct TcpPeer {
  platform::Socket ctl;
  std::vector<platform::Socket> data;
  std::vector<FrameSplitter> in;  // [0] control, [1 + i] data stream i
  std::vector<bool> open;
  std::map<uint8_t, int> synced;  // frames of each type already waited for

  Status dial(const std::string& address, int streams, Deadline d, bool keep = false) {
    FERRY_ASSIGN_OR_RETURN(platform::HostPort hp, platform::parse_host_port(address));
    FERRY_ASSIGN_OR_RETURN(ctl, platform::connect_tcp(hp, d));
    FERRY_RETURN_IF_ERROR(testing::hand_made_tcp_handshake(ctl.fd(), hp, "fuzz-peer", streams, d, data));
    // Without TCP_NODELAY a frame sent right after another waits for the
    // engine's delayed ACK (40 ms).
    FERRY_RETURN_IF_ERROR(platform::tune_stream(ctl, 0));
    for (const platform::Socket& s : data) FERRY_RETURN_IF_ERROR(platform::tune_stream(s, 0));
    in.assign(1 + data.size(), FrameSplitter(keep));
    open.assign(1 + data.size(), true);
    return Status();
  }

  int fd(size_t i) const { return i == 0 ? ctl.fd() : data[i - 1].fd(); }

  // Reads whatever the engine sent, on every stream.
  void drain() {
    for (size_t i = 0; i < in.size(); ++i) {
      if (open[i] && !drain_fd(fd(i), in[i])) open[i] = false;
    }
  }

  int seen(uint8_t type) const {
    int n = 0;
    for (const FrameSplitter& s : in) n += s.seen(type);
    return n;
  }

  // Sends all of `bytes` on stream `i`, reading the engine's frames while
  // the socket is full (the engine may be blocked writing to us); false if
  // the engine closed it or it stays full for `stall`.
  bool send(size_t i, std::string_view bytes, std::chrono::milliseconds stall = 200ms) {
    size_t off = 0;
    auto until = Clock::now() + stall;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd(i), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        off += static_cast<size_t>(n);
        until = Clock::now() + stall;
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      if (Clock::now() > until) return false;
      drain();
      pollfd p{fd(i), POLLOUT, 0};
      ::poll(&p, 1, 1);
    }
    return true;
  }

  // Waits until the engine has sent one more frame of `type` than earlier
  // syncs consumed, taking the time from `budget`; not at all once the
  // engine closed the control stream (it failed the connection).
  void sync(uint8_t type, Clock::duration& budget) {
    int want = ++synced[type];
    auto start = Clock::now();
    for (;;) {
      drain();
      if (seen(type) >= want || !open[0] || Clock::now() - start > budget) break;
      std::vector<pollfd> ps;
      for (size_t i = 0; i < in.size(); ++i) {
        if (open[i]) ps.push_back({fd(i), POLLIN, 0});
      }
      ::poll(ps.data(), ps.size(), 1);
    }
    auto spent = Clock::now() - start;
    budget = spent > budget ? Clock::duration::zero() : budget - spent;
  }

  // The peer's end: its streams say no more (data streams first, as an
  // engine closing in order does), then whatever the engine still sends is
  // read until it closes too or `deadline` passes.
  void finish(Deadline deadline) {
    for (size_t i = in.size(); i-- > 0;) ::shutdown(fd(i), SHUT_WR);
    while (Clock::now() < deadline && open[0]) {
      drain();
      pollfd p{ctl.fd(), POLLIN, 0};
      ::poll(&p, 1, 1);
    }
  }
};

// Memory with guard bytes on both sides that the engine must never touch:
// the kernel copies into registered memory on the engine's behalf (recv,
// cross-memory attach), where ASan does not look.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 4096;
  static constexpr uint8_t kPattern = 0xa5;
  explicit GuardedBuffer(size_t size) : size_(size), bytes_(new uint8_t[size + 2 * kGuard]) {
    std::memset(bytes_.get(), kPattern, size + 2 * kGuard);
  }
  uint8_t* data() { return bytes_.get() + kGuard; }
  size_t size() const { return size_; }
  // Aborts if a guard byte changed.
  void check() const {
    for (size_t i = 0; i < kGuard; ++i) {
      require(bytes_[i] == kPattern, "a byte before the registered memory was written");
      require(bytes_[kGuard + size_ + i] == kPattern, "a byte after the registered memory was written");
    }
  }

 private:
  size_t size_;
  std::unique_ptr<uint8_t[]> bytes_;
};

// The operations the engine's application posts before the peer's frames,
// one bit of the setup byte each, in this order (which fixes their ids).
// Sizes are small so that recorded inputs stay small, yet past inline_max
// and chunk_bytes of target_options() where a rendezvous or several chunks
// are meant.
enum Setup : uint8_t {
  kSetupRecvSmall = 1 << 0,  // recv of up to 2 KiB
  kSetupRecvLarge = 1 << 1,  // recv of up to 16 KiB
  kSetupSendEager = 1 << 2,  // send of 100 bytes
  kSetupSendLarge = 1 << 3,  // send of 9 KiB (a rendezvous, three chunks)
  kSetupWrite = 1 << 4,      // write of 600 bytes with a notification (inline)
  kSetupRead = 1 << 5,       // read of 600 bytes
  kSetupNotify = 1 << 6,     // notification
  kSetupWriteLarge = 1 << 7  // write of 9 KiB (three chunks)
};

// The engine's side of a stateful harness: its registered, exported memory.
inline constexpr size_t kTargetBytes = 1 << 20;

// The options of the engine under test (and of the engines that record its
// traffic): small inline and chunk sizes, short liveness times.
inline Options target_options(const std::string& transport) {
  Options o;
  o.transport = parse_transport(transport).value();
  o.local_same_process = true;
  o.listen = "127.0.0.1:0";
  o.log_level = LogLevel::kError;
  o.inline_max = 1024;
  o.chunk_bytes = 4096;
  o.peer_timeout = std::chrono::milliseconds(2000);
  // Every input starts with an honest handshake, and one that fails aborts
  // the harness: a fuzzer at the lowest priority on a loaded two-core host
  // waited over 2 s for a CPU, and the engine rightly gave up on it.
  o.handshake_timeout = std::chrono::milliseconds(30000);
  o.connection_memory_bytes = 8u << 20;
  // The engine lets go of a connection the application dropped on its next
  // heartbeat tick (half the interval): often, and room for those not yet
  // let go, at hundreds of connections a second.
  o.heartbeat_interval = std::chrono::milliseconds(20);
  o.max_connections = 1024;
  o.max_connections_per_peer = 1024;
  o.max_streams = 4096;
  return o;
}

// A descriptor of the peer's export (what the engine's writes and reads reach).
inline RemoteDescriptor peer_export() {
  RemoteDescriptor d;
  d.engine_id = kPeerEngineId;
  d.export_id = kPeerExportTag;
  d.key = kPeerKeyTag;
  d.length = kTargetBytes;
  return d;
}

inline std::vector<Transfer> post_setup(Connection& c, uint8_t setup, uint8_t* mem, const RemoteDescriptor& remote) {
  std::vector<Transfer> t;
  if (setup & kSetupRecvSmall) t.push_back(c.recv_async(mem, 2 << 10));
  if (setup & kSetupRecvLarge) t.push_back(c.recv_async(mem + (64 << 10), 16 << 10));
  if (setup & kSetupSendEager) t.push_back(c.send_async(mem + (600 << 10), 100));
  if (setup & kSetupSendLarge) t.push_back(c.send_async(mem + (600 << 10), 9 << 10));
  if (setup & kSetupWrite) t.push_back(c.write_async(mem + 4096, 600, remote, 128, "written"));
  if (setup & kSetupRead) t.push_back(c.read_async(mem + 8192, 600, remote, 64));
  if (setup & kSetupNotify) t.push_back(c.notify_async("fuzz note"));
  if (setup & kSetupWriteLarge) t.push_back(c.write_async(mem + 16384, 9 << 10, remote, 4096));
  return t;
}

// What the engine's application does at the end: every transfer it posted
// must have finished once the connection is closed.
inline void settle(Connection& c, std::vector<Transfer>& transfers) {
  while (c.poll_notification()) {
  }
  c.close();
  // Generous for a starved host (see target_options); close() itself does not wait.
  Deadline d = after(30s);
  for (Transfer& t : transfers) {
    (void)t.wait(d);
    require(t.test(), "an operation is still pending 30 s after its connection closed");
  }
}

}  // namespace ferry::fuzz
