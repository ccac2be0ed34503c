// Hints for a connect that reached something other than a ferry engine.
#include "ferry/connect_hint.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>

#include "ferry/bench_session.h"

namespace ferry::cli {
namespace {

constexpr const char kQuestion[] = "; is this a ferry engine? ";

// The four bytes a frame's magic was read from (little-endian on the wire),
// as text: printable ASCII as is, anything else as \xNN.
std::string magic_bytes(uint32_t magic) {
  std::string out;
  for (int i = 0; i < 4; ++i) {
    auto c = static_cast<unsigned char>(magic >> (8 * i));
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace

Status with_connect_hint(const Status& s) {
  const std::string& m = s.message();
  // src/wire/frame.cc: "bad frame magic 0x%08x (expected 0x%08x)".
  static const std::string kBadMagic = "bad frame magic 0x";
  if (size_t at = m.find(kBadMagic); s.code() == Code::kDataLoss && at != std::string::npos) {
    uint32_t magic = 0;
    if (std::sscanf(m.c_str() + at + kBadMagic.size(), "%8" SCNx32, &magic) == 1) {
      return Status(s.code(), m + kQuestion + "(it answered with '" + magic_bytes(magic) + "')");
    }
  }
  if (s.code() == Code::kDeadlineExceeded && m.find("handshake") != std::string::npos) {
    return Status(s.code(), m + kQuestion + "(it took the connection but did not answer the handshake)");
  }
  return s;
}

std::shared_ptr<Connection> connect_or_die(Engine& engine, const std::string& peer, const std::string& what) {
  auto conn = engine.connect(peer, after(std::chrono::seconds(10)));
  if (!conn.ok()) die(what.empty() ? "connect to " + peer : what, with_connect_hint(conn.status()));
  return std::move(conn).value();
}

}  // namespace ferry::cli
