// Directory entries as stored (JSON text, so `redis-cli get` and `etcdctl get`
// show them), and the bounded decoding of everything a directory returns.
// Pure functions, no I/O: every byte is hostile.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "ferry/directory.h"

namespace ferry::directory {

// {"ferry":1,"name":...,"engine":"<16 hex>","incarnation":N,"host":...,
//  "addresses":[...],"pid":N,"started_unix_ms":N}
std::string encode_entry(const DirectoryEntry& e);

// Validates and decodes the value stored under `key`. kDataLoss names the key
// and what is wrong: larger than Directory::kMaxEntryBytes (refused before
// parsing), not UTF-8 JSON, nested too deep, a field missing or of the wrong
// type or out of bounds, or a name that is not the key's.
Result<DirectoryEntry> decode_entry(std::string_view key, std::string_view value, std::string_view name_from_key);

// Refuses JSON text longer than `max_bytes` or nested deeper than
// `max_depth` before any parser sees it (kDataLoss naming `what`).
Status check_json_shape(std::string_view text, size_t max_bytes, int max_depth, std::string_view what);

// Strict standard base64 (padding required); kDataLoss on anything else.
std::string base64_encode(std::string_view in);
Result<std::string> base64_decode(std::string_view in);

// At most `max` bytes of `s` for a message, non-printable bytes as \xNN.
std::string printable(std::string_view s, size_t max = 64);

// All of `s` for a terminal (`ferry dir`'s table, DirectoryEntry::to_string):
// UTF-8 text stays as it is, so that names people read keep their letters;
// control characters (C0, DEL, and C1 such as U+009B, which terminals take
// as escape sequences), backslashes and bytes that are not UTF-8 become \xNN,
// byte by byte. What comes out holds no byte a terminal acts on.
std::string terminal_text(std::string_view s);

}  // namespace ferry::directory
