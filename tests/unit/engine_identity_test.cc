// Engine ids are proven: an identity key signs each handshake, and a peer
// that names an engine id without holding its key is refused on both sides
// of the handshake.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "../hand_made_identity.h"
#include "ferry/ferry.h"
#include "platform/identity.h"
#include "platform/socket.h"
#include "transport/handshake_io.h"
#include "wire/handshake.h"
#include "wire/metadata.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

TEST(IdentityKey, SignaturesVerifyOnlyForTheirKeyAndBytes) {
  auto a = platform::IdentityKey::generate().value();
  auto b = platform::IdentityKey::generate().value();
  EXPECT_NE(a->public_key(), b->public_key());
  EXPECT_NE(a->engine_id(), b->engine_id());
  EXPECT_NE(a->engine_id(), 0u);
  EXPECT_EQ(a->engine_id(), platform::engine_id_of(a->public_key()));
  const platform::Signature s = a->sign("session bytes");
  EXPECT_TRUE(platform::verify_signature(a->public_key(), "session bytes", s));
  EXPECT_FALSE(platform::verify_signature(b->public_key(), "session bytes", s));
  EXPECT_FALSE(platform::verify_signature(a->public_key(), "session byteS", s));
  platform::Signature flipped = s;
  flipped[17] ^= 0x20;
  EXPECT_FALSE(platform::verify_signature(a->public_key(), "session bytes", flipped));
  // A key that is not a curve point, and the all-zero signature.
  platform::PublicKey junk{};
  junk.fill(0xff);
  EXPECT_FALSE(platform::verify_signature(junk, "session bytes", s));
  EXPECT_FALSE(platform::verify_signature(a->public_key(), "session bytes", platform::Signature{}));
}

TEST(IdentityKey, SessionInputsDifferByRoleNonceAndKey) {
  wire::Hello hello;
  wire::Welcome welcome;
  hello.nonce.fill(1);
  welcome.nonce.fill(2);
  hello.identity.fill(3);
  welcome.identity.fill(4);
  const std::string connector = wire::identity_input(wire::Signer::kConnector, hello, welcome);
  EXPECT_NE(connector, wire::identity_input(wire::Signer::kAcceptor, hello, welcome));
  wire::Hello other = hello;
  other.nonce[0] = 9;
  EXPECT_NE(connector, wire::identity_input(wire::Signer::kConnector, other, welcome));
  wire::Welcome other_acceptor = welcome;
  other_acceptor.identity[31] = 9;
  EXPECT_NE(connector, wire::identity_input(wire::Signer::kConnector, hello, other_acceptor));
}

TEST(EngineIdentity, EachSideSeesTheOthersProvenId) {
  auto a = Engine::create({}).value();
  auto b = Engine::create({}).value();
  auto ab = a->connect(b->address(), after(5s));
  ASSERT_TRUE(ab.ok()) << ab.status().to_string();
  auto ba = b->accept(after(5s));
  ASSERT_TRUE(ba.ok()) << ba.status().to_string();
  EXPECT_EQ((*ab)->peer_engine_id(), b->id());
  EXPECT_EQ((*ba)->peer_engine_id(), a->id());
  auto md = wire::decode_metadata(b->metadata());
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->engine_id, b->id());
}

// A hand-made connector: HELLO names `engine_id` with `key`'s public half,
// AUTH carries `signature` (the right one when not given). The engine's
// answer to AUTH.
Result<bootstrap::RawFrame> handshake(const Engine& engine, uint64_t engine_id, const platform::IdentityKey& key,
                                      bool sign_other_bytes) {
  Deadline d = after(5s);
  FERRY_ASSIGN_OR_RETURN(platform::HostPort hp, platform::parse_host_port(engine.address()));
  FERRY_ASSIGN_OR_RETURN(platform::Socket s, platform::connect_tcp(hp, d));
  wire::Hello hello;
  hello.engine_id = engine_id;
  hello.identity = key.public_key();
  hello.host_id = "impostor";
  FERRY_RETURN_IF_ERROR(bootstrap::write_handshake_frame(s.fd(), wire::encode(hello), d));
  FERRY_ASSIGN_OR_RETURN(bootstrap::RawFrame wf, bootstrap::read_handshake_frame(s.fd(), d));
  FERRY_ASSIGN_OR_RETURN(wire::Welcome welcome, wire::decode_welcome(wf.header, wf.aux));
  wire::Auth auth;
  auth.streams = 1;
  wire::Hello signed_hello = hello;
  if (sign_other_bytes) signed_hello.nonce[0] ^= 1;  // a signature from another session
  auth.signature = key.sign(wire::identity_input(wire::Signer::kConnector, signed_hello, welcome));
  FERRY_RETURN_IF_ERROR(bootstrap::write_handshake_frame(s.fd(), wire::encode(auth), d));
  return bootstrap::read_handshake_frame(s.fd(), d);
}

void expect_refused(const Result<bootstrap::RawFrame>& answer) {
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  ASSERT_EQ(answer->header.type, wire::FrameType::kRejected) << "the impostor was accepted";
  auto rejected = wire::decode_rejected(answer->header, answer->aux);
  ASSERT_TRUE(rejected.ok());
  EXPECT_EQ(rejected->code, Code::kUnauthenticated) << rejected->message;
  EXPECT_NE(rejected->message.find("key"), std::string::npos) << rejected->message;
}

TEST(EngineIdentity, AConnectorNamingAnotherEnginesIdIsRefused) {
  auto victim = Engine::create({}).value();
  auto named = Engine::create({}).value();
  auto own = platform::IdentityKey::generate().value();
  // Another engine's id with the impostor's own key.
  ASSERT_NO_FATAL_FAILURE(expect_refused(handshake(*victim, named->id(), *own, false)));
  // Its own id, signed over another session's bytes.
  ASSERT_NO_FATAL_FAILURE(expect_refused(handshake(*victim, own->engine_id(), *own, true)));
  // Its own id and the right signature: accepted (the control answer).
  auto honest = handshake(*victim, own->engine_id(), *own, false);
  ASSERT_TRUE(honest.ok()) << honest.status().to_string();
  EXPECT_EQ(honest->header.type, wire::FrameType::kAccepted);
  EXPECT_FALSE(victim->accept(after(200ms)).ok()) << "an impostor's connection reached the application";
}

// A hand-made acceptor that names `claimed_id` (its own key's when empty)
// and answers AUTH with ACCEPTED signed by its own key, one byte of the
// signature flipped when `flip` names one. Returns what a dialing engine's
// connect said.
Status dial_hand_made_acceptor(std::optional<uint64_t> claimed_id, std::optional<size_t> flip) {
  auto hp = platform::parse_host_port("127.0.0.1:0").value();
  auto listening = platform::listen_tcp(hp, 4);
  if (!listening.ok()) return listening.status();
  const std::string where = "127.0.0.1:" + std::to_string(platform::local_port(*listening).value());
  auto own = platform::IdentityKey::generate().value();
  std::thread fake([&] {
    Deadline d = after(5s);
    struct pollfd p = {listening->fd(), POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return;
    platform::Socket s(::accept4(listening->fd(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!s.valid()) return;
    auto hf = bootstrap::read_handshake_frame(s.fd(), d);
    if (!hf.ok()) return;
    auto hello = wire::decode_hello(hf->header, hf->aux);
    if (!hello.ok()) return;
    wire::Welcome welcome;
    welcome.engine_id = claimed_id.value_or(own->engine_id());
    welcome.identity = own->public_key();
    welcome.host_id = "elsewhere";
    welcome.addresses = {where};
    if (!bootstrap::write_handshake_frame(s.fd(), wire::encode(welcome), d).ok()) return;
    if (!bootstrap::read_handshake_frame(s.fd(), d).ok()) return;  // AUTH
    wire::Accepted accepted;
    accepted.cookie = 1;
    accepted.signature = own->sign(wire::identity_input(wire::Signer::kAcceptor, *hello, welcome));
    if (flip) accepted.signature[*flip % accepted.signature.size()] ^= 0x01;
    (void)bootstrap::write_handshake_frame(s.fd(), wire::encode(accepted), d);
    // Nothing after ACCEPTED: a dialer that refused hangs up at once; one
    // that took it waits for what follows, until its deadline.
    struct pollfd q = {s.fd(), POLLIN, 0};
    (void)::poll(&q, 1, 3000);
  });
  Options o;
  o.transport = TransportChoice::kTcp;
  auto dialer = Engine::create(o).value();
  auto c = dialer->connect(where, after(2s));
  fake.join();
  return c.ok() ? Status() : c.status();
}

// The acceptor side: a listener that answers with another engine's id and
// its own key. The dialing engine refuses it before READY, and
// Engine::connect with the other engine's metadata refuses an engine with
// another id at that address.
TEST(EngineIdentity, AnAcceptorNamingAnotherEnginesIdIsRefused) {
  auto real = Engine::create({}).value();
  auto dialer = Engine::create({}).value();
  auto squatter = Engine::create({}).value();
  // The real engine's metadata, pointing at the squatter's address.
  wire::EngineMetadata md = wire::decode_metadata(real->metadata()).value();
  md.addresses = {squatter->address()};
  auto c = dialer->connect(wire::encode_metadata(md), after(5s));
  ASSERT_FALSE(c.ok()) << "connected to an engine the metadata does not name";
  EXPECT_EQ(c.status().code(), Code::kUnavailable) << c.status().to_string();
  EXPECT_NE(c.status().message().find("answered there"), std::string::npos) << c.status().to_string();

  // A hand-made acceptor that claims the real engine's id.
  Status d = dial_hand_made_acceptor(real->id(), std::nullopt);
  ASSERT_FALSE(d.ok()) << "the dialer took an acceptor that named another engine's id";
  EXPECT_EQ(d.code(), Code::kUnauthenticated) << d.to_string();
}

// ACCEPTED proves the acceptor holds the key of the id it named: one bit
// flipped anywhere in its signature and the dialer refuses it, as it does
// no honest acceptor (the control: the same acceptor unflipped gets past the
// signature and fails only for lack of what follows).
TEST(EngineIdentity, AnAcceptedWhoseSignatureHasOneBitFlippedIsRefused) {
  Status honest = dial_hand_made_acceptor(std::nullopt, std::nullopt);
  EXPECT_NE(honest.code(), Code::kUnauthenticated) << honest.to_string();
  for (size_t byte : {size_t{0}, size_t{31}, size_t{32}, size_t{63}}) {
    Status s = dial_hand_made_acceptor(std::nullopt, byte);
    EXPECT_EQ(s.code(), Code::kUnauthenticated) << "byte " << byte << ": " << s.to_string();
  }
}

}  // namespace
}  // namespace ferry
