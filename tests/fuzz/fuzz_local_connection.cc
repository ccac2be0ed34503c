// Plays a hostile same-host peer against a real engine's local transport.
// The peer does the whole handshake (HELLO and AUTH asking for the local
// transport, then LOCAL_SETUP: it creates the shared channel, proves who it
// is through the kernel and hands the channel over), the engine's
// application posts some operations, and then the peer drives the engine's
// progress loop through the channel: the input's messages go into the ring
// the engine reads, interleaved with waits for the engine's answers, with
// writes of the ring's head and of the tail of the engine's ring, and with
// raw bytes in the ring. Every message type reaches the engine's handlers
// this way: eager messages, rendezvous (LOCAL_RTS, LOCAL_CTS, LOCAL_DONE),
// export openings and their answers, pulls and pushes into the engine's
// export, notifications, revocations, CLOSE.
//
// Two engines of one process need Options::local_same_process, so the peer's
// memory is this process's: the spans the peer names (host memory, by
// address) are moved into a window the harness owns, the first part of it
// readable and writable "peer memory", the rest inaccessible, so that the
// engine's copies reach only what a real peer could name, its own memory.
// Afterwards: every operation the application posted has finished, no byte
// landed outside the engine's registered memory (guard bytes; the kernel
// copies there, out of ASan's sight), and no byte of the peer memory that
// no span named was written.
//
// Records (see fuzz_peer.h): kind < 0x80: a message for the ring (header,
// aux, payload); 0xc0: the peer publishes its ring's head moved by an i16;
// 0xc1: it publishes the tail of the engine's ring moved by an i16; 0xc2:
// u16 offset and 8 bytes written into its ring.
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>

#include "fuzz_peer.h"
#include "platform/crypto.h"
#include "transport/local/peer_proof.h"
#include "transport/local/shared_span.h"
#include "transport/local/shm_channel.h"
#include "wire/metadata.h"

namespace {

using namespace ferry;
using namespace ferry::fuzz;
using local::ShmChannel;

constexpr size_t kRing = 256 << 10;
// Where a peer's span addresses are moved: its first kPeerBytes are the
// peer's memory, the rest of it is mapped without access.
constexpr uint64_t kWindow = uint64_t{1} << 36;
constexpr uint64_t kReach = kWindow - (uint64_t{1} << 30);  // a span starts below this
constexpr size_t kPeerBytes = 2 << 20;
constexpr uint8_t kPeerPattern = 0x5a;

struct Target {
  std::unique_ptr<Engine> engine;
  std::string host_id;
  GuardedBuffer memory{kTargetBytes};
  RemoteDescriptor exported;
  uint8_t* window = nullptr;

  Target() {
    auto e = Engine::create(target_options("local"));
    require(e.ok());
    engine = std::move(e).value();
    auto m = wire::decode_metadata(engine->metadata());
    require(m.ok());
    host_id = m->host_id;
    auto r = engine->reg(memory.data(), memory.size());
    require(r.ok());
    auto d = engine->export_region(*r);
    require(d.ok());
    exported = *d;
    void* w = ::mmap(nullptr, kWindow, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    require(w != MAP_FAILED);
    window = static_cast<uint8_t*>(w);
    require(::mprotect(window, kPeerBytes, PROT_READ | PROT_WRITE) == 0);
    std::memset(window, kPeerPattern, kPeerBytes);
  }
};

Target& target() {
  static Target* t = new Target();  // lives until exit: its threads outlast every input
  return *t;
}

// The peer's end of a local connection.
struct LocalPeer {
  platform::Socket ctl;
  ShmChannel channel;
  FrameSplitter in;  // what the engine posted, message by message
  std::map<uint8_t, int> synced;

  Status dial(const Target& t, Deadline d) {
    FERRY_ASSIGN_OR_RETURN(platform::HostPort hp, platform::parse_host_port(t.engine->address()));
    FERRY_ASSIGN_OR_RETURN(ctl, platform::connect_tcp(hp, d));
    // streams 0: the local transport.
    FERRY_RETURN_IF_ERROR(testing::hand_made_hello(ctl.fd(), t.host_id, 0, d).status());
    uint64_t nonce = platform::random_u64();
    FERRY_ASSIGN_OR_RETURN(channel, ShmChannel::create(kRing, nonce));
    FERRY_ASSIGN_OR_RETURN(local::RendezvousListener rendezvous, local::RendezvousListener::open());
    wire::EncodedFrame setup;
    setup.header.type = wire::FrameType::kLocalSetup;
    std::memcpy(&setup.header.a, rendezvous.ticket().data(), 8);
    std::memcpy(&setup.header.b, rendezvous.ticket().data() + 8, 8);
    setup.header.c = nonce;
    setup.aux = rendezvous.name();
    setup.header.aux_len = static_cast<uint16_t>(setup.aux.size());
    FERRY_RETURN_IF_ERROR(bootstrap::write_handshake_frame(ctl.fd(), setup, d));
    FERRY_RETURN_IF_ERROR(rendezvous.hand_over(channel.fd(), ctl.fd(), local::PeerPolicy{false, true}, d).status());
    FERRY_ASSIGN_OR_RETURN(auto ready, bootstrap::read_handshake_frame(ctl.fd(), d));
    FERRY_RETURN_IF_ERROR(testing::rejected_status(ready));
    if (ready.header.type != wire::FrameType::kLocalReady) return Status(Code::kDataLoss, "expected LOCAL_READY");
    return Status();
  }

  // Takes what the engine posted. False once its ring holds garbage (it is
  // not read again).
  bool broken = false;
  void drain() {
    std::string msg;
    while (!broken) {
      auto r = channel.receive(msg);
      if (!r.ok()) {
        broken = true;
        return;
      }
      if (!*r) return;
      in.feed(msg.data(), msg.size());
    }
    channel.beat();
  }

  bool post(std::string_view msg, std::chrono::milliseconds patience = 50ms) {
    auto until = Clock::now() + patience;
    while (!channel.try_post(msg, {})) {
      if (!channel.fits(msg.size()) || Clock::now() > until) return false;
      drain();
      std::this_thread::yield();
    }
    return true;
  }

  // Waits until the engine has posted one more message of `type` than
  // earlier syncs consumed, taking the time from `budget`; not at all once
  // the connection failed.
  void sync(uint8_t type, Clock::duration& budget, const Connection& conn) {
    int want = ++synced[type];
    auto start = Clock::now();
    while (Clock::now() - start < budget && !broken && conn.health().ok()) {
      drain();
      if (in.seen(type) >= want) break;
      std::this_thread::yield();
    }
    auto spent = Clock::now() - start;
    budget = spent > budget ? Clock::duration::zero() : budget - spent;
  }
};

// Peer memory that spans named, clipped to the readable part of the window.
struct Named {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [from, to) offsets into the window
  void add(uint64_t offset, uint64_t length) {
    if (offset >= kPeerBytes) return;
    ranges.emplace_back(offset, offset + std::min<uint64_t>(length, kPeerBytes - offset));
  }
};

bool carries_spans(wire::FrameType t) {
  using wire::FrameType;
  return t == FrameType::kLocalRts || t == FrameType::kLocalCts || t == FrameType::kLocalExport ||
         t == FrameType::kLocalPull || t == FrameType::kLocalPush;
}

// Moves the host spans of a message into the window (their addresses become
// offsets into it) and records what they name.
void move_spans(std::string& msg, const Target& t, Named& named) {
  auto h = wire::decode_header(reinterpret_cast<const uint8_t*>(msg.data()), msg.size());
  if (!h.ok() || !carries_spans(h->type)) return;
  size_t at = wire::kHeaderSize + h->aux_len;
  if (at + h->payload_len != msg.size()) return;
  std::string_view payload(msg.data() + at, h->payload_len);
  auto spans = local::decode_spans(payload);
  if (!spans.ok()) return;
  for (local::SharedSpan& s : *spans) {
    if (s.gpu()) continue;
    uint64_t offset = s.address % kReach;
    s.address = reinterpret_cast<uint64_t>(t.window) + offset;
    named.add(offset, s.length);
  }
  std::string encoded;
  local::encode_spans(*spans, encoded);
  msg.replace(at, encoded.size(), encoded);
}

void check_peer_memory(Target& t, Named& named) {
  std::sort(named.ranges.begin(), named.ranges.end());
  uint64_t pos = 0;
  static const std::vector<uint8_t> pattern(kPeerBytes, kPeerPattern);
  auto untouched = [&](uint64_t from, uint64_t to) {
    require(std::memcmp(t.window + from, pattern.data(), to - from) == 0, "peer memory no span named was written");
  };
  for (const auto& [from, to] : named.ranges) {
    if (from > pos) untouched(pos, from);
    pos = std::max(pos, to);
  }
  untouched(pos, kPeerBytes);
  // What spans named goes back to the pattern for the next input.
  for (const auto& [from, to] : named.ranges) std::memset(t.window + from, kPeerPattern, to - from);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Target& t = target();
  Reader in(data, size);
  uint8_t setup = in.u8();
  (void)in.u8();  // streams: TCP only
  LocalPeer peer;
  require_ok(peer.dial(t, after(30s)), "handshake");
  auto accepted = t.engine->accept(after(30s));
  require_ok(accepted.status(), "accept");
  std::shared_ptr<Connection> conn = std::move(accepted).value();
  std::vector<Transfer> ops = post_setup(*conn, setup, t.memory.data(), peer_export());

  Named named;
  Clock::duration sync_budget = kSyncBudget;
  int fd = peer.channel.fd();
  auto put_u64 = [fd](size_t at, uint64_t v) { require(::pwrite(fd, &v, 8, static_cast<off_t>(at)) == 8); };
  auto get_u64 = [fd](size_t at) {
    uint64_t v = 0;
    require(::pread(fd, &v, 8, static_cast<off_t>(at)) == 8);
    return v;
  };
  while (!in.done()) {
    uint8_t kind = in.u8();
    if (kind >= 0xc0) {
      int16_t delta = static_cast<int16_t>(in.u16());
      if (kind == 0xc0) {
        put_u64(ShmChannel::head_offset(0), get_u64(ShmChannel::head_offset(0)) + delta);
      } else if (kind == 0xc1) {
        put_u64(ShmChannel::tail_offset(1), get_u64(ShmChannel::tail_offset(1)) + delta);
      } else {
        std::string b = in.bytes(8);
        size_t off = static_cast<uint16_t>(delta) % kRing;
        require(::pwrite(fd, b.data(), std::min(b.size(), kRing - off),
                         static_cast<off_t>(peer.channel.data_offset(0) + off)) >= 0);
      }
      continue;
    }
    if (kind >= 0x80) {
      peer.sync(kind & 0x3f, sync_budget, *conn);
      continue;
    }
    std::string msg = in.bytes(in.u16());
    patch_tags(msg, t.exported.export_id, t.exported.key);
    move_spans(msg, t, named);
    if (!peer.post(msg)) break;
    peer.drain();
  }
  // The peer closes in order: CLOSE, then the engine's answer (or its
  // failure), then the control stream.
  wire::FrameHeader close;
  close.type = wire::FrameType::kClose;
  wire::HeaderBytes hb;
  wire::encode_header(close, hb);
  bool posted = peer.post(std::string_view(reinterpret_cast<const char*>(hb.data()), hb.size()));
  auto until = Clock::now() + 3s;
  while (posted && Clock::now() < until && conn->health().ok() &&
         peer.in.seen(static_cast<uint8_t>(wire::FrameType::kClose)) == 0) {
    peer.drain();
    std::this_thread::yield();
  }
  peer.ctl.reset();
  settle(*conn, ops);
  t.memory.check();
  check_peer_memory(t, named);
  return 0;
}
