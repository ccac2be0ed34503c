// Plays a hostile peer against a real engine over TCP. The peer completes an
// honest handshake (HELLO, AUTH without a secret, its data streams) with an
// engine listening on loopback, the engine's application posts some
// operations (receives, sends, writes to and reads from the peer, a
// notification), and then the peer sends the input's frames, on the control
// stream or on a data stream, interleaved with waits for the engine's
// answers. Every frame type reaches the engine's frame dispatch this way:
// eager messages, rendezvous and their data, writes into the engine's
// export, read requests, acknowledgements, notifications, chunk
// acknowledgements, and whatever bytes are not frames at all.
//
// Afterwards the peer closes its streams and the application closes the
// connection: every operation it posted must have finished, and no byte may
// have landed outside the engine's registered memory (guard bytes around it;
// the kernel writes received bytes there, out of ASan's sight). One engine
// serves every input, so leaks and held resources across connections show.
//
// Records (see fuzz_peer.h): kind bit 0 clear: the control stream; set:
// data stream (kind >> 1) % streams. The bytes of a record go out as they
// are (a header, its aux and payload, or anything), after kExportTag and
// kKeyTag in a header's a and b fields are replaced.
#include <cstddef>
#include <cstdint>

#include "fuzz_peer.h"

namespace {

using namespace ferry;
using namespace ferry::fuzz;

struct Target {
  std::unique_ptr<Engine> engine;
  GuardedBuffer memory{kTargetBytes};
  RemoteDescriptor exported;

  Target() {
    auto e = Engine::create(target_options("tcp"));
    require(e.ok());
    engine = std::move(e).value();
    auto r = engine->reg(memory.data(), memory.size());
    require(r.ok());
    auto d = engine->export_region(*r);
    require(d.ok());
    exported = *d;
  }
};

Target& target() {
  static Target* t = new Target();  // lives until exit: its threads outlast every input
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Target& t = target();
  Reader in(data, size);
  uint8_t setup = in.u8();
  int streams = 1 + in.u8() % 2;
  TcpPeer peer;
  require_ok(peer.dial(t.engine->address(), streams, after(30s)), "handshake");
  auto accepted = t.engine->accept(after(30s));
  require_ok(accepted.status(), "accept");
  std::shared_ptr<Connection> conn = std::move(accepted).value();
  std::vector<Transfer> ops = post_setup(*conn, setup, t.memory.data(), peer_export());

  Clock::duration sync_budget = kSyncBudget;
  while (!in.done()) {
    uint8_t kind = in.u8();
    if (kind >= 0x80) {
      peer.sync(kind & 0x3f, sync_budget);
      continue;
    }
    std::string bytes = in.bytes(in.u16());
    patch_tags(bytes, t.exported.export_id, t.exported.key);
    size_t stream = (kind & 1) ? 1 + (kind >> 1) % peer.data.size() : 0;
    if (!peer.open[stream] || !peer.send(stream, bytes)) break;
    peer.drain();
  }
  peer.finish(after(3s));
  settle(*conn, ops);
  t.memory.check();
  return 0;
}
