// Reading JSON documents that ferry wrote (plans, snapshots) back in, with
// errors that name the file and the field ("plan.json: irqs[3].planned:
// expected a string") instead of a library exception. nlohmann::json throws;
// these wrappers catch at the boundary so no exception leaves ferry.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::tune {

using Json = nlohmann::json;

// Parses `text`; kInvalidArgument naming `what` and the byte position.
Result<Json> parse_json(std::string_view text, std::string_view what);

// The field `key` of object `obj`, where `where` names `obj` for messages
// ("snap.json: irqs[2]"). kInvalidArgument when missing or of another type.
Result<std::string> json_string(const Json& obj, std::string_view key, const std::string& where);
Result<int64_t> json_int(const Json& obj, std::string_view key, const std::string& where);
Result<bool> json_bool(const Json& obj, std::string_view key, const std::string& where);
// The array or object at `key`; nullptr when `optional` and missing.
Result<const Json*> json_array(const Json& obj, std::string_view key, const std::string& where, bool optional = false);
Result<const Json*> json_object(const Json& obj, std::string_view key, const std::string& where, bool optional = false);

// Serializes with two-space indentation and a final newline; never throws
// (invalid UTF-8 is replaced).
std::string dump_json(const Json& j);

}  // namespace ferry::tune
