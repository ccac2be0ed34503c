// The connector's side of the handshake.
#include "transport/bootstrap/dialer.h"

#include <cinttypes>

#include "platform/log.h"
#include "platform/crypto.h"
#include "platform/identity.h"
#include "platform/thread.h"
#include "transport/handshake_io.h"
#include "transport/local/local_handshake.h"
#include "transport/tcp/path_plan.h"
#include "transport/tcp/tcp_transport.h"
#include "wire/handshake.h"

namespace ferry::bootstrap {
namespace {

using tcp::PathEnd;

std::string hex_id(uint64_t id) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, id);
  return buf;
}
using tcp::plan_paths;

// One attempt; `local_failed` is set when the peer is on this host and the
// local channel could not be attached.
Result<Dialed> dial_once(const std::shared_ptr<core::EngineContext>& ctx, const platform::HostPort& to,
                         Deadline deadline, uint64_t connection_id, bool allow_local, bool& local_failed) {
  const Options& o = ctx->options;
  std::string where = to.host + ":" + std::to_string(to.port);
  auto context = [&](const Status& s) { return s.with_context("connect to " + where); };

  auto ctl = platform::connect_tcp(to, deadline);
  if (!ctl.ok()) return ctl.status();
  platform::Socket control = std::move(ctl).value();
  FERRY_RETURN_IF_ERROR(platform::tune_stream(control, 0));
  int fd = control.fd();

  wire::Hello hello;
  hello.role = wire::StreamRole::kControl;
  hello.engine_id = ctx->engine_id;
  hello.streams = 0;  // decided after WELCOME, sent in AUTH
  hello.host_id = ctx->host_id;
  hello.identity = ctx->identity->public_key();
  platform::fill_random(hello.nonce.data(), hello.nonce.size());
  Status s = write_handshake_frame(fd, wire::encode(hello), deadline);
  if (!s.ok()) return context(s);

  auto frame = read_handshake_frame(fd, deadline);
  if (!frame.ok()) return context(frame.status());
  if (frame->header.type == wire::FrameType::kRejected) {
    auto r = wire::decode_rejected(frame->header, frame->aux);
    if (!r.ok()) return context(r.status());
    return context(Status(r->code, "refused by the peer: " + r->message));
  }
  auto welcome = wire::decode_welcome(frame->header, frame->aux);
  if (!welcome.ok()) return context(welcome.status());
  // The acceptor chose from this engine's offer (the HELLO's range).
  if (welcome->version < wire::kSpokenVersions.min || welcome->version > wire::kSpokenVersions.max) {
    return context(Status(Code::kUnimplemented, "the accepting engine chose protocol version " +
                                                    std::to_string(welcome->version) + ", outside this engine's " +
                                                    wire::to_string(wire::kSpokenVersions)));
  }

  if (welcome->engine_id != platform::engine_id_of(welcome->identity)) {
    return context(Status(Code::kUnauthenticated, "the peer names an engine id that is not its key's"));
  }

  // Same host, neither side forced to TCP: the local transport.
  bool local =
      allow_local && o.transport != TransportChoice::kTcp && welcome->local_ok && welcome->host_id == ctx->host_id;
  if (o.transport == TransportChoice::kLocal && !local) {
    return context(Status(Code::kUnavailable, welcome->host_id != ctx->host_id
                                                  ? "FERRY_TRANSPORT=local, but the peer is on another host"
                                                  : "FERRY_TRANSPORT=local, but the peer serves only TCP"));
  }
  std::vector<PathEnd> ends;
  if (!local) {
    auto plan = plan_paths(ctx->nics, welcome->addresses, to, o.streams, auto_streams(platform::usable_cpu_count()));
    if (!plan.ok()) return context(plan.status().with_context("peer's advertised addresses"));
    ends = std::move(plan).value();
  }
  // A chosen count is what the application asked for: all of it or a
  // refusal. An automatic one takes what max_streams leaves.
  const bool fit = o.streams == kAutoStreams;
  auto ticket = ctx->admission.admit(o, core::host_of(platform::peer_name(fd)), static_cast<int>(ends.size()), fit);
  if (!ticket.ok()) return context(ticket.status());
  if (!local) ends.resize(static_cast<size_t>((*ticket)->streams()));
  wire::Auth auth;
  auth.streams = static_cast<uint32_t>(ends.size());
  auth.signature = ctx->identity->sign(wire::identity_input(wire::Signer::kConnector, hello, *welcome));
  if (welcome->auth_required) {
    if (o.auth_token.empty()) {
      (void)write_handshake_frame(fd, wire::encode(auth), deadline);
      return context(Status(Code::kUnauthenticated,
                            "the peer requires a shared secret and none is configured here (FERRY_AUTH_TOKEN)"));
    }
    auth.has_proof = true;
    auth.proof = platform::hmac_sha256(o.auth_token, wire::client_proof_input(hello.nonce, welcome->nonce));
  } else if (!o.auth_token.empty()) {
    return context(Status(Code::kUnauthenticated,
                          "a shared secret is configured here but the peer does not authenticate; refusing it"));
  }
  s = write_handshake_frame(fd, wire::encode(auth), deadline);
  if (!s.ok()) return context(s);

  frame = read_handshake_frame(fd, deadline);
  if (!frame.ok()) return context(frame.status());
  if (frame->header.type == wire::FrameType::kRejected) {
    auto r = wire::decode_rejected(frame->header, frame->aux);
    if (!r.ok()) return context(r.status());
    return context(Status(r->code, "refused by the peer: " + r->message));
  }
  auto accepted = wire::decode_accepted(frame->header, frame->aux);
  if (!accepted.ok()) return context(accepted.status());
  if (!platform::verify_signature(welcome->identity, wire::identity_input(wire::Signer::kAcceptor, hello, *welcome),
                                  accepted->signature)) {
    return context(Status(Code::kUnauthenticated, "the peer failed to prove it holds the key of engine " +
                                                      hex_id(welcome->engine_id)));
  }
  if (!o.auth_token.empty()) {
    auto expect = platform::hmac_sha256(o.auth_token, wire::server_proof_input(hello.nonce, welcome->nonce));
    if (!accepted->has_proof || !platform::constant_time_equal(expect.data(), accepted->proof.data(), expect.size())) {
      return context(Status(Code::kUnauthenticated, "the peer failed to prove it knows the shared secret"));
    }
  }

  if (local) {
    auto conn = local::connect_local(ctx, connection_id, welcome->engine_id, std::move(control), deadline);
    if (!conn.ok()) {
      local_failed = true;
      return context(conn.status().with_context("local transport"));
    }
    FERRY_ENGINE_LOG(kInfo, "local", ctx->engine_id, "connected to %s on this host (peer connection %" PRIu64 ")",
                     where.c_str(), accepted->connection_id);
    return Dialed{std::move(conn).value(), std::move(ticket).value()};
  }
  std::vector<platform::Socket> data;
  std::vector<tcp::PathInfo> paths;
  unsigned user_timeout = static_cast<unsigned>(o.path_timeout.count());
  for (size_t i = 0; i < ends.size(); ++i) {
    const PathEnd& end = ends[i];
    std::string label = "data stream " + std::to_string(i);
    auto d = platform::connect_tcp(end.remote, deadline, end.local_ip);
    if (!d.ok()) return context(d.status().with_context(label));
    FERRY_RETURN_IF_ERROR(platform::tune_stream(d.value(), o.socket_buffer_bytes, user_timeout));
    wire::Hello dh;
    dh.role = wire::StreamRole::kData;
    dh.engine_id = ctx->engine_id;
    dh.cookie = accepted->cookie;
    dh.stream_index = static_cast<uint32_t>(i);
    s = write_handshake_frame(d->fd(), wire::encode(dh), deadline);
    if (!s.ok()) return context(s.with_context(label));
    paths.push_back(tcp::PathInfo{end.nic, (end.nic.empty() ? std::string() : end.nic + " ") + platform::local_ip(d->fd()) +
                                          " -> " + end.remote.host + ":" + std::to_string(end.remote.port)});
    data.push_back(std::move(d).value());
  }

  frame = read_handshake_frame(fd, deadline);
  if (!frame.ok()) return context(frame.status().with_context("waiting for the data streams to attach"));
  if (frame->header.type != wire::FrameType::kReady) {
    if (frame->header.type == wire::FrameType::kRejected) {
      auto r = wire::decode_rejected(frame->header, frame->aux);
      if (r.ok()) return context(Status(r->code, "refused by the peer: " + r->message));
    }
    return context(
        Status(Code::kDataLoss, "expected READY, got " + std::string(wire::frame_type_name(frame->header.type))));
  }

  tcp::PeerInfo peer{welcome->engine_id, welcome->host_id, platform::peer_name(fd), welcome->version};
  auto conn = tcp::TcpTransport::connection(ctx, connection_id, std::move(peer), std::move(control), std::move(data),
                                            std::move(paths), std::move(ticket).value());
  if (Status started = conn->start(); !started.ok()) {
    conn->close();
    return context(started);
  }
  FERRY_ENGINE_LOG(kInfo, "tcp", ctx->engine_id, "connected to %s (peer connection %" PRIu64 ")", where.c_str(),
                   accepted->connection_id);
  return Dialed{std::move(conn), nullptr};
}

}  // namespace

Result<Dialed> dial(const std::shared_ptr<core::EngineContext>& ctx, const platform::HostPort& to, Deadline deadline,
                    const std::function<uint64_t()>& next_id) {
  bool local_failed = false;
  auto c = dial_once(ctx, to, deadline, next_id(), /*allow_local=*/true, local_failed);
  if (c.ok() || ctx->options.transport != TransportChoice::kAuto || !local_failed) return c;
  // Same host but the processes cannot reach each other's memory (another
  // pid namespace, no permission): TCP still works.
  FERRY_ENGINE_LOG(kInfo, "engine", ctx->engine_id, "%s; using TCP", c.status().to_string().c_str());
  return dial_once(ctx, to, deadline, next_id(), /*allow_local=*/false, local_failed);
}

}  // namespace ferry::bootstrap
