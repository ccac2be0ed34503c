#include "directory/publisher.h"

#include <algorithm>
#include <cinttypes>
#include <map>

#include "platform/log.h"
#include "directory/entry.h"
#include "platform/thread.h"

namespace ferry::directory {
namespace {

constexpr auto kMaxBackoff = std::chrono::seconds(2);
constexpr auto kFirstBackoff = std::chrono::milliseconds(100);

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

uint64_t now_us() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

}  // namespace

Publisher::Publisher(const DirectoryUrl& url, DirectoryEntry self, std::chrono::milliseconds ttl, Verifier verify)
    : url_(url),
      key_(entry_key(url.ns, self.name)),
      self_(std::move(self)),
      ttl_(ttl),
      backend_(make_backend(url)),
      verify_(std::move(verify)) {}

Result<std::unique_ptr<Publisher>> Publisher::start(const DirectoryUrl& url, DirectoryEntry self,
                                                    std::chrono::milliseconds ttl, Deadline first_try,
                                                    Verifier verify) {
  std::unique_ptr<Publisher> p(new Publisher(url, std::move(self), ttl, std::move(verify)));
  // Each start of an engine has an incarnation above every earlier one: its
  // start time in microseconds, or one more than the entry it replaces.
  p->self_.incarnation = now_us();
  p->value_ = encode_entry(p->self_);
  Status s = p->publish_now(first_try);
  if (!s.ok()) {
    p->failing_ = true;
    p->backoff_ = kFirstBackoff;
    FERRY_ENGINE_LOG(kWarn, "directory", p->self_.engine_id,
                     "cannot publish \"%s\" in %s yet: %s; retrying in the background with backoff (connections are "
                     "unaffected)",
                     p->self_.name.c_str(), url.redacted.c_str(), s.to_string().c_str());
  }
  Publisher* raw = p.get();
  auto t = platform::try_start_thread("ferry-directory", [raw] { raw->loop(); });
  if (!t.ok()) {
    if (p->published_) (void)p->backend_->remove_if(p->key_, p->value_, after(std::chrono::seconds(1)));
    p->published_ = false;
    return t.status().with_context("directory: the keep-alive thread");
  }
  p->thread_ = std::move(t).value();
  return p;
}

Publisher::~Publisher() {
  {
    platform::MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (published_ && !displaced_) {
    Status s = backend_->remove_if(key_, value_, after(std::chrono::milliseconds(500)));
    if (!s.ok()) {
      FERRY_ENGINE_LOG(kInfo, "directory", self_.engine_id,
                       "could not delete \"%s\" on shutdown (%s); it expires within %lld ms", self_.name.c_str(),
                       s.to_string().c_str(), static_cast<long long>(ttl_.count()));
    }
  }
}

void Publisher::watch_peer(const DirectoryEntry& peer, WatchedConnection conn) {
  {
    platform::MutexLock lock(mu_);
    watched_.push_back(Watched{peer, std::move(conn)});
  }
  cv_.notify_all();
}

bool Publisher::genuine(const DirectoryEntry& e, Deadline deadline) {
  const auto key = std::make_pair(e.engine_id, e.incarnation);
  if (auto it = verdicts_.find(key); it != verdicts_.end()) return it->second;
  Status s = verify_ ? verify_(e, deadline) : Status();
  if (!s.ok()) {
    FERRY_ENGINE_LOG(kWarn, "directory", self_.engine_id,
                     "\"%s\" in %s names engine %s incarnation %" PRIu64
                     ", which did not answer as that engine at its addresses (%s): the entry is not believed",
                     e.name.c_str(), url_.redacted.c_str(), hex(e.engine_id).c_str(), e.incarnation,
                     s.to_string().c_str());
  }
  // Unreachable is not remembered: a real newcomer may not be listening yet.
  if (s.ok() || s.code() != Code::kUnavailable) {
    if (verdicts_.size() >= kMaxVerdicts) verdicts_.erase(verdicts_.begin());
    verdicts_[key] = s.ok();
  }
  return s.ok();
}

Status Publisher::publish_now(Deadline deadline) {
  FERRY_ASSIGN_OR_RETURN(auto cur, backend_->get(key_, Directory::kMaxEntryBytes, deadline));
  if (cur.has_value() && *cur != value_) {
    auto e = decode_entry(key_, *cur, self_.name);
    if (e.ok() && e->engine_id != self_.engine_id) {
      if (ever_published_ && e->incarnation > self_.incarnation && genuine(*e, deadline)) {
        // A newer start took the name; fighting it would send peers back and
        // forth. The newcomer wins.
        displaced_ = true;
        FERRY_ENGINE_LOG(kError, "directory", self_.engine_id,
                         "\"%s\" in %s now names engine %s incarnation %" PRIu64
                         " (a newer start under the same name); engine %s incarnation %" PRIu64 " stops publishing it",
                         self_.name.c_str(), url_.redacted.c_str(), hex(e->engine_id).c_str(), e->incarnation,
                         hex(self_.engine_id).c_str(), self_.incarnation);
        return Status();
      }
      if (!ever_published_ && e->incarnation >= self_.incarnation) {
        platform::MutexLock lock(mu_);
        self_.incarnation = e->incarnation + 1;
        value_ = encode_entry(self_);
      }
    }
  }
  FERRY_RETURN_IF_ERROR(backend_->put_with_ttl(key_, value_, ttl_, deadline));
  if (ever_published_ && !published_) {
    FERRY_ENGINE_LOG(kInfo, "directory", self_.engine_id, "\"%s\" was gone from %s; published again",
                     self_.name.c_str(), url_.redacted.c_str());
  }
  published_ = true;
  ever_published_ = true;
  return Status();
}

Clock::duration Publisher::publish_step() {
  auto period = std::max<Clock::duration>(ttl_ / 3, std::chrono::milliseconds(50));
  // Bounded so that a directory that hangs delays shutdown by at most this.
  Deadline deadline =
      Clock::now() + std::clamp<Clock::duration>(period, std::chrono::milliseconds(100), std::chrono::seconds(1));
  Status s;
  if (!published_) {
    s = publish_now(deadline);
  } else {
    auto r = backend_->refresh(key_, value_, ttl_, deadline);
    if (!r.ok()) {
      s = r.status();
    } else if (!r.value()) {
      published_ = false;
      s = publish_now(deadline);
    }
  }
  if (s.ok()) {
    if (failing_) {
      FERRY_ENGINE_LOG(kWarn, "directory", self_.engine_id, "%s answers again; \"%s\" is published",
                       url_.redacted.c_str(), self_.name.c_str());
      failing_ = false;
    }
    backoff_ = Clock::duration::zero();
    return period;
  }
  if (!failing_) {
    FERRY_ENGINE_LOG(kWarn, "directory", self_.engine_id,
                     "cannot refresh \"%s\" in %s: %s; retrying with backoff (connections are unaffected; the entry "
                     "expires within %lld ms)",
                     self_.name.c_str(), url_.redacted.c_str(), s.to_string().c_str(),
                     static_cast<long long>(ttl_.count()));
    failing_ = true;
  }
  backoff_ = backoff_ == Clock::duration::zero() ? Clock::duration(kFirstBackoff)
                                                 : std::min<Clock::duration>(backoff_ * 2, kMaxBackoff);
  return std::min(backoff_, period);
}

void Publisher::check_peers() {
  std::vector<Watched> watched;
  {
    platform::MutexLock lock(mu_);
    std::erase_if(watched_, [](const Watched& w) { return !w.conn.up(); });
    watched = watched_;
  }
  if (watched.empty()) return;
  std::map<std::string, std::optional<DirectoryEntry>> now;  // name -> its entry (nullopt: unknown)
  Deadline deadline = after(std::chrono::milliseconds(500));
  for (const Watched& w : watched) {
    if (now.count(w.peer.name) > 0) continue;
    std::string key = entry_key(url_.ns, w.peer.name);
    auto r = backend_->get(key, Directory::kMaxEntryBytes, deadline);
    std::optional<DirectoryEntry> e;
    if (r.ok() && r->has_value()) {
      auto d = decode_entry(key, **r, w.peer.name);
      if (d.ok()) e = std::move(d).value();
    }
    now[w.peer.name] = std::move(e);  // a directory that is down tells nothing
  }
  for (const Watched& w : watched) {
    const auto& e = now[w.peer.name];
    if (!e.has_value() || e->engine_id == w.peer.engine_id || e->incarnation <= w.peer.incarnation) continue;
    if (!w.conn.up()) continue;
    // Only once the newer engine proved itself: a forged entry must not end
    // a live, authenticated connection.
    if (!genuine(*e, after(std::chrono::seconds(1)))) continue;
    w.conn.fail(Status(Code::kPeerLost, "directory " + url_.redacted + ": \"" + w.peer.name +
                                           "\" restarted: it now names engine " + hex(e->engine_id) + " incarnation " +
                                           std::to_string(e->incarnation) + "; this connection was to engine " +
                                           hex(w.peer.engine_id) + " incarnation " +
                                           std::to_string(w.peer.incarnation) + ", which is gone"));
    FERRY_ENGINE_LOG(kWarn, "directory", self_.engine_id,
                     "connection %" PRIu64 " to \"%s\" failed: the name moved to incarnation %" PRIu64, w.conn.id,
                     w.peer.name.c_str(), e->incarnation);
  }
}

void Publisher::loop() {
  auto check_period =
      std::clamp<Clock::duration>(ttl_ / 3, std::chrono::milliseconds(50), std::chrono::milliseconds(500));
  auto now = Clock::now();
  Clock::time_point next_publish =
      now +
      (published_ ? std::max<Clock::duration>(ttl_ / 3, std::chrono::milliseconds(50)) : Clock::duration(backoff_));
  Clock::time_point next_check = now + check_period;
  platform::UniqueLock lock(mu_);
  while (!stopping_) {
    Clock::time_point wake = displaced_ ? Clock::time_point::max() : next_publish;
    if (!watched_.empty()) wake = std::min(wake, next_check);
    if (wake == Clock::time_point::max()) {
      cv_.wait(lock.native());
    } else {
      cv_.wait_until(lock.native(), wake);
    }
    if (stopping_) break;
    lock.unlock();
    now = Clock::now();
    if (!displaced_ && now >= next_publish) next_publish = Clock::now() + publish_step();
    if (now >= next_check) {
      check_peers();
      next_check = Clock::now() + check_period;
    }
    lock.lock();
  }
}

DirectoryEntry Publisher::self() const {
  platform::MutexLock lock(mu_);
  return self_;
}

}  // namespace ferry::directory
