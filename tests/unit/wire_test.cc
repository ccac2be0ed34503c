// Wire codecs: frame header, handshake messages, metadata blob, RemoteDescriptor (incl. a fuzz loop).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ferry/memory.h"
#include "testing/random_data.h"
#include "wire/frame.h"
#include "wire/handshake.h"
#include "wire/metadata.h"

namespace ferry::wire {
namespace {

const std::vector<FrameType> kAllTypes = {
    FrameType::kHello, FrameType::kWelcome,   FrameType::kAuth,    FrameType::kAccepted, FrameType::kRejected,
    FrameType::kReady, FrameType::kHeartbeat, FrameType::kClose,   FrameType::kEager,    FrameType::kRts,
    FrameType::kCts,   FrameType::kAck,       FrameType::kReadReq, FrameType::kNotify,   FrameType::kChunkAck,
    FrameType::kData,  FrameType::kWrite,     FrameType::kLocalSetup, FrameType::kLocalReady, FrameType::kLocalRts,
    FrameType::kLocalCts, FrameType::kLocalDone, FrameType::kLocalOpen, FrameType::kLocalExport, FrameType::kLocalPull,
    FrameType::kLocalPush, FrameType::kLocalNote, FrameType::kLocalRevoke};

using testing::fill_random_bytes;
using testing::random_bytes;

HeaderBytes encoded(const FrameHeader& h) {
  HeaderBytes b{};
  encode_header(h, b);
  return b;
}

// ---- frame header ---------------------------------------------------------

TEST(FrameHeader, RoundTripsRandomFields) {
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 2000; ++i) {
    FrameHeader h;
    h.type = kAllTypes[rng() % kAllTypes.size()];
    h.flags = static_cast<uint8_t>(rng());
    h.aux_len = static_cast<uint16_t>(rng());
    h.payload_len = static_cast<uint32_t>(rng() % (uint64_t{kMaxPayload} + 1));
    h.code = static_cast<uint32_t>(rng());
    h.id = rng();
    h.a = rng();
    h.b = rng();
    h.c = rng();
    h.d = rng();
    h.e = rng();
    HeaderBytes b = encoded(h);
    auto r = decode_header(b.data(), b.size());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->type, h.type);
    EXPECT_EQ(r->flags, h.flags);
    EXPECT_EQ(r->aux_len, h.aux_len);
    EXPECT_EQ(r->payload_len, h.payload_len);
    EXPECT_EQ(r->code, h.code);
    EXPECT_EQ(r->id, h.id);
    EXPECT_EQ(r->a, h.a);
    EXPECT_EQ(r->b, h.b);
    EXPECT_EQ(r->c, h.c);
    EXPECT_EQ(r->d, h.d);
    EXPECT_EQ(r->e, h.e);
  }
}

TEST(FrameHeader, LayoutIsLittleEndianWithMagicFirst) {
  FrameHeader h;
  h.type = FrameType::kData;
  h.id = 0x0102030405060708ull;
  HeaderBytes b = encoded(h);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), 4), "FRY1");
  EXPECT_EQ(b[4], static_cast<uint8_t>(FrameType::kData));
  EXPECT_EQ(b[16], 0x08);
  EXPECT_EQ(b[23], 0x01);
}

TEST(FrameHeader, AcceptsExactlyTheKnownTypes) {
  std::set<uint8_t> known;
  for (FrameType t : kAllTypes) known.insert(static_cast<uint8_t>(t));
  HeaderBytes b = encoded(FrameHeader{});
  for (int t = 0; t < 256; ++t) {
    b[4] = static_cast<uint8_t>(t);
    auto r = decode_header(b.data(), b.size());
    if (known.count(static_cast<uint8_t>(t))) {
      ASSERT_TRUE(r.ok()) << "type " << t;
      EXPECT_NE(frame_type_name(r->type), "unknown");
    } else {
      ASSERT_FALSE(r.ok()) << "type " << t;
      EXPECT_EQ(r.status().code(), Code::kDataLoss);
      EXPECT_NE(r.status().message().find("type"), std::string::npos);
    }
  }
}

TEST(FrameHeader, RejectsBadMagic) {
  HeaderBytes b = encoded(FrameHeader{});
  for (int i = 0; i < 4; ++i) {
    HeaderBytes bad = b;
    bad[i] ^= 0x20;
    auto r = decode_header(bad.data(), bad.size());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
    EXPECT_NE(r.status().message().find("magic"), std::string::npos);
  }
}

TEST(FrameHeader, RejectsTruncatedInput) {
  HeaderBytes b = encoded(FrameHeader{});
  for (size_t len : {size_t{0}, size_t{1}, size_t{32}, kHeaderSize - 1}) {
    auto r = decode_header(b.data(), len);
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
  }
  // Extra bytes after the header are not the header's business.
  std::vector<uint8_t> longer(b.begin(), b.end());
  longer.resize(kHeaderSize + 10, 0xee);
  EXPECT_TRUE(decode_header(longer.data(), longer.size()).ok());
}

TEST(FrameHeader, RejectsPayloadOverTheLimit) {
  FrameHeader h;
  h.type = FrameType::kData;
  h.payload_len = kMaxPayload;
  HeaderBytes b = encoded(h);
  ASSERT_TRUE(decode_header(b.data(), b.size()).ok());
  for (uint32_t len : {kMaxPayload + 1, 0xffffffffu}) {
    put_u32(b.data() + 8, len);
    auto r = decode_header(b.data(), b.size());
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
    EXPECT_NE(r.status().message().find("payload"), std::string::npos);
  }
}

TEST(FrameHeader, TypeNamesAreDistinct) {
  std::set<std::string_view> names;
  for (FrameType t : kAllTypes) names.insert(frame_type_name(t));
  EXPECT_EQ(names.size(), kAllTypes.size());
  EXPECT_EQ(names.count("unknown"), 0u);
  EXPECT_EQ(frame_type_name(FrameType::kHello), "hello");
  EXPECT_EQ(frame_type_name(static_cast<FrameType>(99)), "unknown");
}

// ---- handshake ------------------------------------------------------------

// Encodes, passes the header through the header codec, and checks aux_len.
FrameHeader through_wire(const EncodedFrame& f) {
  EXPECT_EQ(f.header.aux_len, f.aux.size());
  HeaderBytes b = encoded(f.header);
  auto r = decode_header(b.data(), b.size());
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value() : FrameHeader{};
}

TEST(Handshake, HelloControlRoundTrips) {
  std::mt19937_64 rng(7);
  Hello m;
  m.role = StreamRole::kControl;
  m.engine_id = rng();
  m.streams = 8;
  m.cookie = 0;
  m.stream_index = 0;
  fill_random_bytes(m.nonce, rng);
  fill_random_bytes(m.identity, rng);
  m.host_id = "node-17/boot-abcdef";
  EncodedFrame f = encode(m);
  EXPECT_EQ(f.header.type, FrameType::kHello);
  EXPECT_EQ(f.aux.size(), 64 + m.host_id.size());
  auto r = decode_hello(through_wire(f), f.aux);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->version, kProtocolVersion);
  EXPECT_EQ(r->role, StreamRole::kControl);
  EXPECT_EQ(r->engine_id, m.engine_id);
  EXPECT_EQ(r->streams, 8u);
  EXPECT_EQ(r->nonce, m.nonce);
  EXPECT_EQ(r->identity, m.identity);
  EXPECT_EQ(r->host_id, m.host_id);
}

TEST(Handshake, HelloControlWithEmptyAndMaximalHostId) {
  std::mt19937_64 rng(8);
  for (size_t len : {size_t{0}, size_t{255}}) {
    Hello m;
    fill_random_bytes(m.nonce, rng);
    m.host_id = std::string(len, 'h');
    EncodedFrame f = encode(m);
    auto r = decode_hello(through_wire(f), f.aux);
    ASSERT_TRUE(r.ok()) << len << ": " << r.status().to_string();
    EXPECT_EQ(r->host_id, m.host_id);
    EXPECT_EQ(r->nonce, m.nonce);
  }
}

TEST(Handshake, HelloDataRoundTrips) {
  Hello m;
  m.role = StreamRole::kData;
  m.engine_id = 0xdeadbeefcafef00dull;
  m.cookie = 0x1122334455667788ull;
  m.stream_index = 5;
  m.host_id = "ignored-for-data";
  EncodedFrame f = encode(m);
  EXPECT_TRUE(f.aux.empty());
  auto r = decode_hello(through_wire(f), f.aux);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->role, StreamRole::kData);
  EXPECT_EQ(r->engine_id, m.engine_id);
  EXPECT_EQ(r->cookie, m.cookie);
  EXPECT_EQ(r->stream_index, 5u);
  EXPECT_EQ(r->version, kProtocolVersion);
}

TEST(Handshake, WelcomeRoundTrips) {
  std::mt19937_64 rng(9);
  for (bool auth : {false, true}) {
    Welcome m;
    m.engine_id = rng();
    m.auth_required = auth;
    fill_random_bytes(m.nonce, rng);
    fill_random_bytes(m.identity, rng);
    m.host_id = "acceptor-host";
    if (auth) m.addresses = {"10.77.0.2:7000", "10.77.1.2:7000", "[fe80::1]:7000"};
    EncodedFrame f = encode(m);
    auto r = decode_welcome(through_wire(f), f.aux);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->version, kProtocolVersion);
    EXPECT_EQ(r->engine_id, m.engine_id);
    EXPECT_EQ(r->auth_required, auth);
    EXPECT_EQ(r->nonce, m.nonce);
    EXPECT_EQ(r->identity, m.identity);
    EXPECT_EQ(r->host_id, m.host_id);
    EXPECT_EQ(r->addresses, m.addresses);
  }
}

TEST(Handshake, WelcomeRejectsTruncatedOrTrailingAddressLists) {
  Welcome m;
  m.host_id = "h";
  m.addresses = {"10.0.0.1:1", "10.0.0.2:2"};
  EncodedFrame f = encode(m);
  for (size_t cut = 1; cut < f.aux.size() - 64; ++cut) {
    std::string aux = f.aux.substr(0, f.aux.size() - cut);
    EXPECT_EQ(decode_welcome(f.header, aux).status().code(), Code::kDataLoss) << "cut " << cut;
  }
  EXPECT_EQ(decode_welcome(f.header, f.aux + "x").status().code(), Code::kDataLoss);
}

TEST(Handshake, AuthRoundTripsWithAndWithoutProof) {
  std::mt19937_64 rng(10);
  Auth with;
  with.has_proof = true;
  with.streams = 12;
  fill_random_bytes(with.proof, rng);
  fill_random_bytes(with.signature, rng);
  EncodedFrame f = encode(with);
  EXPECT_EQ(f.aux.size(), 96u);
  auto r = decode_auth(through_wire(f), f.aux);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->streams, 12u);
  EXPECT_TRUE(r->has_proof);
  EXPECT_EQ(r->proof, with.proof);
  EXPECT_EQ(r->signature, with.signature);

  Auth without;
  fill_random_bytes(without.proof, rng);  // must not travel
  fill_random_bytes(without.signature, rng);
  f = encode(without);
  EXPECT_EQ(f.aux.size(), 64u);
  r = decode_auth(through_wire(f), f.aux);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->has_proof);
  EXPECT_EQ(r->signature, without.signature);
}

TEST(Handshake, AcceptedRoundTripsWithAndWithoutProof) {
  std::mt19937_64 rng(11);
  for (bool has : {false, true}) {
    Accepted m;
    m.cookie = rng();
    m.connection_id = rng();
    m.has_proof = has;
    fill_random_bytes(m.proof, rng);
    fill_random_bytes(m.signature, rng);
    EncodedFrame f = encode(m);
    EXPECT_EQ(f.aux.size(), has ? 96u : 64u);
    auto r = decode_accepted(through_wire(f), f.aux);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->cookie, m.cookie);
    EXPECT_EQ(r->connection_id, m.connection_id);
    EXPECT_EQ(r->has_proof, has);
    EXPECT_EQ(r->signature, m.signature);
    if (has) {
      EXPECT_EQ(r->proof, m.proof);
    }
  }
}

TEST(Handshake, RejectedRoundTrips) {
  Rejected m;
  m.code = Code::kUnauthenticated;
  m.message = "bad proof from 10.0.0.2";
  EncodedFrame f = encode(m);
  auto r = decode_rejected(through_wire(f), f.aux);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->code, Code::kUnauthenticated);
  EXPECT_EQ(r->message, m.message);

  // A long message is cut to 1024 bytes; an OK or unknown code reads as unavailable.
  m.message = std::string(5000, 'm');
  f = encode(m);
  EXPECT_EQ(f.aux.size(), 1024u);
  FrameHeader h = through_wire(f);
  for (uint32_t code : {0u, 15u, 200u}) {
    h.code = code;
    r = decode_rejected(h, f.aux);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->code, Code::kUnavailable) << code;
  }
}

TEST(Handshake, DecodersRejectTheWrongFrameType) {
  std::string nonce_aux(32, 'n');
  FrameHeader h;
  h.type = FrameType::kWelcome;
  h.flags = static_cast<uint8_t>(StreamRole::kControl);
  auto hello = decode_hello(h, nonce_aux);
  ASSERT_FALSE(hello.ok());
  EXPECT_EQ(hello.status().code(), Code::kDataLoss);
  EXPECT_NE(hello.status().message().find("hello"), std::string::npos);
  h.type = FrameType::kHello;
  EXPECT_EQ(decode_welcome(h, nonce_aux).status().code(), Code::kDataLoss);
  EXPECT_EQ(decode_auth(h, "").status().code(), Code::kDataLoss);
  EXPECT_EQ(decode_accepted(h, "").status().code(), Code::kDataLoss);
  EXPECT_EQ(decode_rejected(h, "").status().code(), Code::kDataLoss);
  h.type = FrameType::kRejected;
  EXPECT_EQ(decode_accepted(h, "").status().code(), Code::kDataLoss);
  h.type = FrameType::kAccepted;
  EXPECT_EQ(decode_auth(h, "").status().code(), Code::kDataLoss);
}

TEST(Handshake, DecodersRejectMalformedAux) {
  Hello hello;
  EncodedFrame hf = encode(hello);
  FrameHeader hh = hf.header;
  for (size_t len : {size_t{0}, size_t{31}, size_t{63}, size_t{64 + 256}}) {
    auto r = decode_hello(hh, std::string(len, 'x'));
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.status().code(), Code::kDataLoss);
  }
  // Unknown role, stream counts out of range, data hello with aux.
  FrameHeader bad_role = hh;
  bad_role.flags = 3;
  EXPECT_EQ(decode_hello(bad_role, hf.aux).status().code(), Code::kDataLoss);
  FrameHeader too_many = hh;
  too_many.c = 1025;
  EXPECT_EQ(decode_hello(too_many, hf.aux).status().code(), Code::kDataLoss);
  too_many = hh;
  too_many.b = 1u << 20;
  EXPECT_EQ(decode_hello(too_many, hf.aux).status().code(), Code::kDataLoss);
  Hello data;
  data.role = StreamRole::kData;
  EncodedFrame df = encode(data);
  EXPECT_EQ(decode_hello(df.header, "x").status().code(), Code::kDataLoss);

  EncodedFrame wf = encode(Welcome{});
  EXPECT_EQ(decode_welcome(wf.header, std::string(31, 'x')).status().code(), Code::kDataLoss);
  EXPECT_EQ(decode_welcome(wf.header, std::string(63, 'x')).status().code(), Code::kDataLoss);
  EXPECT_EQ(decode_welcome(wf.header, std::string(64 + 256, 'x')).status().code(), Code::kDataLoss);

  EncodedFrame af = encode(Auth{});
  EncodedFrame cf = encode(Accepted{});
  for (size_t len : {size_t{0}, size_t{1}, size_t{32}, size_t{63}, size_t{65}, size_t{95}, size_t{97}}) {
    EXPECT_EQ(decode_auth(af.header, std::string(len, 'p')).status().code(), Code::kDataLoss) << len;
    EXPECT_EQ(decode_accepted(cf.header, std::string(len, 'p')).status().code(), Code::kDataLoss) << len;
  }
}

TEST(Handshake, ProofInputsDifferByRole) {
  Nonce a{}, b{};
  a.fill(1);
  b.fill(2);
  EXPECT_NE(client_proof_input(a, b), server_proof_input(a, b));
  EXPECT_NE(client_proof_input(a, b), client_proof_input(b, a));
  // Same nonces, both roles: still distinct (no reflection).
  EXPECT_NE(client_proof_input(a, a), server_proof_input(a, a));
}

// ---- metadata -------------------------------------------------------------

EngineMetadata sample_metadata() {
  EngineMetadata m;
  m.engine_id = 0x0123456789abcdefull;
  m.host_id = "gpu-node-3:5d1c";
  m.addresses = {"10.0.0.3:7000", "192.168.1.3:7000", "[::1]:7000"};
  return m;
}

TEST(Metadata, RoundTrips) {
  EngineMetadata m = sample_metadata();
  std::string blob = encode_metadata(m);
  EXPECT_TRUE(looks_like_metadata(blob));
  auto r = decode_metadata(blob);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->engine_id, m.engine_id);
  EXPECT_EQ(r->host_id, m.host_id);
  EXPECT_EQ(r->addresses, m.addresses);

  m.host_id.clear();
  m.addresses = {""};
  r = decode_metadata(encode_metadata(m));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->host_id, "");
  EXPECT_EQ(r->addresses, std::vector<std::string>{""});
}

TEST(Metadata, LooksLikeMetadataOnlyForTheMagic) {
  EXPECT_FALSE(looks_like_metadata("127.0.0.1:7000"));
  EXPECT_FALSE(looks_like_metadata("FRY"));
  EXPECT_TRUE(looks_like_metadata("FRYM"));
}

TEST(Metadata, RejectsEveryTruncation) {
  std::string blob = encode_metadata(sample_metadata());
  for (size_t len = 0; len < blob.size(); ++len) {
    // An exactly sized heap copy, so a sanitizer build catches any over-read.
    std::vector<char> prefix(blob.begin(), blob.begin() + static_cast<long>(len));
    auto r = decode_metadata(std::string_view(prefix.data(), prefix.size()));
    ASSERT_FALSE(r.ok()) << "prefix of " << len << " bytes decoded";
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << len;
  }
}

TEST(Metadata, RejectsTrailingBytesBadMagicVersionAndNoAddresses) {
  std::string blob = encode_metadata(sample_metadata());
  auto r = decode_metadata(blob + "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("trailing"), std::string::npos);

  std::string bad = blob;
  bad[0] = 'X';
  EXPECT_EQ(decode_metadata(bad).status().code(), Code::kInvalidArgument);

  // A blob older than this engine accepts is refused naming both versions.
  bad = blob;
  put_u16(reinterpret_cast<uint8_t*>(bad.data()) + 4, kMinProtocolVersion - 1);
  auto old = decode_metadata(bad);
  EXPECT_EQ(old.status().code(), Code::kUnimplemented);
  EXPECT_NE(old.status().message().find("version " + std::to_string(kMinProtocolVersion - 1)), std::string::npos)
      << old.status().message();
  EXPECT_NE(old.status().message().find(std::to_string(kMinProtocolVersion) + ".."), std::string::npos)
      << old.status().message();

  EngineMetadata none = sample_metadata();
  none.addresses.clear();
  EXPECT_EQ(decode_metadata(encode_metadata(none)).status().code(), Code::kInvalidArgument);
}

// A blob written by a later release (a higher version, the same layout) is
// read: the handshake, not the blob, decides whether the engines talk.
TEST(Metadata, ABlobOfALaterVersionIsRead) {
  std::string blob = encode_metadata(sample_metadata());
  put_u16(reinterpret_cast<uint8_t*>(blob.data()) + 4, kProtocolVersion + 2);
  auto r = decode_metadata(blob);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->protocol_version, kProtocolVersion + 2);
  EXPECT_EQ(r->engine_id, sample_metadata().engine_id);
  EXPECT_EQ(r->addresses, sample_metadata().addresses);
  EXPECT_EQ(encode_metadata(*r), blob);
}

// A string longer than a u16 length can say must not corrupt the blob: the
// encoder cuts it to 65535 bytes, and what it writes must decode.
TEST(Metadata, OversizedHostIdStillProducesADecodableBlob) {
  EngineMetadata m = sample_metadata();
  m.host_id = std::string(70000, 'h');
  auto r = decode_metadata(encode_metadata(m));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->host_id, std::string(0xffff, 'h'));
  EXPECT_EQ(r->addresses, sample_metadata().addresses);
}

// ---- RemoteDescriptor -----------------------------------------------------

TEST(RemoteDescriptor, RoundTrips) {
  std::mt19937_64 rng(12);
  for (MemoryKind kind : {MemoryKind::kHost, MemoryKind::kHostPinned, MemoryKind::kCuda}) {
    for (int32_t device : {-1, 0, 7, INT32_MAX}) {
      RemoteDescriptor d;
      d.engine_id = rng();
      d.export_id = rng();
      d.key = rng();
      d.length = rng();
      d.kind = kind;
      d.device = device;
      std::string s = d.serialize();
      ASSERT_EQ(s.size(), 48u);
      auto r = RemoteDescriptor::parse(s);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(r->engine_id, d.engine_id);
      EXPECT_EQ(r->export_id, d.export_id);
      EXPECT_EQ(r->key, d.key);
      EXPECT_EQ(r->length, d.length);
      EXPECT_EQ(r->kind, kind);
      EXPECT_EQ(r->device, device);
      EXPECT_EQ(r->serialize(), s);
    }
  }
}

TEST(RemoteDescriptor, RejectsWrongSizeBadMagicAndBadKind) {
  RemoteDescriptor d;
  d.key = 42;
  std::string s = d.serialize();
  for (size_t len : {size_t{0}, size_t{47}, size_t{49}, size_t{96}}) {
    std::string t = s;
    t.resize(len, '\0');
    auto r = RemoteDescriptor::parse(t);
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  std::string bad = s;
  bad[3] = 'X';
  auto r = RemoteDescriptor::parse(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("magic"), std::string::npos);
  for (uint8_t kind : {uint8_t{3}, uint8_t{255}}) {
    bad = s;
    bad[4] = static_cast<char>(kind);
    r = RemoteDescriptor::parse(bad);
    ASSERT_FALSE(r.ok()) << int(kind);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  // One form per descriptor: the reserved bytes are zero.
  for (size_t at : {5, 6, 7, 12, 13, 14, 15}) {
    bad = s;
    bad[at] = 1;
    r = RemoteDescriptor::parse(bad);
    ASSERT_FALSE(r.ok()) << at;
    EXPECT_NE(r.status().message().find("reserved"), std::string::npos);
  }
}

TEST(RemoteDescriptor, KindNames) {
  EXPECT_EQ(memory_kind_name(MemoryKind::kHost), "host");
  EXPECT_EQ(memory_kind_name(MemoryKind::kHostPinned), "host-pinned");
  EXPECT_EQ(memory_kind_name(MemoryKind::kCuda), "cuda");
}

// ---- fuzz -----------------------------------------------------------------

// Random and mutated inputs: every decoder returns either an error of its
// documented code or a value consistent with the input; nothing crashes.
TEST(WireFuzz, DecodersNeverCrashAndAnswerConsistently) {
  std::mt19937_64 rng(20240601);
  const std::string good_meta = encode_metadata(sample_metadata());
  int header_ok = 0, hello_ok = 0, meta_ok = 0, desc_ok = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    // decode_header: random bytes, often with a valid magic and type.
    std::string raw = random_bytes<std::string>(rng() % 4 == 0 ? rng() % kHeaderSize : kHeaderSize + rng() % 16, rng);
    auto* p = reinterpret_cast<uint8_t*>(raw.data());
    if (raw.size() >= 5 && rng() % 2) put_u32(p, kFrameMagic);
    if (raw.size() >= 5 && rng() % 2) p[4] = static_cast<uint8_t>(kAllTypes[rng() % kAllTypes.size()]);
    if (raw.size() >= 12 && rng() % 2) put_u32(p + 8, static_cast<uint32_t>(rng() % (2ull * kMaxPayload)));
    auto hr = decode_header(p, raw.size());
    FrameHeader h;
    if (hr.ok()) {
      ++header_ok;
      ASSERT_GE(raw.size(), kHeaderSize);
      ASSERT_LE(hr->payload_len, kMaxPayload);
      ASSERT_NE(frame_type_name(hr->type), "unknown");
      HeaderBytes again = encoded(hr.value());
      ASSERT_EQ(0, std::memcmp(again.data(), p, kHeaderSize));
      h = hr.value();
    } else {
      ASSERT_EQ(hr.status().code(), Code::kDataLoss) << hr.status().to_string();
      h.type = kAllTypes[rng() % kAllTypes.size()];
    }

    // decode_hello: that header (often forced to HELLO) and random aux.
    if (rng() % 2) h.type = FrameType::kHello;
    if (rng() % 2) h.flags = static_cast<uint8_t>(rng() % 4);
    if (rng() % 2) {
      h.b = rng() % 1100;
      h.c = rng() % 1100;
    }
    // Offers of small versions, in or out of order, sometimes without a highest.
    if (rng() % 2) h.code = static_cast<uint32_t>(rng() % 8) | static_cast<uint32_t>(rng() % 8) << 16;
    std::string aux = random_bytes<std::string>(rng() % 300, rng);
    auto hel = decode_hello(h, aux);
    if (hel.ok()) {
      ++hello_ok;
      ASSERT_EQ(h.type, FrameType::kHello);
      ASSERT_GE(hel->min_version, 1);
      ASSERT_LE(hel->min_version, hel->version);
      ASSERT_EQ(hel->min_version, h.code & 0xffff);
      ASSERT_EQ(hel->version, (h.code >> 16) == 0 ? h.code & 0xffff : h.code >> 16);
      ASSERT_LE(hel->streams, 1024u);
      ASSERT_LE(hel->stream_index, 1024u);
      ASSERT_EQ(static_cast<uint8_t>(hel->role), h.flags);
      if (hel->role == StreamRole::kControl) {
        ASSERT_GE(aux.size(), 64u);
        ASSERT_LE(aux.size(), 64u + 255u);
        ASSERT_EQ(0, std::memcmp(hel->nonce.data(), aux.data(), 32));
        ASSERT_EQ(0, std::memcmp(hel->identity.data(), aux.data() + 32, 32));
        ASSERT_EQ(hel->host_id, aux.substr(64));
      } else {
        ASSERT_TRUE(aux.empty());
      }
    } else {
      ASSERT_EQ(hel.status().code(), Code::kDataLoss);
    }

    // decode_metadata: random bytes behind the magic, or a mutated good blob.
    std::string blob;
    switch (rng() % 3) {
      case 0:
        blob = random_bytes<std::string>(rng() % 64, rng);
        break;
      case 1:
        blob = "FRYM" + std::string("\x01\x00", 2) + random_bytes<std::string>(rng() % 64, rng);
        break;
      default:
        blob = good_meta;
        blob[rng() % blob.size()] = static_cast<char>(rng());
        if (rng() % 2) blob.resize(rng() % (blob.size() + 4), 'z');
    }
    auto mr = decode_metadata(blob);
    if (mr.ok()) {
      ++meta_ok;
      ASSERT_FALSE(mr->addresses.empty());
      ASSERT_EQ(encode_metadata(mr.value()), blob);
    } else {
      Code c = mr.status().code();
      ASSERT_TRUE(c == Code::kInvalidArgument || c == Code::kUnimplemented) << mr.status().to_string();
    }

    // RemoteDescriptor::parse: mostly 48 bytes, often with the magic.
    std::string desc = random_bytes<std::string>(rng() % 8 == 0 ? rng() % 100 : 48, rng);
    if (desc.size() >= 5 && rng() % 4) put_u32(reinterpret_cast<uint8_t*>(desc.data()), 0x44595246);
    if (desc.size() >= 5 && rng() % 2) desc[4] = static_cast<char>(rng() % 4);
    if (desc.size() == 48 && rng() % 4) {  // mostly zero reserved bytes, as serialize() writes
      std::fill(desc.begin() + 5, desc.begin() + 8, '\0');
      std::fill(desc.begin() + 12, desc.begin() + 16, '\0');
    }
    auto dr = RemoteDescriptor::parse(desc);
    if (dr.ok()) {
      ++desc_ok;
      ASSERT_EQ(desc.size(), 48u);
      ASSERT_EQ(dr->serialize(), desc);
      ASSERT_LE(static_cast<uint8_t>(dr->kind), 2);
      const auto* q = reinterpret_cast<const uint8_t*>(desc.data());
      ASSERT_EQ(dr->engine_id, get_u64(q + 16));
      ASSERT_EQ(dr->export_id, get_u64(q + 24));
      ASSERT_EQ(dr->key, get_u64(q + 32));
      ASSERT_EQ(dr->length, get_u64(q + 40));
      auto again = RemoteDescriptor::parse(dr->serialize());
      ASSERT_TRUE(again.ok());
      ASSERT_EQ(again->key, dr->key);
    } else {
      ASSERT_EQ(dr.status().code(), Code::kInvalidArgument);
    }
  }
  // The generator must reach the accepting paths too, or the loop proves little.
  EXPECT_GT(header_ok, 1000);
  EXPECT_GT(hello_ok, 100);
  EXPECT_GT(meta_ok, 10);
  EXPECT_GT(desc_ok, 1000);
}

}  // namespace
}  // namespace ferry::wire
