// Handshake codecs.
#include "wire/handshake.h"

#include <algorithm>
#include <cstring>

namespace ferry::wire {
namespace {

constexpr size_t kMaxHostId = 255;
constexpr size_t kMaxAddresses = 32;

Status expect(const FrameHeader& h, FrameType t) {
  if (h.type == t) return Status();
  return Status(Code::kDataLoss, "handshake: expected a " + std::string(frame_type_name(t)) + " frame, got " +
                                     std::string(frame_type_name(h.type)));
}

template <size_t N>
std::string_view bytes_of(const std::array<uint8_t, N>& a) {
  return std::string_view(reinterpret_cast<const char*>(a.data()), N);
}

// nonce(32) | identity key(32) | host id
std::string hello_aux(const Hello& m) {
  std::string aux(bytes_of(m.nonce));
  aux += bytes_of(m.identity);
  aux += m.host_id.substr(0, kMaxHostId);
  return aux;
}

Status split_hello_aux(const std::string& aux, Hello& m) {
  constexpr size_t kFixed = sizeof(Nonce) + sizeof(IdentityKey);
  if (aux.size() < kFixed || aux.size() > kFixed + kMaxHostId) {
    return Status(Code::kDataLoss, "handshake: hello carries " + std::to_string(aux.size()) +
                                       " aux bytes, expected " + std::to_string(kFixed) + ".." +
                                       std::to_string(kFixed + kMaxHostId));
  }
  std::memcpy(m.nonce.data(), aux.data(), m.nonce.size());
  std::memcpy(m.identity.data(), aux.data() + m.nonce.size(), m.identity.size());
  m.host_id = aux.substr(kFixed);
  return Status();
}

// signature(64) | proof(32, only with a shared secret)
std::string signed_aux(const Signature& signature, bool has_proof, const Proof& p) {
  std::string aux(bytes_of(signature));
  if (has_proof) aux += bytes_of(p);
  return aux;
}

Status read_signed(const std::string& aux, Signature& signature, bool& has_proof, Proof& p, const char* what) {
  if (aux.size() != signature.size() && aux.size() != signature.size() + p.size()) {
    return Status(Code::kDataLoss, std::string("handshake: ") + what + " carries " + std::to_string(aux.size()) +
                                       " aux bytes, expected 64 or 96");
  }
  std::memcpy(signature.data(), aux.data(), signature.size());
  has_proof = aux.size() > signature.size();
  if (has_proof) std::memcpy(p.data(), aux.data() + signature.size(), p.size());
  return Status();
}

}  // namespace

EncodedFrame encode(const Hello& m) {
  EncodedFrame f;
  f.header.type = FrameType::kHello;
  f.header.code = static_cast<uint32_t>(m.min_version) | static_cast<uint32_t>(m.version) << 16;
  f.header.flags = static_cast<uint8_t>(m.role);
  f.header.id = m.engine_id;
  f.header.a = m.cookie;
  f.header.b = m.stream_index;
  f.header.c = m.streams;
  f.aux = m.role == StreamRole::kControl ? hello_aux(m) : std::string();
  f.header.aux_len = static_cast<uint16_t>(f.aux.size());
  return f;
}

Result<VersionRange> hello_versions(const FrameHeader& h) {
  FERRY_RETURN_IF_ERROR(expect(h, FrameType::kHello));
  VersionRange r;
  r.min = static_cast<uint16_t>(h.code & 0xffff);
  r.max = static_cast<uint16_t>(h.code >> 16);
  if (r.max == 0) r.max = r.min;  // an engine from before ranges: one version
  if (r.min == 0 || r.min > r.max) {
    return Status(Code::kDataLoss, "handshake: hello offers no protocol version (" + std::to_string(r.min) + ".." +
                                       std::to_string(r.max) + ")");
  }
  return r;
}

std::string to_string(VersionRange r) {
  if (r.min == r.max) return "version " + std::to_string(r.min);
  return "versions " + std::to_string(r.min) + ".." + std::to_string(r.max);
}

Result<uint16_t> negotiate(VersionRange ours, VersionRange theirs) {
  uint16_t best = std::min(ours.max, theirs.max);
  if (best >= ours.min && best >= theirs.min) return best;
  return Status(Code::kUnimplemented,
                "no protocol version in common: the connecting engine speaks " + to_string(theirs) +
                    ", the accepting engine " + to_string(ours) +
                    (theirs.max < ours.min ? " (upgrade the connecting engine)" : " (upgrade the accepting engine)"));
}

Result<Hello> decode_hello(const FrameHeader& h, const std::string& aux) {
  FERRY_ASSIGN_OR_RETURN(VersionRange versions, hello_versions(h));
  Hello m;
  m.min_version = versions.min;
  m.version = versions.max;
  if (h.flags != static_cast<uint8_t>(StreamRole::kControl) && h.flags != static_cast<uint8_t>(StreamRole::kData)) {
    return Status(Code::kDataLoss, "handshake: hello has unknown stream role " + std::to_string(h.flags));
  }
  m.role = static_cast<StreamRole>(h.flags);
  m.engine_id = h.id;
  m.cookie = h.a;
  if (h.b > 1024 || h.c > 1024) return Status(Code::kDataLoss, "handshake: hello stream counts out of range");
  m.stream_index = static_cast<uint32_t>(h.b);
  m.streams = static_cast<uint32_t>(h.c);
  if (m.role == StreamRole::kControl) {
    FERRY_RETURN_IF_ERROR(split_hello_aux(aux, m));
  } else if (!aux.empty()) {
    return Status(Code::kDataLoss, "handshake: data-stream hello carries unexpected aux bytes");
  }
  return m;
}

EncodedFrame encode(const Welcome& m) {
  EncodedFrame f;
  f.header.type = FrameType::kWelcome;
  f.header.code = m.version;
  f.header.id = m.engine_id;
  f.header.flags = static_cast<uint8_t>((m.auth_required ? 1 : 0) | (m.local_ok ? 2 : 0));
  // nonce(32) | identity key(32) | u8 len | host id | u8 count | (u8 len | address)*
  f.aux.assign(bytes_of(m.nonce));
  f.aux += bytes_of(m.identity);
  std::string host = m.host_id.substr(0, 255);
  f.aux += static_cast<char>(host.size());
  f.aux += host;
  size_t count = std::min<size_t>(m.addresses.size(), kMaxAddresses);
  f.aux += static_cast<char>(count);
  for (size_t i = 0; i < count; ++i) {
    std::string a = m.addresses[i].substr(0, 255);
    f.aux += static_cast<char>(a.size());
    f.aux += a;
  }
  f.header.aux_len = static_cast<uint16_t>(f.aux.size());
  return f;
}

Result<Welcome> decode_welcome(const FrameHeader& h, const std::string& aux) {
  FERRY_RETURN_IF_ERROR(expect(h, FrameType::kWelcome));
  Welcome m;
  m.version = static_cast<uint16_t>(h.code);
  m.engine_id = h.id;
  m.auth_required = (h.flags & 1) != 0;
  m.local_ok = (h.flags & 2) != 0;
  size_t off = 0;
  auto truncated = [] { return Status(Code::kDataLoss, "handshake: welcome is truncated"); };
  if (aux.size() < m.nonce.size() + m.identity.size()) return truncated();
  std::memcpy(m.nonce.data(), aux.data(), m.nonce.size());
  std::memcpy(m.identity.data(), aux.data() + m.nonce.size(), m.identity.size());
  off = m.nonce.size() + m.identity.size();
  auto take = [&](std::string& out) -> bool {
    if (off >= aux.size()) return false;
    size_t len = static_cast<uint8_t>(aux[off++]);
    if (off + len > aux.size()) return false;
    out = aux.substr(off, len);
    off += len;
    return true;
  };
  if (!take(m.host_id)) return truncated();
  if (off >= aux.size()) return truncated();
  size_t count = static_cast<uint8_t>(aux[off++]);
  if (count > kMaxAddresses) return Status(Code::kDataLoss, "handshake: welcome lists too many addresses");
  for (size_t i = 0; i < count; ++i) {
    std::string a;
    if (!take(a)) return truncated();
    m.addresses.push_back(std::move(a));
  }
  if (off != aux.size()) return Status(Code::kDataLoss, "handshake: welcome has trailing bytes");
  return m;
}

EncodedFrame encode(const Auth& m) {
  EncodedFrame f;
  f.header.type = FrameType::kAuth;
  f.header.a = m.streams;
  f.aux = signed_aux(m.signature, m.has_proof, m.proof);
  f.header.aux_len = static_cast<uint16_t>(f.aux.size());
  return f;
}

Result<Auth> decode_auth(const FrameHeader& h, const std::string& aux) {
  FERRY_RETURN_IF_ERROR(expect(h, FrameType::kAuth));
  Auth m;
  FERRY_RETURN_IF_ERROR(read_signed(aux, m.signature, m.has_proof, m.proof, "auth"));
  if (h.a > 1024) return Status(Code::kDataLoss, "handshake: auth asks for " + std::to_string(h.a) + " data streams");
  m.streams = static_cast<uint32_t>(h.a);
  return m;
}

EncodedFrame encode(const Accepted& m) {
  EncodedFrame f;
  f.header.type = FrameType::kAccepted;
  f.header.a = m.cookie;
  f.header.b = m.connection_id;
  f.aux = signed_aux(m.signature, m.has_proof, m.proof);
  f.header.aux_len = static_cast<uint16_t>(f.aux.size());
  return f;
}

Result<Accepted> decode_accepted(const FrameHeader& h, const std::string& aux) {
  FERRY_RETURN_IF_ERROR(expect(h, FrameType::kAccepted));
  Accepted m;
  m.cookie = h.a;
  m.connection_id = h.b;
  FERRY_RETURN_IF_ERROR(read_signed(aux, m.signature, m.has_proof, m.proof, "accepted"));
  return m;
}

EncodedFrame encode(const Rejected& m) {
  EncodedFrame f;
  f.header.type = FrameType::kRejected;
  f.header.code = static_cast<uint32_t>(m.code);
  f.aux = m.message.substr(0, 1024);
  f.header.aux_len = static_cast<uint16_t>(f.aux.size());
  return f;
}

Result<Rejected> decode_rejected(const FrameHeader& h, const std::string& aux) {
  FERRY_RETURN_IF_ERROR(expect(h, FrameType::kRejected));
  Rejected m;
  m.code =
      h.code <= static_cast<uint32_t>(Code::kInternal) && h.code != 0 ? static_cast<Code>(h.code) : Code::kUnavailable;
  m.message = aux;
  return m;
}

std::string client_proof_input(const Nonce& client, const Nonce& server) {
  std::string s = "ferry-v1-client";
  s.append(reinterpret_cast<const char*>(client.data()), client.size());
  s.append(reinterpret_cast<const char*>(server.data()), server.size());
  return s;
}

std::string server_proof_input(const Nonce& client, const Nonce& server) {
  std::string s = "ferry-v1-server";
  s.append(reinterpret_cast<const char*>(server.data()), server.size());
  s.append(reinterpret_cast<const char*>(client.data()), client.size());
  return s;
}

std::string identity_input(Signer signer, const Hello& hello, const Welcome& welcome) {
  std::string s = signer == Signer::kConnector ? "ferry-v5-connector-identity" : "ferry-v5-acceptor-identity";
  s += bytes_of(hello.nonce);
  s += bytes_of(welcome.nonce);
  s += bytes_of(hello.identity);
  s += bytes_of(welcome.identity);
  return s;
}

}  // namespace ferry::wire
