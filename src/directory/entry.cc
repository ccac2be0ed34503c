#include "directory/entry.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "platform/socket.h"
#include "wire/metadata.h"

namespace ferry::directory {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxAddresses = 64;
constexpr size_t kMaxAddressBytes = 300;
constexpr size_t kMaxHostIdBytes = 512;

Status malformed(std::string_view key, const std::string& why) {
  return Status(Code::kDataLoss, "directory entry " + printable(key, 200) + " is malformed: " + why);
}

bool get_u64(const json& j, const char* field, uint64_t& out) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  out = it->get<uint64_t>();
  return true;
}

bool get_i64(const json& j, const char* field, int64_t& out) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_number_integer()) return false;
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
  out = it->get<int64_t>();
  return true;
}

const std::string* get_string(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) return nullptr;
  return it->get_ptr<const std::string*>();
}

}  // namespace

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

namespace {

// The length of the UTF-8 sequence at the start of `s` that encodes one code
// point (shortest form, no surrogate, at most U+10FFFF), with the code point
// in `cp`; 0 when `s` does not start with one.
size_t utf8_sequence(std::string_view s, uint32_t& cp) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char c = byte(0);
  size_t n;
  uint32_t min;
  if (c < 0x80) {
    cp = c;
    return 1;
  } else if ((c & 0xe0) == 0xc0) {
    n = 2, cp = c & 0x1f, min = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3, cp = c & 0x0f, min = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

void append_escaped(std::string& out, std::string_view bytes) {
  for (char c : bytes) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
    out += buf;
  }
}

}  // namespace

std::string terminal_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    uint32_t cp = 0;
    size_t n = utf8_sequence(s, cp);
    if (n == 0) {
      append_escaped(out, s.substr(0, 1));
      n = 1;
    } else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == '\\') {
      append_escaped(out, s.substr(0, n));
    } else {
      out.append(s.substr(0, n));
    }
    s.remove_prefix(n);
  }
  return out;
}

Status check_json_shape(std::string_view text, size_t max_bytes, int max_depth, std::string_view what) {
  if (text.size() > max_bytes) {
    return Status(Code::kDataLoss, std::string(what) + ": " + std::to_string(text.size()) + " bytes, more than the " +
                                       std::to_string(max_bytes) + " allowed");
  }
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) {
        return Status(Code::kDataLoss,
                      std::string(what) + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return Status();
}

std::string encode_entry(const DirectoryEntry& e) {
  char id[17];
  std::snprintf(id, sizeof(id), "%016" PRIx64, e.engine_id);
  json j = {{"ferry", 1},        {"name", e.name},           {"engine", id}, {"incarnation", e.incarnation},
            {"host", e.host_id}, {"addresses", e.addresses}, {"pid", e.pid}, {"started_unix_ms", e.started_unix_ms}};
  // Replace, never throw, should a host id hold bytes that are not UTF-8.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<DirectoryEntry> decode_entry(std::string_view key, std::string_view value, std::string_view name_from_key) {
  if (value.size() > Directory::kMaxEntryBytes) {
    return malformed(key, std::to_string(value.size()) + " bytes, more than the " +
                              std::to_string(Directory::kMaxEntryBytes) + " an entry may hold");
  }
  Status shape = check_json_shape(value, Directory::kMaxEntryBytes, 4, "value");
  if (!shape.ok()) return malformed(key, shape.message());
  // No exceptions: a parse error is a discarded value. The parser refuses
  // bytes that are not UTF-8 inside strings.
  json j = json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return malformed(key, "not UTF-8 JSON: \"" + printable(value) + "\"");
  if (!j.is_object()) return malformed(key, "not a JSON object");
  uint64_t version = 0;
  if (!get_u64(j, "ferry", version) || version != 1) {
    return malformed(key, "\"ferry\" must be 1 (the entry format this engine reads)");
  }
  DirectoryEntry e;
  const std::string* name = get_string(j, "name");
  if (name == nullptr || !Directory::valid_name(*name)) return malformed(key, "\"name\" missing or not a valid name");
  if (*name != name_from_key) {
    return malformed(key,
                     "\"name\" is \"" + printable(*name) + "\", not the key's \"" + printable(name_from_key) + "\"");
  }
  e.name = *name;
  const std::string* engine = get_string(j, "engine");
  if (engine == nullptr || engine->size() != 16 || engine->find_first_not_of("0123456789abcdef") != std::string::npos) {
    return malformed(key, "\"engine\" must be 16 lower-case hex digits");
  }
  e.engine_id = std::stoull(*engine, nullptr, 16);
  if (!get_u64(j, "incarnation", e.incarnation) || e.incarnation == 0) {
    return malformed(key, "\"incarnation\" must be a positive integer");
  }
  const std::string* host = get_string(j, "host");
  if (host == nullptr || host->empty() || host->size() > kMaxHostIdBytes) {
    return malformed(key, "\"host\" must be a string of 1-" + std::to_string(kMaxHostIdBytes) + " bytes");
  }
  e.host_id = *host;
  auto addrs = j.find("addresses");
  if (addrs == j.end() || !addrs->is_array() || addrs->empty() || addrs->size() > kMaxAddresses) {
    return malformed(key, "\"addresses\" must be a list of 1-" + std::to_string(kMaxAddresses) + " host:port");
  }
  for (const json& a : *addrs) {
    if (!a.is_string()) return malformed(key, "an address is not a string");
    const std::string& s = a.get_ref<const std::string&>();
    if (s.size() > kMaxAddressBytes) return malformed(key, "an address is longer than 300 bytes");
    auto hp = platform::parse_host_port(s);
    if (!hp.ok() || hp->host.empty() || hp->port == 0) {
      return malformed(key, "address \"" + printable(s) + "\" is not host:port");
    }
    e.addresses.push_back(s);
  }
  if (!get_i64(j, "pid", e.pid) || e.pid < 0) return malformed(key, "\"pid\" must be a non-negative integer");
  if (!get_i64(j, "started_unix_ms", e.started_unix_ms) || e.started_unix_ms < 0) {
    return malformed(key, "\"started_unix_ms\" must be a non-negative integer");
  }
  return e;
}

namespace {
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

Result<std::string> base64_decode(std::string_view in) {
  auto bad = [] { return Status(Code::kDataLoss, "not base64"); };
  if (in.size() % 4 != 0) return bad();
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    bool last = i + 4 == in.size();
    int pad = 0;
    if (last && in[i + 3] == '=') pad = in[i + 2] == '=' ? 2 : 1;
    int a = val(in[i]), b = val(in[i + 1]);
    int c = pad >= 2 ? 0 : val(in[i + 2]);
    int d = pad >= 1 ? 0 : val(in[i + 3]);
    if (a < 0 || b < 0 || c < 0 || d < 0) return bad();
    uint32_t v = (uint32_t(a) << 18) | (uint32_t(b) << 12) | (uint32_t(c) << 6) | uint32_t(d);
    // Bits past the last byte must be zero: one text per byte string, so
    // that no two keys or values a peer writes stand for the same bytes.
    if ((pad == 2 && (v & 0xffff) != 0) || (pad == 1 && (v & 0xff) != 0)) return bad();
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

}  // namespace ferry::directory
