#include "directory/url.h"

#include "ferry/directory.h"

namespace ferry::directory {
namespace {

Status bad(std::string_view url_redacted, const std::string& why) {
  return Status(Code::kInvalidArgument, "directory URL \"" + std::string(url_redacted) + "\": " + why +
                                            " (expected redis://[user:password@]host:port[/namespace] or "
                                            "etcd://host:port[,host:port...][/namespace])");
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

// The scheme, credentials and hosts of `url`, with the password masked.
struct Split {
  std::string_view scheme, userinfo, hosts, path;
  bool has_path = false;
};

bool split(std::string_view url, Split& s) {
  size_t sep = url.find("://");
  if (sep == std::string_view::npos) return false;
  s.scheme = url.substr(0, sep);
  std::string_view rest = url.substr(sep + 3);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    s.path = rest.substr(slash + 1);
    s.has_path = true;
  }
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    s.userinfo = authority.substr(0, at);
    s.hosts = authority.substr(at + 1);
  } else {
    s.hosts = authority;
  }
  return true;
}

}  // namespace

bool valid_namespace(std::string_view ns) {
  if (ns.empty() || ns.size() > 128) return false;
  size_t start = 0;
  while (start <= ns.size()) {
    size_t end = ns.find('/', start);
    if (end == std::string_view::npos) end = ns.size();
    std::string_view seg = ns.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    for (char c : seg)
      if (!name_char(c)) return false;
    start = end + 1;
  }
  return true;
}

std::string redact_directory_url(std::string_view url) {
  Split s;
  if (!split(url, s) || s.userinfo.empty()) return std::string(url);
  // user:password@ keeps the user; password@ (Redis's classic form) is all
  // password.
  size_t colon = s.userinfo.find(':');
  std::string user = colon == std::string_view::npos ? "" : std::string(s.userinfo.substr(0, colon)) + ":";
  std::string out = std::string(s.scheme) + "://" + user + "***@" + std::string(s.hosts);
  if (s.has_path) out += "/" + std::string(s.path);
  return out;
}

Result<DirectoryUrl> parse_directory_url(std::string_view url) {
  DirectoryUrl u;
  u.redacted = redact_directory_url(url);
  if (url.size() > 4096) return bad(u.redacted.substr(0, 64) + "...", "longer than 4096 bytes");
  for (char c : url) {
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) {
      return bad(u.redacted, "holds a space, control or non-ASCII byte");
    }
  }
  Split s;
  if (!split(url, s)) return bad(u.redacted, "no scheme");
  if (s.scheme == "redis") {
    u.scheme = DirectoryUrl::Scheme::kRedis;
  } else if (s.scheme == "etcd") {
    u.scheme = DirectoryUrl::Scheme::kEtcd;
  } else {
    return bad(u.redacted, "unknown scheme \"" + std::string(s.scheme) + "\"");
  }
  if (!s.userinfo.empty()) {
    if (u.scheme == DirectoryUrl::Scheme::kEtcd) {
      return bad(u.redacted, "credentials are not supported for etcd (use a network only the fleet reaches)");
    }
    size_t colon = s.userinfo.find(':');
    std::string_view user = s.userinfo.substr(0, colon);
    std::string_view pass = colon == std::string_view::npos ? std::string_view() : s.userinfo.substr(colon + 1);
    if (colon == std::string_view::npos) {  // redis://password@host: the classic form
      pass = user;
      user = {};
    }
    if (!percent_decode(user, u.user) || !percent_decode(pass, u.password)) {
      return bad(u.redacted, "bad percent escape in the credentials");
    }
  }
  if (s.hosts.empty()) return bad(u.redacted, "no host:port");
  size_t start = 0;
  while (start <= s.hosts.size()) {
    size_t end = s.hosts.find(',', start);
    if (end == std::string_view::npos) end = s.hosts.size();
    std::string_view one = s.hosts.substr(start, end - start);
    auto hp = platform::parse_host_port(one);
    if (!hp.ok()) return bad(u.redacted, "endpoint \"" + std::string(one) + "\": " + hp.status().message());
    if (hp->host.empty() || hp->port == 0) {
      return bad(u.redacted, "endpoint \"" + std::string(one) + "\" needs a host and a nonzero port");
    }
    u.endpoints.push_back(std::move(hp).value());
    if (u.endpoints.size() > 16) return bad(u.redacted, "more than 16 endpoints");
    start = end + 1;
  }
  if (u.scheme == DirectoryUrl::Scheme::kRedis && u.endpoints.size() != 1) {
    return bad(u.redacted, "redis takes exactly one host:port");
  }
  if (s.has_path) {
    std::string_view path = s.path;
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    if (!path.empty()) {
      if (!valid_namespace(path)) {
        return bad(u.redacted, "namespace \"" + std::string(path) +
                                   "\" must be 1-128 bytes of [A-Za-z0-9._-] segments joined by '/'");
      }
      u.ns = std::string(path);
    }
  }
  return u;
}

std::string entries_prefix(const std::string& ns) { return ns + "/engines/"; }
std::string entry_key(const std::string& ns, std::string_view name) { return entries_prefix(ns) + std::string(name); }

}  // namespace ferry::directory
