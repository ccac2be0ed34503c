// Handshake frame I/O.
#include "transport/handshake_io.h"

#include "platform/socket.h"

namespace ferry::bootstrap {

Result<RawFrame> read_handshake_frame(int fd, Deadline deadline) {
  wire::HeaderBytes hb;
  FERRY_RETURN_IF_ERROR(platform::recv_exact_by(fd, hb.data(), hb.size(), deadline));
  FERRY_ASSIGN_OR_RETURN(wire::FrameHeader h, wire::decode_header(hb.data(), hb.size()));
  if (h.payload_len != 0) {
    return Status(Code::kDataLoss,
                  "handshake frame " + std::string(wire::frame_type_name(h.type)) + " carries a payload");
  }
  RawFrame f{h, std::string(h.aux_len, '\0')};
  if (h.aux_len > 0) FERRY_RETURN_IF_ERROR(platform::recv_exact_by(fd, f.aux.data(), f.aux.size(), deadline));
  return f;
}

Status write_handshake_frame(int fd, const wire::EncodedFrame& f, Deadline deadline) {
  wire::HeaderBytes hb;
  wire::encode_header(f.header, hb);
  std::string bytes(reinterpret_cast<const char*>(hb.data()), hb.size());
  bytes += f.aux;
  return platform::send_all_by(fd, bytes.data(), bytes.size(), deadline);
}

}  // namespace ferry::bootstrap
