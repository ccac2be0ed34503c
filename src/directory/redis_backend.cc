// The directory on Redis: hiredis formats commands and parses replies; the
// socket, the deadlines and the bounds are ours. Keys expire by PX/PEXPIRE.
//
// Bounds on what a server can make us hold: every reply has a byte cap fixed
// by the command (an entry, a page of keys, a batch of values); bytes past it
// are refused as they arrive, and an array announcing more elements than the
// cap could carry is refused before hiredis allocates it (our reply
// functions, not hiredis's defaults, build the reply). Nesting is hiredis's
// own limit (7 levels). A listing hands each batch of values over before it
// asks for the next, and remembers the keys it has seen by hash only.
#include "directory/backend.h"

#if FERRY_HAVE_HIREDIS
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <span>
#include <unordered_set>

#include "directory/entry.h"
#include "platform/socket.h"
#include "platform/system_error.h"

namespace ferry::directory {
namespace {

struct Reply {
  int type = 0;
  std::string str;
  long long integer = 0;
  std::vector<std::unique_ptr<Reply>> elements;
};

// The most elements an array of the reply being read may announce. Set per
// command; a backend is used by one thread at a time.
thread_local size_t t_max_elements = 0;

void* attach(const redisReadTask* task, Reply* r) {
  if (r == nullptr) return nullptr;
  if (task->parent != nullptr) {
    auto* parent = static_cast<Reply*>(task->parent->obj);
    if (task->idx < 0 || static_cast<size_t>(task->idx) >= parent->elements.size()) {
      delete r;
      return nullptr;
    }
    parent->elements[task->idx].reset(r);
  }
  return r;
}

void* create_string(const redisReadTask* task, char* s, size_t len) {
  auto* r = new (std::nothrow) Reply;
  if (r == nullptr) return nullptr;
  r->type = task->type;
  r->str.assign(s, len);
  return attach(task, r);
}

void* create_array(const redisReadTask* task, int elements) {
  if (elements < 0 || static_cast<size_t>(elements) > t_max_elements) return nullptr;
  auto* r = new (std::nothrow) Reply;
  if (r == nullptr) return nullptr;
  r->type = REDIS_REPLY_ARRAY;
  r->elements.resize(static_cast<size_t>(elements));
  return attach(task, r);
}

void* create_integer(const redisReadTask* task, long long v) {
  auto* r = new (std::nothrow) Reply;
  if (r == nullptr) return nullptr;
  r->type = REDIS_REPLY_INTEGER;
  r->integer = v;
  return attach(task, r);
}

void* create_nil(const redisReadTask* task) {
  auto* r = new (std::nothrow) Reply;
  if (r == nullptr) return nullptr;
  r->type = REDIS_REPLY_NIL;
  return attach(task, r);
}

void free_object(void* obj) { delete static_cast<Reply*>(obj); }

redisReplyObjectFunctions kReplyFunctions = {create_string, create_array, create_integer, create_nil, free_object};

int ms_left(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 60000 ? 60000 : static_cast<int>(left);
}

constexpr size_t kSmallReply = 64 * 1024;
constexpr size_t kScanPage = 1000;
constexpr size_t kGetBatch = 256;

class RedisBackend final : public Backend {
 public:
  explicit RedisBackend(DirectoryUrl url) : url_(std::move(url)) {}
  ~RedisBackend() override { disconnect(); }

  Result<std::optional<std::string>> get(const std::string& key, size_t max_value, Deadline deadline) override {
    FERRY_ASSIGN_OR_RETURN(auto r, command({"GET", key}, max_value + kSmallReply, deadline));
    if (r->type == REDIS_REPLY_NIL) return std::optional<std::string>();
    if (r->type != REDIS_REPLY_STRING) return unexpected("GET", *r);
    if (r->str.size() > max_value) r->str.resize(max_value + 1);
    return std::optional<std::string>(std::move(r->str));
  }

  Status list(const std::string& prefix, size_t max_entries, size_t max_value, Deadline deadline,
              const TakeEntry& take) override {
    // SCAN may return a key twice. Keys seen are remembered by their hash,
    // not kept: a writer of long keys costs 8 bytes a key, not its bytes.
    // (One that makes two keys collide could only hide an entry it may
    // delete anyway.)
    std::unordered_set<size_t> seen;
    std::string cursor = "0";
    do {
      FERRY_ASSIGN_OR_RETURN(auto r,
                             command({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", std::to_string(kScanPage)},
                                     kScanPage * 4 * 1024 + kSmallReply, deadline));
      if (r->type != REDIS_REPLY_ARRAY || r->elements.size() != 2 || r->elements[0]->type != REDIS_REPLY_STRING ||
          r->elements[1]->type != REDIS_REPLY_ARRAY) {
        return unexpected("SCAN", *r);
      }
      cursor = r->elements[0]->str;
      std::vector<std::string> fresh;
      for (auto& k : r->elements[1]->elements) {
        if (k->type != REDIS_REPLY_STRING) return unexpected("SCAN", *r);
        if (k->str.compare(0, prefix.size(), prefix) != 0) continue;
        if (!seen.insert(std::hash<std::string>{}(k->str)).second) continue;
        if (seen.size() > max_entries) {
          return Status(Code::kResourceExhausted, where() + ": more than " + std::to_string(max_entries) +
                                                      " entries under " + printable(prefix, 200));
        }
        fresh.push_back(std::move(k->str));
      }
      r.reset();  // the page's keys now live in `fresh` only
      for (size_t at = 0; at < fresh.size(); at += kGetBatch) {
        size_t n = std::min(kGetBatch, fresh.size() - at);
        FERRY_RETURN_IF_ERROR(get_batch(std::span(fresh).subspan(at, n), max_value, deadline, take));
      }
    } while (cursor != "0");
    return Status();
  }

  Status put_with_ttl(const std::string& key, const std::string& value, std::chrono::milliseconds ttl,
                      Deadline deadline) override {
    FERRY_ASSIGN_OR_RETURN(auto r,
                           command({"SET", key, value, "PX", std::to_string(ttl.count())}, kSmallReply, deadline));
    if (r->type != REDIS_REPLY_STATUS) return unexpected("SET", *r);
    return Status();
  }

  Status put(const std::string& key, const std::string& value, Deadline deadline) override {
    FERRY_ASSIGN_OR_RETURN(auto r, command({"SET", key, value}, kSmallReply, deadline));
    if (r->type != REDIS_REPLY_STATUS) return unexpected("SET", *r);
    return Status();
  }

  Result<bool> refresh(const std::string& key, const std::string& value, std::chrono::milliseconds ttl,
                       Deadline deadline) override {
    // GET then PEXPIRE: should a newer incarnation replace the value in
    // between, PEXPIRE only extends the newcomer's key, which it refreshes
    // anyway; nothing of ours survives.
    FERRY_ASSIGN_OR_RETURN(auto cur, get(key, value.size(), deadline));
    if (!cur.has_value() || *cur != value) return false;
    FERRY_ASSIGN_OR_RETURN(auto r, command({"PEXPIRE", key, std::to_string(ttl.count())}, kSmallReply, deadline));
    if (r->type != REDIS_REPLY_INTEGER) return unexpected("PEXPIRE", *r);
    return r->integer == 1;
  }

  Status remove_if(const std::string& key, const std::string& value, Deadline deadline) override {
    // WATCH makes the DEL fail if anyone writes the key after our GET.
    FERRY_ASSIGN_OR_RETURN(auto w, command({"WATCH", key}, kSmallReply, deadline));
    if (w->type != REDIS_REPLY_STATUS) return unexpected("WATCH", *w);
    FERRY_ASSIGN_OR_RETURN(auto cur, get(key, value.size(), deadline));
    if (!cur.has_value() || *cur != value) {
      return command({"UNWATCH"}, kSmallReply, deadline).status();
    }
    for (std::vector<std::string> args : {std::vector<std::string>{"MULTI"}, {"DEL", key}, {"EXEC"}}) {
      FERRY_RETURN_IF_ERROR(command(args, kSmallReply, deadline).status());
    }
    return Status();
  }

 private:
  std::string where() const { return "directory " + url_.redacted; }

  // MGET of `keys`, each value present handed to `take` (a key that expired
  // since the scan is skipped).
  Status get_batch(std::span<const std::string> keys, size_t max_value, Deadline deadline, const TakeEntry& take) {
    std::vector<std::string> args{"MGET"};
    args.insert(args.end(), keys.begin(), keys.end());
    FERRY_ASSIGN_OR_RETURN(auto r, command(args, keys.size() * (max_value + 64) + kSmallReply, deadline));
    if (r->type != REDIS_REPLY_ARRAY || r->elements.size() != keys.size()) return unexpected("MGET", *r);
    for (size_t i = 0; i < keys.size(); ++i) {
      const Reply& v = *r->elements[i];
      if (v.type == REDIS_REPLY_NIL) continue;
      if (v.type != REDIS_REPLY_STRING) return unexpected("MGET", *r);
      FERRY_RETURN_IF_ERROR(take(keys[i], std::string_view(v.str).substr(0, max_value + 1)));
    }
    return Status();
  }

  Status unexpected(const char* cmd, const Reply& r) {
    disconnect();
    return Status(Code::kDataLoss, where() + ": unexpected reply to " + cmd + " (type " + std::to_string(r.type) + ")");
  }

  void disconnect() {
    if (reader_ != nullptr) {
      redisReaderFree(reader_);
      reader_ = nullptr;
    }
    sock_.reset();
  }

  Status fail(Code code, const std::string& why) {
    disconnect();
    return Status(code, where() + ": " + why);
  }

  Status connect(Deadline deadline) {
    if (sock_.valid()) return Status();
    auto s = platform::connect_tcp(url_.endpoints[0], deadline);
    if (!s.ok()) return fail(Code::kUnavailable, "cannot connect: " + s.status().message());
    sock_ = std::move(s).value();
    int flags = ::fcntl(sock_.fd(), F_GETFL);
    if (flags < 0 || ::fcntl(sock_.fd(), F_SETFL, flags | O_NONBLOCK) != 0) {
      return fail(Code::kUnavailable, platform::errno_message("fcntl"));
    }
    reader_ = redisReaderCreateWithFunctions(&kReplyFunctions);
    if (reader_ == nullptr) return fail(Code::kResourceExhausted, "cannot create a reply reader");
    if (!url_.password.empty()) {
      std::vector<std::string> args{"AUTH"};
      if (!url_.user.empty()) args.push_back(url_.user);
      args.push_back(url_.password);
      auto r = raw_command(args, kSmallReply, deadline);
      if (!r.ok()) return r.status();
      if (r.value()->type != REDIS_REPLY_STATUS) return unexpected("AUTH", *r.value());
    }
    return Status();
  }

  Result<std::unique_ptr<Reply>> command(const std::vector<std::string>& args, size_t max_reply, Deadline deadline) {
    bool reused = sock_.valid();
    FERRY_RETURN_IF_ERROR(connect(deadline));
    auto r = raw_command(args, max_reply, deadline);
    // A kept connection the server closed meanwhile (it restarted, or timed
    // idle clients out) fails before any byte of the reply: dial again once.
    if (!r.ok() && reused && closed_before_reply_) {
      FERRY_RETURN_IF_ERROR(connect(deadline));
      r = raw_command(args, max_reply, deadline);
    }
    return r;
  }

  Result<std::unique_ptr<Reply>> raw_command(const std::vector<std::string>& args, size_t max_reply,
                                             Deadline deadline) {
    std::vector<const char*> argv;
    std::vector<size_t> argl;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      argl.push_back(a.size());
    }
    char* out = nullptr;
    int n = redisFormatCommandArgv(&out, static_cast<int>(argv.size()), argv.data(), argl.data());
    if (n < 0 || out == nullptr) return fail(Code::kResourceExhausted, "cannot format a command");
    closed_before_reply_ = false;
    std::string request(out, static_cast<size_t>(n));
    std::free(out);
    size_t sent = 0;
    while (sent < request.size()) {
      ssize_t k = ::send(sock_.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (k > 0) {
        sent += static_cast<size_t>(k);
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        FERRY_RETURN_IF_ERROR(wait_fd(POLLOUT, deadline, args[0]));
        continue;
      }
      closed_before_reply_ = errno == EPIPE || errno == ECONNRESET;
      return fail(Code::kUnavailable, platform::errno_message("send"));
    }
    t_max_elements = max_reply / 4 + 1;  // every element takes at least 4 bytes
    size_t received = 0;
    for (;;) {
      void* obj = nullptr;
      if (redisReaderGetReply(reader_, &obj) != REDIS_OK) {
        std::string why = reader_->errstr;
        return fail(Code::kDataLoss, "malformed or oversized reply to " + args[0] + ": " + why);
      }
      if (obj != nullptr) {
        std::unique_ptr<Reply> r(static_cast<Reply*>(obj));
        if (r->type == REDIS_REPLY_ERROR) {
          Code code = r->str.rfind("NOAUTH", 0) == 0 || r->str.rfind("WRONGPASS", 0) == 0 ? Code::kUnauthenticated
                      : r->str.rfind("WRONGTYPE", 0) == 0                                 ? Code::kDataLoss
                                                                                          : Code::kUnavailable;
          return Status(code, where() + ": " + args[0] + ": " + printable(r->str, 200));
        }
        return r;
      }
      char buf[16384];
      ssize_t k = ::recv(sock_.fd(), buf, sizeof(buf), 0);
      if (k > 0) {
        received += static_cast<size_t>(k);
        if (received > max_reply) {
          return fail(Code::kDataLoss,
                      "reply to " + args[0] + " is larger than " + std::to_string(max_reply) + " bytes; refused");
        }
        if (redisReaderFeed(reader_, buf, static_cast<size_t>(k)) != REDIS_OK) {
          return fail(Code::kResourceExhausted, "cannot buffer the reply");
        }
        continue;
      }
      if (k == 0 || errno == ECONNRESET) {
        closed_before_reply_ = received == 0;
        return fail(Code::kUnavailable, "the server closed the connection");
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        FERRY_RETURN_IF_ERROR(wait_fd(POLLIN, deadline, args[0]));
        continue;
      }
      return fail(Code::kUnavailable, platform::errno_message("recv"));
    }
  }

  Status wait_fd(short events, Deadline deadline, const std::string& cmd) {
    for (;;) {
      int left = ms_left(deadline);
      if (left == 0) return fail(Code::kUnavailable, "no answer to " + cmd + " by the deadline");
      pollfd p{sock_.fd(), events, 0};
      int rc = ::poll(&p, 1, left);
      if (rc > 0) return Status();
      if (rc < 0 && errno != EINTR) return fail(Code::kUnavailable, platform::errno_message("poll"));
    }
  }

  DirectoryUrl url_;
  platform::Socket sock_;
  redisReader* reader_ = nullptr;
  bool closed_before_reply_ = false;  // the last command found the connection closed
};

}  // namespace

std::unique_ptr<Backend> make_redis_backend(const DirectoryUrl& url) { return std::make_unique<RedisBackend>(url); }

}  // namespace ferry::directory

#else  // built without hiredis

namespace ferry::directory {
std::unique_ptr<Backend> make_redis_backend(const DirectoryUrl&) {
  return make_missing_backend("Redis", "hiredis (libhiredis-dev)");
}
}  // namespace ferry::directory

#endif
