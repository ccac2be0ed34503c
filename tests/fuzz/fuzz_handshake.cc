// Feeds a frame header and its aux bytes to every handshake decoder (HELLO,
// WELCOME, AUTH, ACCEPTED, REJECTED): the messages an acceptor reads from
// anyone who connects, and a connector from whatever answers, before either
// side knows who the other is. A message a decoder accepts must encode to
// one that decodes to the same fields.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "wire/handshake.h"

namespace {

using namespace ferry::wire;

void require(bool ok) {
  if (!ok) std::abort();
}

ferry::Result<FrameHeader> redecode(const EncodedFrame& f) {
  HeaderBytes hb;
  encode_header(f.header, hb);
  return decode_header(hb.data(), hb.size());
}

void check_hello(const FrameHeader& h, const std::string& aux) {
  // The offer is read from the header alone, and agrees with the decode.
  auto versions = hello_versions(h);
  if (versions.ok()) {
    require(versions->min >= 1 && versions->min <= versions->max);
    auto chosen = negotiate(kSpokenVersions, *versions);
    require(!chosen.ok() || (*chosen >= versions->min && *chosen <= versions->max && *chosen >= kSpokenVersions.min &&
                             *chosen <= kSpokenVersions.max));
  }
  auto m = decode_hello(h, aux);
  if (!m.ok()) return;
  require(versions.ok() && versions->min == m->min_version && versions->max == m->version);
  EncodedFrame f = encode(*m);
  auto fh = redecode(f);
  require(fh.ok() && f.header.aux_len == f.aux.size());
  auto again = decode_hello(*fh, f.aux);
  require(again.ok());
  require(again->version == m->version && again->min_version == m->min_version && again->role == m->role &&
          again->engine_id == m->engine_id && again->streams == m->streams && again->cookie == m->cookie &&
          again->stream_index == m->stream_index && again->nonce == m->nonce && again->host_id == m->host_id);
}

void check_welcome(const FrameHeader& h, const std::string& aux) {
  auto m = decode_welcome(h, aux);
  if (!m.ok()) return;
  require(m->addresses.size() <= 32 && m->host_id.size() <= 255);
  EncodedFrame f = encode(*m);
  auto fh = redecode(f);
  require(fh.ok() && f.header.aux_len == f.aux.size());
  auto again = decode_welcome(*fh, f.aux);
  require(again.ok());
  require(again->version == m->version && again->engine_id == m->engine_id &&
          again->auth_required == m->auth_required && again->local_ok == m->local_ok && again->nonce == m->nonce &&
          again->host_id == m->host_id && again->addresses == m->addresses);
}

void check_auth(const FrameHeader& h, const std::string& aux) {
  auto m = decode_auth(h, aux);
  if (!m.ok()) return;
  require(m->streams <= 1024);
  EncodedFrame f = encode(*m);
  auto fh = redecode(f);
  require(fh.ok());
  auto again = decode_auth(*fh, f.aux);
  require(again.ok() && again->has_proof == m->has_proof && again->streams == m->streams &&
          (!m->has_proof || again->proof == m->proof));
}

void check_accepted(const FrameHeader& h, const std::string& aux) {
  auto m = decode_accepted(h, aux);
  if (!m.ok()) return;
  EncodedFrame f = encode(*m);
  auto fh = redecode(f);
  require(fh.ok());
  auto again = decode_accepted(*fh, f.aux);
  require(again.ok() && again->cookie == m->cookie && again->connection_id == m->connection_id &&
          again->has_proof == m->has_proof && (!m->has_proof || again->proof == m->proof));
}

void check_rejected(const FrameHeader& h, const std::string& aux) {
  auto m = decode_rejected(h, aux);
  if (!m.ok()) return;
  require(m->code != ferry::Code::kOk);
  EncodedFrame f = encode(*m);
  auto fh = redecode(f);
  require(fh.ok());
  auto again = decode_rejected(*fh, f.aux);
  require(again.ok() && again->code == m->code && m->message.compare(0, again->message.size(), again->message) == 0);
}

}  // namespace

// Input: the 64-byte header as a peer sends it, then the aux bytes that
// follow it (at most what a u16 length can announce).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = decode_header(data, size);
  if (!h.ok()) return 0;
  std::string aux(reinterpret_cast<const char*>(data) + kHeaderSize, std::min<size_t>(size - kHeaderSize, kMaxAux));
  check_hello(*h, aux);
  check_welcome(*h, aux);
  check_auth(*h, aux);
  check_accepted(*h, aux);
  check_rejected(*h, aux);
  // Proof inputs are built from whatever nonces arrived.
  if (aux.size() >= 64) {
    Nonce a, b;
    std::copy(aux.begin(), aux.begin() + 32, a.begin());
    std::copy(aux.begin() + 32, aux.begin() + 64, b.begin());
    require(client_proof_input(a, b) != server_proof_input(a, b));
  }
  return 0;
}
