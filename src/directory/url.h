// Directory URLs: redis://[user:password@]host:port[/namespace] and
// etcd://host:port[,host:port...][/namespace]. Pure parsing, no I/O.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"
#include "platform/socket.h"

namespace ferry::directory {

struct DirectoryUrl {
  enum class Scheme { kRedis, kEtcd };
  Scheme scheme = Scheme::kRedis;
  std::vector<platform::HostPort> endpoints;  // redis: exactly one
  std::string user;                           // percent-decoded; empty if none
  std::string password;                       // percent-decoded; never logged
  std::string ns = "ferry";                   // "prod" or "team/prod"
  std::string redacted;                       // the URL with the password replaced by "***"
};

// kInvalidArgument says what is wrong (the message never holds the password).
Result<DirectoryUrl> parse_directory_url(std::string_view url);

// `url` with any password replaced by "***" (the input unchanged if it does
// not parse); for `ferry config` and logs.
std::string redact_directory_url(std::string_view url);

// Namespaces: 1 to 128 bytes of [A-Za-z0-9._-] in segments joined by '/', no
// empty segment, none "." or "..".
bool valid_namespace(std::string_view ns);

// The key of `name`'s entry and the prefix all entries share.
std::string entry_key(const std::string& ns, std::string_view name);
std::string entries_prefix(const std::string& ns);

}  // namespace ferry::directory
