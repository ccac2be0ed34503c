// Typed JSON field access with path-named errors; exceptions stop here.
#include "tune/json_fields.h"

namespace ferry::tune {
namespace {

Result<const Json*> field(const Json& obj, std::string_view key, const std::string& where) {
  if (!obj.is_object()) return Status(Code::kInvalidArgument, where + ": expected an object");
  auto it = obj.find(std::string(key));
  if (it == obj.end()) return Status(Code::kInvalidArgument, where + ": missing field \"" + std::string(key) + "\"");
  return &*it;
}

Status wrong_type(const std::string& where, std::string_view key, std::string_view expected) {
  return Status(Code::kInvalidArgument, where + "." + std::string(key) + ": expected " + std::string(expected));
}

}  // namespace

Result<Json> parse_json(std::string_view text, std::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return Status(Code::kInvalidArgument,
                  std::string(what) + ": not valid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const std::exception& e) {
    return Status(Code::kInvalidArgument, std::string(what) + ": not valid JSON: " + e.what());
  }
}

Result<std::string> json_string(const Json& obj, std::string_view key, const std::string& where) {
  FERRY_ASSIGN_OR_RETURN(const Json* v, field(obj, key, where));
  if (!v->is_string()) return wrong_type(where, key, "a string");
  return v->get<std::string>();
}

Result<int64_t> json_int(const Json& obj, std::string_view key, const std::string& where) {
  FERRY_ASSIGN_OR_RETURN(const Json* v, field(obj, key, where));
  if (!v->is_number_integer()) return wrong_type(where, key, "an integer");
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return wrong_type(where, key, "an integer below 2^63");
    return static_cast<int64_t>(u);
  }
  return v->get<int64_t>();
}

Result<bool> json_bool(const Json& obj, std::string_view key, const std::string& where) {
  FERRY_ASSIGN_OR_RETURN(const Json* v, field(obj, key, where));
  if (!v->is_boolean()) return wrong_type(where, key, "true or false");
  return v->get<bool>();
}

Result<const Json*> json_array(const Json& obj, std::string_view key, const std::string& where, bool optional) {
  if (optional && obj.is_object() && !obj.contains(std::string(key))) return static_cast<const Json*>(nullptr);
  FERRY_ASSIGN_OR_RETURN(const Json* v, field(obj, key, where));
  if (!v->is_array()) return wrong_type(where, key, "an array");
  return v;
}

Result<const Json*> json_object(const Json& obj, std::string_view key, const std::string& where, bool optional) {
  if (optional && obj.is_object() && !obj.contains(std::string(key))) return static_cast<const Json*>(nullptr);
  FERRY_ASSIGN_OR_RETURN(const Json* v, field(obj, key, where));
  if (!v->is_object()) return wrong_type(where, key, "an object");
  return v;
}

std::string dump_json(const Json& j) { return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n"; }

}  // namespace ferry::tune
