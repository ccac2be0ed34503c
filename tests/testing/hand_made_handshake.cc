// The hand-made connector's handshake (hand_made_handshake.h), frame by
// frame as wire/handshake.h lays it out.
#include "testing/hand_made_handshake.h"

#include <string>

#include "hand_made_identity.h"

namespace ferry::testing {

Status rejected_status(const bootstrap::RawFrame& frame) {
  if (frame.header.type != wire::FrameType::kRejected) return Status();
  FERRY_ASSIGN_OR_RETURN(wire::Rejected r, wire::decode_rejected(frame.header, frame.aux));
  return Status(r.code, r.message);
}

Result<wire::Accepted> hand_made_hello(int control, std::string_view host_id, uint32_t streams, Deadline deadline,
                                       wire::VersionRange versions) {
  wire::Hello hello;
  hello.min_version = versions.min;
  hello.version = versions.max;
  present_identity(hello);
  hello.host_id = std::string(host_id);
  FERRY_RETURN_IF_ERROR(bootstrap::write_handshake_frame(control, wire::encode(hello), deadline));
  FERRY_ASSIGN_OR_RETURN(bootstrap::RawFrame welcome, bootstrap::read_handshake_frame(control, deadline));
  FERRY_RETURN_IF_ERROR(rejected_status(welcome));
  if (welcome.header.type != wire::FrameType::kWelcome) return Status(Code::kDataLoss, "expected WELCOME");
  wire::Auth auth;
  auth.streams = streams;
  FERRY_RETURN_IF_ERROR(sign_auth(hello, welcome, auth));
  FERRY_RETURN_IF_ERROR(bootstrap::write_handshake_frame(control, wire::encode(auth), deadline));
  FERRY_ASSIGN_OR_RETURN(bootstrap::RawFrame accepted, bootstrap::read_handshake_frame(control, deadline));
  FERRY_RETURN_IF_ERROR(rejected_status(accepted));
  return wire::decode_accepted(accepted.header, accepted.aux);
}

Status hand_made_tcp_handshake(int control, const platform::HostPort& to, std::string_view host_id, int streams,
                               Deadline deadline, std::vector<platform::Socket>& data, std::string_view source_ip,
                               wire::VersionRange versions) {
  FERRY_ASSIGN_OR_RETURN(wire::Accepted accepted,
                         hand_made_hello(control, host_id, static_cast<uint32_t>(streams), deadline, versions));
  for (int i = 0; i < streams; ++i) {
    FERRY_ASSIGN_OR_RETURN(platform::Socket s, platform::connect_tcp(to, deadline, source_ip));
    data.push_back(std::move(s));
    wire::Hello stream;
    stream.min_version = versions.min;
    stream.version = versions.max;
    stream.role = wire::StreamRole::kData;
    stream.cookie = accepted.cookie;
    stream.stream_index = static_cast<uint32_t>(i);
    FERRY_RETURN_IF_ERROR(bootstrap::write_handshake_frame(data.back().fd(), wire::encode(stream), deadline));
  }
  FERRY_ASSIGN_OR_RETURN(bootstrap::RawFrame ready, bootstrap::read_handshake_frame(control, deadline));
  FERRY_RETURN_IF_ERROR(rejected_status(ready));
  if (ready.header.type != wire::FrameType::kReady) return Status(Code::kDataLoss, "expected READY");
  return Status();
}

}  // namespace ferry::testing
