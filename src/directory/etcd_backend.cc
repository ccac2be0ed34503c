// The directory on etcd, through its v3 JSON gateway over HTTP (libcurl):
// entries are attached to a lease that the owner keeps alive; etcd deletes
// them when the lease expires.
//
// Bounds: every response has a byte cap fixed by the request (refused as
// bytes arrive, before they are parsed), its JSON nesting is checked before
// parsing, and keys and values must be strict base64. Ranges are read in
// pages of kPage keys, each handed over before the next is asked for. No
// redirects, no proxies from the environment, only http://.
#include "directory/backend.h"

#if FERRY_HAVE_CURL
#include <curl/curl.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "platform/log.h"
#include "directory/entry.h"

namespace ferry::directory {
namespace {

using json = nlohmann::json;

constexpr size_t kSmallReply = 64 * 1024;
// A page of entries of the largest size is a reply of about 3.4 MB, which
// parsing doubles: what a listing holds besides its decoded entries.
constexpr size_t kPage = 100;

struct Body {
  std::string data;
  size_t cap = 0;
  bool overflow = false;
};

size_t on_body(char* p, size_t size, size_t n, void* user) {
  auto* b = static_cast<Body*>(user);
  size_t len = size * n;
  if (b->data.size() + len > b->cap) {
    b->overflow = true;
    return 0;  // aborts the transfer
  }
  b->data.append(p, len);
  return len;
}

// etcd's gateway writes 64-bit integers as strings.
bool get_int(const json& j, const char* field, int64_t& out) {
  auto it = j.find(field);
  if (it == j.end()) return false;
  if (it->is_number_integer()) {
    out = it->get<int64_t>();
    return true;
  }
  if (!it->is_string()) return false;
  const std::string& s = it->get_ref<const std::string&>();
  if (s.empty() || s.size() > 20) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return false;
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno != 0) return false;
  out = v;
  return true;
}

std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    unsigned char c = static_cast<unsigned char>(prefix.back());
    if (c < 0xff) {
      prefix.back() = static_cast<char>(c + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

class EtcdBackend final : public Backend {
 public:
  explicit EtcdBackend(DirectoryUrl url) : url_(std::move(url)) {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  }
  ~EtcdBackend() override {
    if (curl_ != nullptr) curl_easy_cleanup(curl_);
  }

  Result<std::optional<std::string>> get(const std::string& key, size_t max_value, Deadline deadline) override {
    json req = {{"key", base64_encode(key)}};
    FERRY_ASSIGN_OR_RETURN(json r, call("/v3/kv/range", req, max_value * 2 + kSmallReply, deadline));
    KeyValues kvs;
    FERRY_RETURN_IF_ERROR(read_kvs(r, max_value, kvs));
    for (auto& [k, v] : kvs)
      if (k == key) return std::optional<std::string>(std::move(v));
    return std::optional<std::string>();
  }

  Status list(const std::string& prefix, size_t max_entries, size_t max_value, Deadline deadline,
              const TakeEntry& take) override {
    size_t listed = 0;
    std::string start = prefix;
    const std::string end = prefix_end(prefix);
    for (;;) {
      json req = {{"key", base64_encode(start)}, {"range_end", base64_encode(end)}, {"limit", kPage}};
      FERRY_ASSIGN_OR_RETURN(json r, call("/v3/kv/range", req, kPage * (max_value * 2 + 1024) + kSmallReply, deadline));
      KeyValues page;
      FERRY_RETURN_IF_ERROR(read_kvs(r, max_value, page));
      if (page.size() > kPage) return malformed("a range returned more keys than its limit");
      for (auto& kv : page) {
        if (kv.first.compare(0, prefix.size(), prefix) != 0 || kv.first < start) {
          return malformed("a range returned a key outside what was asked");
        }
      }
      bool more = false;
      if (auto it = r.find("more"); it != r.end() && it->is_boolean()) more = it->get<bool>();
      r = json();  // the page now lives in `page` only
      if (!page.empty()) start = page.back().first + std::string(1, '\0');
      listed += page.size();
      if (listed > max_entries) {
        return Status(Code::kResourceExhausted, where() + ": more than " + std::to_string(max_entries) +
                                                    " entries under " + printable(prefix, 200));
      }
      for (const auto& [key, value] : page) FERRY_RETURN_IF_ERROR(take(key, value));
      if (!more || page.empty()) break;
    }
    return Status();
  }

  Status put_with_ttl(const std::string& key, const std::string& value, std::chrono::milliseconds ttl,
                      Deadline deadline) override {
    int64_t seconds = std::max<int64_t>(1, (ttl.count() + 999) / 1000);
    FERRY_ASSIGN_OR_RETURN(json g, call("/v3/lease/grant", json{{"TTL", seconds}}, kSmallReply, deadline));
    int64_t lease = 0;
    if (!get_int(g, "ID", lease) || lease == 0) return malformed("lease grant without an ID");
    int64_t granted = 0;
    if (get_int(g, "TTL", granted) && granted > seconds && !noted_longer_ttl_) {
      // etcd's shortest lease is 1.5 election timeouts (2 s by default).
      noted_longer_ttl_ = true;
      FERRY_LOG(kInfo, "directory",
                "%s granted a %lld s lease for a %lld ms TTL (its shortest); a dead engine vanishes within %lld s",
                url_.redacted.c_str(), static_cast<long long>(granted), static_cast<long long>(ttl.count()),
                static_cast<long long>(granted));
    }
    json put = {{"key", base64_encode(key)}, {"value", base64_encode(value)}, {"lease", std::to_string(lease)}};
    auto p = call("/v3/kv/put", put, kSmallReply, deadline);
    if (!p.ok()) {
      revoke(lease, deadline);
      return p.status();
    }
    auto old = leases_.find(key);
    if (old != leases_.end() && old->second != lease) revoke(old->second, deadline);  // it holds nothing now
    leases_[key] = lease;
    return Status();
  }

  Status put(const std::string& key, const std::string& value, Deadline deadline) override {
    json put = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
    return call("/v3/kv/put", put, kSmallReply, deadline).status();
  }

  Result<bool> refresh(const std::string& key, const std::string& value, std::chrono::milliseconds ttl,
                       Deadline deadline) override {
    auto it = leases_.find(key);
    if (it == leases_.end()) return false;
    FERRY_ASSIGN_OR_RETURN(
        json k, call("/v3/lease/keepalive", json{{"ID", std::to_string(it->second)}}, kSmallReply, deadline));
    int64_t left = 0;
    auto result = k.find("result");
    if (result == k.end() || !result->is_object() || !get_int(*result, "TTL", left) || left <= 0) {
      leases_.erase(it);  // expired (or the server forgot it): the key went with it
      return false;
    }
    FERRY_ASSIGN_OR_RETURN(auto cur, get(key, value.size(), deadline));
    return cur.has_value() && *cur == value;
  }

  Status remove_if(const std::string& key, const std::string& value, Deadline deadline) override {
    json txn = {
        {"compare", json::array({{{"key", base64_encode(key)},
                                  {"target", "VALUE"},
                                  {"result", "EQUAL"},
                                  {"value", base64_encode(value)}}})},
        {"success", json::array({{{"request_delete_range", {{"key", base64_encode(key)}}}}})},
    };
    Status s = call("/v3/kv/txn", txn, kSmallReply, deadline).status();
    auto it = leases_.find(key);
    if (it != leases_.end()) {
      revoke(it->second, deadline);
      leases_.erase(it);
    }
    return s;
  }

 private:
  std::string where() const { return "directory " + url_.redacted; }
  Status malformed(const std::string& why) const { return Status(Code::kDataLoss, where() + ": " + why); }

  void revoke(int64_t lease, Deadline deadline) {
    (void)call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}, kSmallReply, deadline);
  }

  Status read_kvs(const json& r, size_t max_value, KeyValues& out) {
    auto kvs = r.find("kvs");
    if (kvs == r.end()) return Status();  // none
    if (!kvs->is_array()) return malformed("\"kvs\" is not a list");
    for (const json& kv : *kvs) {
      if (!kv.is_object()) return malformed("a key-value is not an object");
      auto k = kv.find("key");
      if (k == kv.end() || !k->is_string()) return malformed("a key-value without a key");
      auto key = base64_decode(k->get_ref<const std::string&>());
      if (!key.ok()) return malformed("a key is not base64");
      std::string value;
      if (auto v = kv.find("value"); v != kv.end()) {  // an empty value is left out
        if (!v->is_string()) return malformed("a value is not a string");
        const std::string& b64 = v->get_ref<const std::string&>();
        // Longer than max_value once decoded: keep max_value + 1 bytes for
        // the caller to refuse, without decoding the rest.
        if (b64.size() / 4 * 3 > max_value + 3) {
          value.assign(max_value + 1, '\0');
        } else {
          auto d = base64_decode(b64);
          if (!d.ok()) return malformed("a value is not base64");
          value = std::move(d).value();
        }
      }
      out.emplace_back(std::move(key).value(), std::move(value));
    }
    return Status();
  }

  Result<json> call(const std::string& path, const json& request, size_t max_reply, Deadline deadline) {
    Status last(Code::kUnavailable, where() + ": no endpoint");
    for (size_t i = 0; i < url_.endpoints.size(); ++i) {
      size_t idx = (current_ + i) % url_.endpoints.size();
      auto r = post(idx, path, request.dump(), max_reply, deadline);
      if (r.ok()) {
        current_ = idx;
        return r;
      }
      last = r.status();
      if (last.code() != Code::kUnavailable || Clock::now() >= deadline) break;
    }
    return last;
  }

  Result<json> post(size_t idx, const std::string& path, const std::string& body, size_t max_reply, Deadline deadline) {
    const platform::HostPort& ep = url_.endpoints[idx];
    std::string host = ep.host.find(':') != std::string::npos ? "[" + ep.host + "]" : ep.host;
    std::string endpoint = host + ":" + std::to_string(ep.port);
    std::string url = "http://" + endpoint + path;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Status(Code::kUnavailable, where() + ": no answer from " + endpoint + " by the deadline");
    if (curl_ == nullptr) curl_ = curl_easy_init();
    if (curl_ == nullptr) return Status(Code::kResourceExhausted, where() + ": cannot create an HTTP client");
    curl_easy_reset(curl_);
    Body reply;
    reply.cap = max_reply;
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(curl_, CURLOPT_PROXY, "");
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl_, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, static_cast<long>(left));
    curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(left));
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(curl_, CURLOPT_MAXFILESIZE, static_cast<long>(max_reply));
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &reply);
    CURLcode rc = curl_easy_perform(curl_);
    long status = 0;
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    if (reply.overflow || rc == CURLE_FILESIZE_EXCEEDED) {
      return Status(Code::kDataLoss, where() + ": the answer of " + endpoint + " to " + path + " is larger than " +
                                         std::to_string(max_reply) + " bytes; refused");
    }
    if (rc == CURLE_OPERATION_TIMEDOUT) {
      return Status(Code::kUnavailable, where() + ": no answer from " + endpoint + " to " + path + " by the deadline");
    }
    if (rc != CURLE_OK) {
      return Status(Code::kUnavailable, where() + ": " + endpoint + path + ": " + curl_easy_strerror(rc));
    }
    // A keep-alive answers with a stream of JSON messages: the first is ours.
    std::string_view text = reply.data;
    if (path == "/v3/lease/keepalive") text = text.substr(0, text.find('\n'));
    FERRY_RETURN_IF_ERROR(check_json_shape(text, max_reply, 8, where() + ": " + path));
    json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (status != 200) {
      std::string msg;
      for (const char* f : {"message", "error"}) {
        if (!j.is_object()) break;
        auto it = j.find(f);
        if (it != j.end() && it->is_string()) {
          msg = it->get<std::string>();
          break;
        }
      }
      return Status(Code::kUnavailable,
                    where() + ": " + endpoint + path + ": HTTP " + std::to_string(status) + " " + printable(msg, 200));
    }
    if (j.is_discarded() || !j.is_object()) {
      return malformed("the answer of " + endpoint + " to " + path + " is not a JSON object: \"" +
                       printable(reply.data) + "\"");
    }
    if (auto err = j.find("error"); err != j.end()) {  // an error inside a stream's message
      return Status(Code::kUnavailable, where() + ": " + endpoint + path + ": " + printable(err->dump(), 200));
    }
    return j;
  }

  DirectoryUrl url_;
  CURL* curl_ = nullptr;
  size_t current_ = 0;  // the endpoint that answered last
  bool noted_longer_ttl_ = false;
  std::map<std::string, int64_t> leases_;  // key -> the lease it was put with
};

}  // namespace

std::unique_ptr<Backend> make_etcd_backend(const DirectoryUrl& url) { return std::make_unique<EtcdBackend>(url); }

}  // namespace ferry::directory

#else  // built without libcurl

namespace ferry::directory {
std::unique_ptr<Backend> make_etcd_backend(const DirectoryUrl&) {
  return make_missing_backend("etcd", "libcurl (libcurl4-openssl-dev)");
}
}  // namespace ferry::directory

#endif
