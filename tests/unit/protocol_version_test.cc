// Protocol versions at the handshake, against hand-encoded frames: a HELLO
// offers a range of versions (its header's code: lowest | highest << 16), the
// acceptor picks the highest both speak, and refuses in words, naming both
// sides' versions, only when there is none. A HELLO of an older protocol
// (6 and 5: untyped frames; 4: no identity key in its aux bytes) is refused
// that way too, not dropped as undecodable.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <future>
#include <string>

#include "../hand_made_identity.h"
#include "ferry/ferry.h"
#include "platform/crypto.h"
#include "platform/socket.h"
#include "transport/handshake_io.h"
#include "wire/handshake.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Engine> tcp_engine() {
  Options o;
  o.transport = TransportChoice::kTcp;
  o.listen = "127.0.0.1:0";
  auto e = Engine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

platform::Socket dial(const Engine& engine, Deadline d) {
  auto hp = platform::parse_host_port(engine.address());
  EXPECT_TRUE(hp.ok());
  auto s = platform::connect_tcp(hp.value(), d);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : platform::Socket();
}

template <size_t N>
std::string bytes_of(const std::array<uint8_t, N>& a) {
  return std::string(reinterpret_cast<const char*>(a.data()), N);
}

// A control HELLO in the version-5 layout, its versions written by hand.
bootstrap::RawFrame hello_offering(uint16_t lowest, uint16_t highest, const wire::Hello& fields) {
  bootstrap::RawFrame f;
  f.header.type = wire::FrameType::kHello;
  f.header.code = static_cast<uint32_t>(lowest) | static_cast<uint32_t>(highest) << 16;
  f.header.flags = 1;  // control
  f.header.id = fields.engine_id;
  f.aux = bytes_of(fields.nonce) + bytes_of(fields.identity) + fields.host_id;
  f.header.aux_len = static_cast<uint16_t>(f.aux.size());
  return f;
}

Status send(int fd, const bootstrap::RawFrame& f, Deadline d) {
  return bootstrap::write_handshake_frame(fd, wire::EncodedFrame{f.header, f.aux}, d);
}

wire::Hello hand_made_fields() {
  wire::Hello h;
  testing::present_identity(h);
  platform::fill_random(h.nonce.data(), h.nonce.size());
  h.host_id = "hand-made-peer";
  return h;
}

// What the engine answers a HELLO with: REJECTED's reason, or the WELCOME.
Result<wire::Rejected> refusal(const bootstrap::RawFrame& answer) {
  if (answer.header.type != wire::FrameType::kRejected) {
    return Status(Code::kInternal, "expected REJECTED, got " + std::string(wire::frame_type_name(answer.header.type)));
  }
  return wire::decode_rejected(answer.header, answer.aux);
}

// (a) A peer offering 7..8 (a later release), 5..8 or 7..7 is accepted at 7,
// the highest version both speak, and the connection works.
TEST(ProtocolVersion, APeerWhoseRangeIncludesOursIsAcceptedAtTheHighestCommonVersion) {
  static_assert(wire::kProtocolVersion == 7 && wire::kMinProtocolVersion == 7);
  for (auto [lowest, highest] : {std::pair<uint16_t, uint16_t>{7, 8}, {5, 8}, {7, 7}}) {
    SCOPED_TRACE(std::to_string(lowest) + ".." + std::to_string(highest));
    auto engine = tcp_engine();
    ASSERT_NE(engine, nullptr);
    Deadline d = after(5s);
    platform::Socket ctl = dial(*engine, d);
    wire::Hello fields = hand_made_fields();
    ASSERT_TRUE(send(ctl.fd(), hello_offering(lowest, highest, fields), d).ok());
    auto answer = bootstrap::read_handshake_frame(ctl.fd(), d);
    ASSERT_TRUE(answer.ok()) << answer.status().to_string();
    ASSERT_EQ(answer->header.type, wire::FrameType::kWelcome)
        << (answer->header.type == wire::FrameType::kRejected ? answer->aux : "");
    auto welcome = wire::decode_welcome(answer->header, answer->aux);
    ASSERT_TRUE(welcome.ok()) << welcome.status().to_string();
    EXPECT_EQ(welcome->version, 7);

    wire::Auth auth;
    auth.streams = 1;
    ASSERT_TRUE(testing::sign_auth(fields, *answer, auth).ok());
    ASSERT_TRUE(bootstrap::write_handshake_frame(ctl.fd(), wire::encode(auth), d).ok());
    auto f = bootstrap::read_handshake_frame(ctl.fd(), d);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    auto accepted = wire::decode_accepted(f->header, f->aux);
    ASSERT_TRUE(accepted.ok()) << (f->header.type == wire::FrameType::kRejected ? f->aux : "");
    platform::Socket data = dial(*engine, d);
    bootstrap::RawFrame stream;
    stream.header.type = wire::FrameType::kHello;
    stream.header.code = static_cast<uint32_t>(lowest) | static_cast<uint32_t>(highest) << 16;
    stream.header.flags = 2;  // data
    stream.header.a = accepted->cookie;
    ASSERT_TRUE(send(data.fd(), stream, d).ok());
    auto ready = bootstrap::read_handshake_frame(ctl.fd(), d);
    ASSERT_TRUE(ready.ok()) << ready.status().to_string();
    EXPECT_EQ(ready->header.type, wire::FrameType::kReady);
    auto conn = engine->accept(d);
    ASSERT_TRUE(conn.ok()) << conn.status().to_string();
    EXPECT_EQ((*conn)->peer_engine_id(), testing::hand_made_engine_id());
  }
}

// (b) A peer offering only 8..9 (a release that dropped 7) is refused, and
// the reason names both ranges and which engine to upgrade.
TEST(ProtocolVersion, APeerOfferingOnlyLaterVersionsIsRefusedNamingBothRanges) {
  auto engine = tcp_engine();
  ASSERT_NE(engine, nullptr);
  Deadline d = after(5s);
  platform::Socket ctl = dial(*engine, d);
  ASSERT_TRUE(send(ctl.fd(), hello_offering(8, 9, hand_made_fields()), d).ok());
  auto answer = bootstrap::read_handshake_frame(ctl.fd(), d);
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  auto r = refusal(*answer);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->code, Code::kUnimplemented);
  EXPECT_NE(r->message.find("versions 8..9"), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("version 7"), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("upgrade the accepting engine"), std::string::npos) << r->message;
  EXPECT_FALSE(engine->accept(after(200ms)).ok());
}

// (c) A HELLO exactly as protocol 4 encoded it (code = 4, aux = nonce(32) |
// host id: no identity key, so fewer aux bytes than version 5 reads) is
// refused with a reason naming 4 and 7, not dropped as malformed.
TEST(ProtocolVersion, AHelloOfThePreviousProtocolIsRefusedNamingBothVersions) {
  auto engine = tcp_engine();
  ASSERT_NE(engine, nullptr);
  Deadline d = after(5s);
  platform::Socket ctl = dial(*engine, d);
  bootstrap::RawFrame v4;
  v4.header.type = wire::FrameType::kHello;
  v4.header.code = 4;
  v4.header.flags = 1;  // control
  v4.header.id = 0x0123456789abcdefull;
  v4.aux = std::string(32, '\x5a') + "older-peer";  // nonce | host id
  v4.header.aux_len = static_cast<uint16_t>(v4.aux.size());
  ASSERT_TRUE(send(ctl.fd(), v4, d).ok());
  auto answer = bootstrap::read_handshake_frame(ctl.fd(), d);
  ASSERT_TRUE(answer.ok()) << "the engine dropped the stream without a reason: " << answer.status().to_string();
  auto r = refusal(*answer);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->code, Code::kUnimplemented);
  EXPECT_NE(r->message.find("version 4"), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("version 7"), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("upgrade the connecting engine"), std::string::npos) << r->message;
  EXPECT_FALSE(engine->accept(after(200ms)).ok());
}

// (d) An engine of the previous release (offering 5..6, untyped frames) is
// refused before a steady-state frame travels, naming both and telling it
// to upgrade.
TEST(ProtocolVersion, AnEngineOfTheReleaseBeforeTypedFramesIsRefusedNamingBoth) {
  auto engine = tcp_engine();
  ASSERT_NE(engine, nullptr);
  Deadline d = after(5s);
  platform::Socket ctl = dial(*engine, d);
  ASSERT_TRUE(send(ctl.fd(), hello_offering(5, 6, hand_made_fields()), d).ok());
  auto answer = bootstrap::read_handshake_frame(ctl.fd(), d);
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  auto r = refusal(*answer);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->code, Code::kUnimplemented);
  EXPECT_NE(r->message.find("versions 5..6"), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("version 7"), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("upgrade the connecting engine"), std::string::npos) << r->message;
  EXPECT_FALSE(engine->accept(after(200ms)).ok());
}

// The connector's side: an engine's HELLO offers its range (an acceptor from
// before ranges reads the low half: 7), and a WELCOME choosing a version
// outside that range fails the connect naming both.
TEST(ProtocolVersion, AnEngineOffersItsRangeAndRefusesAChoiceOutsideIt) {
  auto listener = platform::listen_tcp(platform::HostPort{"127.0.0.1", 0});
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  auto port = platform::local_port(*listener);
  ASSERT_TRUE(port.ok());
  auto engine = tcp_engine();
  ASSERT_NE(engine, nullptr);
  auto connecting = std::async(
      std::launch::async, [&] { return engine->connect("127.0.0.1:" + std::to_string(*port), after(5s)).status(); });
  Deadline d = after(5s);
  int fd = ::accept4(listener->fd(), nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(fd, 0);
  platform::Socket ctl(fd);
  auto hello = bootstrap::read_handshake_frame(ctl.fd(), d);
  ASSERT_TRUE(hello.ok()) << hello.status().to_string();
  EXPECT_EQ(hello->header.code, 7u | 7u << 16);
  EXPECT_EQ(static_cast<uint16_t>(hello->header.code), 7);  // what an acceptor from before ranges reads
  wire::Welcome welcome;
  welcome.version = 8;
  welcome.engine_id = testing::hand_made_engine_id();
  welcome.identity = testing::hand_made_key().public_key();
  welcome.host_id = "hand-made-acceptor";
  welcome.addresses = {"127.0.0.1:" + std::to_string(*port)};
  ASSERT_TRUE(bootstrap::write_handshake_frame(ctl.fd(), wire::encode(welcome), d).ok());
  Status s = connecting.get();
  EXPECT_EQ(s.code(), Code::kUnimplemented) << s.to_string();
  EXPECT_NE(s.message().find("version 8"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("version 7"), std::string::npos) << s.to_string();
}

// The pure parts: the offer a header carries, and the choice.
TEST(ProtocolVersion, AHeaderCarriesTheOfferAndTheChoiceIsTheHighestCommonVersion) {
  wire::Hello h;
  h.min_version = 5;
  h.version = 7;
  wire::EncodedFrame f = wire::encode(h);
  EXPECT_EQ(f.header.code, 5u | 7u << 16);
  auto offer = wire::hello_versions(f.header);
  ASSERT_TRUE(offer.ok());
  EXPECT_EQ(*offer, (wire::VersionRange{5, 7}));
  auto decoded = wire::decode_hello(f.header, f.aux);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  EXPECT_EQ(decoded->min_version, 5);
  EXPECT_EQ(decoded->version, 7);

  wire::FrameHeader before_ranges;  // one version, nothing above it
  before_ranges.type = wire::FrameType::kHello;
  before_ranges.code = 4;
  EXPECT_EQ(wire::hello_versions(before_ranges).value(), (wire::VersionRange{4, 4}));
  for (uint32_t code : {0u, 7u | 5u << 16, 0u | 5u << 16}) {
    before_ranges.code = code;
    EXPECT_EQ(wire::hello_versions(before_ranges).status().code(), Code::kDataLoss) << code;
  }

  using R = wire::VersionRange;
  EXPECT_EQ(wire::negotiate(R{5, 5}, R{5, 7}).value(), 5);
  EXPECT_EQ(wire::negotiate(R{5, 8}, R{6, 7}).value(), 7);
  EXPECT_EQ(wire::negotiate(R{5, 6}, R{4, 9}).value(), 6);
  EXPECT_EQ(wire::negotiate(R{6, 9}, R{5, 6}).value(), 6);
  auto none = wire::negotiate(R{5, 5}, R{6, 7});
  EXPECT_EQ(none.status().code(), Code::kUnimplemented);
  EXPECT_NE(none.status().message().find("versions 6..7"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("version 5"), std::string::npos) << none.status().message();
  EXPECT_EQ(wire::to_string(R{5, 7}), "versions 5..7");
  EXPECT_EQ(wire::to_string(R{5, 5}), "version 5");
}

}  // namespace
}  // namespace ferry
