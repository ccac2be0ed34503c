// Feeds arbitrary bytes to what the engine decodes from a fleet directory
// (Redis or etcd): anyone who can write the directory writes these bytes.
// The first byte picks the decoder:
//   0: an entry's value (decode_entry under a key); an accepted entry
//      re-encodes to a value that decodes to the same fields;
//   1: strict base64 (etcd's keys and values); decoded bytes encode back to
//      the input;
//   2: a directory URL (from FERRY_DIRECTORY); a parsed URL's redacted form
//      masks the password and parses to the same endpoints and namespace;
//   3: JSON shape limits (size, depth) before any parser sees the text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "directory/entry.h"
#include "directory/url.h"

namespace {

using namespace ferry::directory;

void same_entry(const ferry::DirectoryEntry& a, const ferry::DirectoryEntry& b) {
  if (a.name != b.name || a.engine_id != b.engine_id || a.incarnation != b.incarnation || a.host_id != b.host_id ||
      a.addresses != b.addresses || a.pid != b.pid || a.started_unix_ms != b.started_unix_ms) {
    std::abort();
  }
}

void entry(std::string_view in) {
  // The name the key carries: up to the first NUL, the value after it.
  size_t cut = in.find('\0');
  std::string_view name = cut == std::string_view::npos ? std::string_view("decode-3") : in.substr(0, cut);
  std::string_view value = cut == std::string_view::npos ? in : in.substr(cut + 1);
  std::string key = "ferry/engines/" + std::string(name);
  auto e = decode_entry(key, value, name);
  if (!e.ok()) return;
  if (e->name != name || e->addresses.empty()) std::abort();
  auto again = decode_entry(key, encode_entry(*e), name);
  if (!again.ok()) std::abort();
  same_entry(*e, *again);
}

void base64(std::string_view in) {
  auto d = base64_decode(in);
  if (!d.ok()) return;
  if (base64_encode(*d) != in) std::abort();
}

void url(std::string_view in) {
  auto u = parse_directory_url(in);
  if (!u.ok()) return;
  if (u->endpoints.empty() || !valid_namespace(u->ns)) std::abort();
  // What logs and `ferry config` show never carries the password.
  if (!u->password.empty() && u->redacted.find("***@") == std::string::npos) std::abort();
  auto again = parse_directory_url(u->redacted);
  if (!again.ok() || again->ns != u->ns || again->endpoints.size() != u->endpoints.size()) std::abort();
}

void shape(std::string_view in) {
  ferry::Status s = check_json_shape(in, 4096, 8, "fuzz");
  if (s.ok() && in.size() > 4096) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: entry(in); break;
    case 1: base64(in); break;
    case 2: url(in); break;
    default: shape(in); break;
  }
  return 0;
}
