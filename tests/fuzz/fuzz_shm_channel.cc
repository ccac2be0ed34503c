// Plays a hostile same-host peer against the local transport's shared-memory
// channel. The peer maps the channel file writable, so every byte of it is
// the peer's to change at any time: the head of the ring it produces into,
// the tail of the ring it consumes, the ring's bytes (lengths and wrap
// markers included) and the rest of the header. The input is a sequence of
// such writes, honest posts and reads by the peer, and the engine side's
// receive() and try_post().
//
// ASan cannot see past the end of a mapping, so the harness checks the
// engine side's accesses itself, from the bytes the peer can see: a message
// received lies wholly inside the ring at the consumer's position (or at the
// start after a wrap marker), preceded by its length, and never past what
// was published; a message posted lands inside the engine's own ring, at its
// position, with room the peer's tail allowed, and nothing else in either
// data area changes. While the peer stays honest, messages arrive intact and
// in order.
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "transport/local/shm_channel.h"

namespace {

using ferry::local::ShmChannel;

constexpr size_t kRing = 4096;
constexpr uint32_t kWrap = 0xffffffffu;

void require(bool ok) {
  if (!ok) std::abort();
}

size_t align8(size_t n) { return (n + 7) & ~size_t{7}; }

struct PeerView {
  explicit PeerView(int fd) {
    struct stat st {};
    require(::fstat(fd, &st) == 0);
    bytes = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    require(p != MAP_FAILED);
    base = static_cast<uint8_t*>(p);
  }
  ~PeerView() { ::munmap(base, bytes); }
  uint64_t u64(size_t at) const {
    uint64_t v;
    std::memcpy(&v, base + at, 8);
    return v;
  }
  uint32_t u32(size_t at) const {
    uint32_t v;
    std::memcpy(&v, base + at, 4);
    return v;
  }
  void put_u64(size_t at, uint64_t v) { std::memcpy(base + at, &v, 8); }
  uint8_t* base = nullptr;
  size_t bytes = 0;
};

// A value near `base` (most garbage that matters is off by a little), or
// anything at all.
uint64_t near_or_any(FuzzedDataProvider& in, uint64_t base) {
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      return base + in.ConsumeIntegralInRange<int64_t>(-2 * kRing, 2 * kRing);
    case 1:
      return base - in.ConsumeIntegral<uint64_t>();
    default:
      return in.ConsumeIntegral<uint64_t>();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  auto created = ShmChannel::create(kRing, 77);
  require(created.ok());
  ShmChannel peer = std::move(created).value();  // side 0: the hostile peer's own object
  auto attached = ShmChannel::attach(::dup(peer.fd()), 77);
  require(attached.ok());
  ShmChannel engine = std::move(attached).value();  // side 1: what the engine runs
  PeerView view(peer.fd());
  const size_t d0 = engine.data_offset(0), d1 = engine.data_offset(1);
  require(d1 == d0 + kRing && view.bytes == d1 + kRing);
  const size_t head0 = ShmChannel::head_offset(0), tail0 = ShmChannel::tail_offset(0);
  const size_t head1 = ShmChannel::head_offset(1), tail1 = ShmChannel::tail_offset(1);

  uint64_t engine_tail = 0;  // the engine's own index into ring 0, as it last published it
  uint64_t engine_head = 0;  // ... and into ring 1
  bool honest = true;
  std::deque<std::string> sent;  // posted by the honest peer, not yet received

  for (int steps = 0; steps < 256 && in.remaining_bytes() > 0; ++steps) {
    switch (in.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: {  // the peer posts honestly
        std::string m = in.ConsumeRandomLengthString(kRing);
        std::string body = in.ConsumeRandomLengthString(kRing);
        if (peer.try_post(m, body)) sent.push_back(m + body);
        break;
      }
      case 1: {  // the engine takes the next message
        uint64_t h = view.u64(head0);
        std::string out;
        auto r = engine.receive(out);
        if (!r.ok() || !*r) {
          if (r.ok() && honest) require(sent.empty());
          break;
        }
        uint64_t t = engine_tail;
        size_t at = t % kRing;
        if (view.u32(d0 + at) == kWrap) {
          t += kRing - at;
          at = 0;
        }
        require(view.u32(d0 + at) == out.size());
        require(at + 4 + out.size() <= kRing);
        require(std::memcmp(view.base + d0 + at + 4, out.data(), out.size()) == 0);
        uint64_t t1 = view.u64(tail0);
        require(t1 == t + align8(4 + out.size()) && t1 <= h);
        engine_tail = t1;
        if (honest) {
          require(!sent.empty() && sent.front() == out);
          sent.pop_front();
        }
        break;
      }
      case 2:  // the peer publishes a head of its choosing
        view.put_u64(head0, near_or_any(in, view.u64(head0)));
        honest = false;
        break;
      case 3:  // ... and a tail of the engine's ring
        view.put_u64(tail1, near_or_any(in, engine_head));
        break;
      case 4: {  // ... and bytes of its own ring: lengths, wrap markers, anything
        size_t off = in.ConsumeIntegralInRange<size_t>(0, kRing - 1);
        std::vector<uint8_t> b = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(1, kRing - off));
        if (in.ConsumeBool() && off + 4 <= kRing) {
          uint32_t len = in.ConsumeBool() ? kWrap : in.ConsumeIntegral<uint32_t>();
          off &= ~size_t{7};
          std::memcpy(view.base + d0 + off, &len, 4);
        } else if (!b.empty()) {
          std::memcpy(view.base + d0 + off, b.data(), b.size());
        }
        honest = false;
        break;
      }
      case 5: {  // the engine posts into its ring
        std::string head = in.ConsumeRandomLengthString(kRing);
        std::string body = in.ConsumeRandomLengthString(kRing);
        std::vector<uint8_t> before(view.base, view.base + view.bytes);
        uint64_t tail = view.u64(tail1);
        bool posted = engine.try_post(head, body);
        // Ring 0 is the peer's: the engine never writes it.
        require(std::memcmp(before.data() + d0, view.base + d0, kRing) == 0);
        if (!posted) {
          require(std::memcmp(before.data() + d1, view.base + d1, kRing) == 0);
          break;
        }
        size_t len = head.size() + body.size();
        size_t need = align8(4 + len);
        uint64_t h = engine_head;
        size_t at = h % kRing;
        size_t wrap_at = kRing;
        if (need > kRing - at) {
          require(view.u32(d1 + at) == kWrap);
          wrap_at = at;
          h += kRing - at;
          at = 0;
        }
        require(at + 4 + len <= kRing);
        require(view.u32(d1 + at) == len);
        require(std::memcmp(view.base + d1 + at + 4, head.data(), head.size()) == 0);
        require(std::memcmp(view.base + d1 + at + 4 + head.size(), body.data(), body.size()) == 0);
        // Room: the tail allowed it.
        require(tail <= h && h + need - tail <= kRing);
        for (size_t i = 0; i < kRing; ++i) {
          bool written = (i >= at && i < at + 4 + len) || (i >= wrap_at && i < wrap_at + 4);
          if (!written) require(before[d1 + i] == view.base[d1 + i]);
        }
        engine_head = h + need;
        require(view.u64(head1) == engine_head);
        break;
      }
      case 6: {  // the peer reads its incoming ring
        std::string out;
        (void)peer.receive(out);
        break;
      }
      case 7: {  // anything else in the header: magic, sizes, futex words, beats
        size_t off = in.ConsumeIntegralInRange<size_t>(0, d0 / 8 - 1) * 8;
        view.put_u64(off, in.ConsumeIntegral<uint64_t>());
        honest = honest && off != head0 && off != tail0;
        (void)engine.readable();
        (void)engine.peer_beats();
        engine.beat();
        break;
      }
    }
  }
  return 0;
}
