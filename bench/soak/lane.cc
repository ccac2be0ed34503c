// A lane's two ends (see lane.h): the header exchange, then operation after
// operation of the shared plan, every received byte checked against its seed.
#include "soak/lane.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "soak/pattern.h"

namespace ferry::soak {

using namespace std::chrono_literals;

std::string to_hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) {
    s += kDigits[c >> 4];
    s += kDigits[c & 15];
  }
  return s;
}

bool from_hex(const std::string& hex, std::string* out) {
  if (hex.size() % 2 != 0 || hex.size() > 1024) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      char c = hex[i + k];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    out->push_back(static_cast<char>(v));
  }
  return true;
}

Clock::duration op_budget(uint64_t bytes) { return 20s + std::chrono::milliseconds(bytes / (4u << 10)); }

void Roster::add(LaneRegions* r) {
  platform::MutexLock lock(mu_);
  lanes_.push_back(r);
}

void Roster::remove(LaneRegions* r) {
  platform::MutexLock lock(mu_);
  lanes_.erase(std::remove(lanes_.begin(), lanes_.end(), r), lanes_.end());
}

std::string Roster::strike(Engine& engine, Watchdog& watchdog, std::mt19937_64& rng, std::chrono::milliseconds pause) {
  platform::MutexLock lock(mu_);
  std::vector<std::pair<LaneRegions*, bool>> candidates;  // (lane, inbox?)
  for (LaneRegions* r : lanes_) {
    if (r->local_in_use && r->local_live) candidates.push_back({r, false});
    if (r->inbox_in_use && r->inbox_live) candidates.push_back({r, true});
  }
  if (candidates.empty()) return "";
  auto [r, inbox] = candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng)];
  if (pause.count() > 0) std::this_thread::sleep_for(pause);
  platform::MutexLock lane_lock(r->mu);
  bool& live = inbox ? r->inbox_live : r->local_live;
  // The operation seen busy may have ended since: the lane may be filling
  // its memory for the next one, where a canary would be overwritten.
  if (!live || !(inbox ? r->inbox_in_use : r->local_in_use)) return "";
  r->struck = true;
  Armed armed(watchdog, "dereg of a region in use", after(10s));
  Status s = engine.dereg(inbox ? r->inbox : r->local);
  live = false;
  std::string canary;
  if (s.ok() && (inbox || r->local_receives_only)) {
    SoakMemory* m = inbox ? r->inbox_mem : r->local_mem;
    if (m->fill(0, m->size(), LaneRegions::kCanarySeed, 0).ok()) {
      (inbox ? r->inbox_canary : r->local_canary) = true;
      canary = "; canary laid";
    }
  }
  return std::string("deregistered the ") + (inbox ? "inbox" : "local buffer") + " of a lane during " + r->op + ": " +
         s.to_string() + canary;
}

namespace {

class LaneRun {
 public:
  LaneRun(const EndContext& ctx, Connection& conn, LaneMemory mem) : ctx_(ctx), conn_(conn), mem_(mem) {}

  ~LaneRun() {
    ctx_.roster->remove(&regions_);
    // Closing first: once close() returns no transfer of this lane runs, so
    // its memory can be deregistered and given to the next lane.
    close();
    platform::MutexLock lock(regions_.mu);
    check_canary(regions_.local_canary, *mem_.local, "local buffer");
    check_canary(regions_.inbox_canary, *mem_.inbox, "inbox");
    Armed armed(*ctx_.watchdog, "dereg of a lane's memory", after(10s));
    if (regions_.local_live) (void)ctx_.engine->dereg(regions_.local);
    if (regions_.inbox_live) (void)ctx_.engine->dereg(regions_.inbox);
    regions_.local_live = regions_.inbox_live = false;
  }

  void check_canary(bool laid, SoakMemory& m, const char* which) REQUIRES(regions_.mu) {
    if (!laid) return;
    auto bad = m.check(0, m.size(), LaneRegions::kCanarySeed, 0);
    ctx_.counters->add("canary_checked");
    if (bad.ok() && bad.value() != kNoMismatch) {
      ctx_.counters->add("violation");
      emit("VIOLATION " + tag_ + ": byte " + std::to_string(bad.value()) + " of the " + which +
           " changed after dereg() of it returned (during " + regions_.op + ")");
    }
  }

  void close() {
    Armed a(*ctx_.watchdog, "close() of a lane", after(10s));
    conn_.close();
  }

  Status register_memory() {
    auto l = ctx_.engine->reg(mem_.local->data(), mem_.local->size());
    if (!l.ok()) return l.status().with_context("reg local");
    auto in = ctx_.engine->reg(mem_.inbox->data(), mem_.inbox->size());
    if (!in.ok()) {
      (void)ctx_.engine->dereg(l.value());
      return in.status().with_context("reg inbox");
    }
    {
      platform::MutexLock lock(regions_.mu);
      regions_.local = l.value();
      regions_.inbox = in.value();
      regions_.local_live = regions_.inbox_live = true;
      regions_.local_mem = mem_.local;
      regions_.inbox_mem = mem_.inbox;
    }
    auto d = ctx_.engine->export_region(in.value());
    if (!d.ok()) return d.status().with_context("export inbox");
    inbox_desc_ = d.value();
    ctx_.roster->add(&regions_);
    return Status();
  }

  std::string my_header_fields() const {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "max=%" PRIu64 " rseed=%" PRIx64, max_, ctx_.source_seed);
    return std::string(buf) + " rdesc=" + to_hex(ctx_.source_desc.serialize()) +
           " idesc=" + to_hex(inbox_desc_.serialize());
  }

  // Parses "k=v" fields of the other end's header (hostile input).
  Status take_header(const std::string& h, bool want_seed) {
    std::map<std::string, std::string> f;
    std::istringstream in(h);
    std::string tok;
    while (in >> tok) {
      auto eq = tok.find('=');
      if (eq != std::string::npos) f[tok.substr(0, eq)] = tok.substr(eq + 1);
    }
    auto num = [&](const char* k, int base, uint64_t* out) {
      auto it = f.find(k);
      if (it == f.end() || it->second.empty() || it->second.size() > 20) return false;
      char* end = nullptr;
      *out = std::strtoull(it->second.c_str(), &end, base);
      return *end == '\0';
    };
    auto desc = [&](const char* k, RemoteDescriptor* out) {
      std::string bytes;
      auto it = f.find(k);
      if (it == f.end() || !from_hex(it->second, &bytes)) return false;
      auto d = RemoteDescriptor::parse(bytes);
      if (!d.ok()) return false;
      *out = d.value();
      return true;
    };
    uint64_t other_max = 0;
    if (want_seed && f.count("ops") && !num("ops", 10, &ops_)) {
      return Status(Code::kInvalidArgument, "lane header: bad ops");
    }
    if ((want_seed && !num("seed", 16, &seed_)) || !num("max", 10, &other_max) ||
        !num("rseed", 16, &peer_source_seed_) || !desc("rdesc", &peer_source_) || !desc("idesc", &peer_inbox_)) {
      return Status(Code::kInvalidArgument, "malformed lane header: " + h.substr(0, 200));
    }
    if (other_max < 16 || other_max > (1ull << 30)) return Status(Code::kInvalidArgument, "lane header: bad max");
    max_ = std::min(max_, other_max);
    if (peer_source_.length < buffer_bytes(max_) || peer_inbox_.length < buffer_bytes(max_)) {
      return Status(Code::kInvalidArgument, "lane header: exports smaller than the operations");
    }
    char tag[48];
    std::snprintf(tag, sizeof(tag), "lane %016" PRIx64, seed_);
    tag_ = tag;
    return Status();
  }

  Status send_text(const std::string& t, Deadline d) {
    if (t.size() > mem_.ctl_size) return Status(Code::kInvalidArgument, "text longer than the control buffer");
    std::memcpy(mem_.ctl, t.data(), t.size());
    return wait(conn_.send_async(mem_.ctl, t.size()), d, "send of a lane header or ack");
  }

  Result<std::string> recv_text(Deadline d) {
    Transfer t = conn_.recv_async(mem_.ctl, mem_.ctl_size);
    Status s = wait(t, d, "recv of a lane header or ack");
    if (!s.ok()) return s;
    return std::string(reinterpret_cast<const char*>(mem_.ctl), t.bytes());
  }

  // Waits for `t` by `d`, under the watchdog.
  Status wait(const Transfer& t, Deadline d, const std::string& what) {
    Armed a(*ctx_.watchdog, tag_ + " " + what, d);
    Status s = t.wait(d);
    if (s.code() == Code::kDeadlineExceeded) t.cancel();
    return s;
  }

  uint64_t run(uint64_t max_ops) {
    uint64_t done = 0;
    for (uint64_t i = 0; max_ops == 0 || i < max_ops; ++i) {
      if (ctx_.stopping->load()) break;
      OpPlan p = make_plan(seed_, i, max_);
      bool me_init = p.survivor_initiates == ctx_.is_survivor;
      bool one_sided_target =
          !me_init && (p.kind == OpKind::kWrite || p.kind == OpKind::kWriteNotify || p.kind == OpKind::kWritev);
      bool read_target = !me_init && (p.kind == OpKind::kRead || p.kind == OpKind::kReadv);
      bool receives_only =
          (!me_init && (p.kind == OpKind::kSend || p.kind == OpKind::kSendv || p.kind == OpKind::kSmallRecv)) ||
          (me_init && (p.kind == OpKind::kRead || p.kind == OpKind::kReadv));
      {
        // One step with the strike's check: a region deregistered between two
        // operations (after the last one's check of `struck`) is seen here,
        // before this operation fills or reads it.
        platform::MutexLock lock(regions_.mu);
        if (regions_.struck) break;
        regions_.op = describe(p);
        regions_.local_receives_only = receives_only;
        regions_.local_in_use = !one_sided_target && !read_target;
        regions_.inbox_in_use = one_sided_target;
      }
      ctx_.counters->add("ops");
      ctx_.counters->add("op." + std::string(op_kind_name(p.kind)));
      Status s = run_op(p, me_init);
      {
        platform::MutexLock lock(regions_.mu);
        regions_.local_in_use = regions_.inbox_in_use = false;
      }
      if (!s.ok()) {
        // Once the run is ending, the other end may leave between two
        // operations: those failures are not the engine's.
        ctx_.counters->add((ctx_.ending->load() ? "fail_at_end." : "fail.") + std::string(code_name(s.code())));
        if (regions_.struck) ctx_.counters->add("fail_after_dereg");
        break;
      }
      ctx_.counters->add("ops_ok");
      ++done;
      if (regions_.struck) break;  // the lane's memory is gone: start afresh
    }
    return done;
  }

  uint64_t seed_ = 0;
  uint64_t max_ = 0;
  uint64_t ops_ = 0;  // operations the lane runs (0: until it fails or the run stops)
  std::string tag_ = "lane";

 private:
  Status run_op(const OpPlan& p, bool me_init) {
    const Deadline d = after(op_budget(p.main.bytes + p.back.bytes));
    maybe_hang(p);
    switch (p.kind) {
      case OpKind::kSend:
      case OpKind::kSendv:
      case OpKind::kSmallRecv: {
        Status s = me_init ? send(p, p.main, p.vector, d) : recv(p, p.main, p.vector, d);
        if (p.kind != OpKind::kSmallRecv) return s;
        if (s.code() == Code::kBufferTooSmall) return Status();
        if (s.ok()) {
          violation(p, std::string(me_init ? "the send" : "the receive") +
                           " of a message larger than the receive buffer succeeded (expected buffer_too_small)");
          return Status(Code::kInternal, "contract violation");
        }
        return s;
      }
      case OpKind::kExchange: {
        const Movement& out = me_init ? p.main : p.back;
        const Movement& in = me_init ? p.back : p.main;
        FERRY_RETURN_IF_ERROR(fill(*mem_.local, out.from, out.seed));
        std::vector<MutableBuffer> rb;
        for (const auto& pc : in.to) rb.push_back({mem_.local->data() + pc.offset, pc.size});
        std::vector<ConstBuffer> sb;
        for (const auto& pc : out.from) sb.push_back({mem_.local->data() + pc.offset, pc.size});
        Transfer r = conn_.recvv_async(rb);
        Transfer t = conn_.sendv_async(sb);
        Status rs = wait(r, d, describe(p) + " (its receive)");
        Status ts = wait(t, d, describe(p) + " (its send)");
        FERRY_RETURN_IF_ERROR(rs);
        FERRY_RETURN_IF_ERROR(ts);
        return check_message(p, in, r.bytes());
      }
      case OpKind::kWrite:
      case OpKind::kWriteNotify:
      case OpKind::kWritev:
        return me_init ? write(p, d) : write_target(p, d);
      case OpKind::kRead:
      case OpKind::kReadv:
        return me_init ? read(p, d) : Status();
    }
    return Status(Code::kInternal, "unknown operation");
  }

  Status fill(SoakMemory& m, const std::vector<Piece>& pieces, uint64_t seed) {
    for (const auto& pc : pieces) FERRY_RETURN_IF_ERROR(m.fill(pc.offset, pc.size, seed, pc.stream_offset));
    return Status();
  }

  // One operation in three of the single-buffer forms goes through the
  // blocking wrappers (send, recv, write, read, notify) instead of a
  // Transfer handle: both forms are API, both must keep their deadlines.
  static bool blocking(const OpPlan& p) { return p.index % 3 == 0; }

  Status send(const OpPlan& p, const Movement& m, bool vector, Deadline d) {
    FERRY_RETURN_IF_ERROR(fill(*mem_.local, m.from, m.seed));
    Transfer t;
    if (!vector && m.from.size() == 1) {
      if (blocking(p)) {
        Armed a(*ctx_.watchdog, tag_ + " blocking send of " + std::to_string(m.bytes) + " B", d);
        return conn_.send(mem_.local->data() + m.from[0].offset, m.from[0].size, d);
      }
      t = conn_.send_async(mem_.local->data() + m.from[0].offset, m.from[0].size);
    } else {
      std::vector<ConstBuffer> b;
      for (const auto& pc : m.from) b.push_back({mem_.local->data() + pc.offset, pc.size});
      t = conn_.sendv_async(b);
    }
    return wait(t, d, "send of " + std::to_string(m.bytes) + " B");
  }

  Status recv(const OpPlan& p, const Movement& m, bool vector, Deadline d) {
    Transfer t;
    if (!vector && m.to.size() == 1 && blocking(p)) {
      Result<size_t> n = Status();
      {
        Armed a(*ctx_.watchdog, tag_ + " blocking recv for " + describe(p), d);
        n = conn_.recv(mem_.local->data() + m.to[0].offset, m.to[0].size, d);
      }
      if (!n.ok()) return n.status();
      if (p.kind == OpKind::kSmallRecv) return Status();
      return check_message(p, m, n.value());
    }
    if (!vector && m.to.size() == 1) {
      t = conn_.recv_async(mem_.local->data() + m.to[0].offset, m.to[0].size);
    } else {
      std::vector<MutableBuffer> b;
      for (const auto& pc : m.to) b.push_back({mem_.local->data() + pc.offset, pc.size});
      t = conn_.recvv_async(b);
    }
    FERRY_RETURN_IF_ERROR(wait(t, d, describe(p)));
    if (p.kind == OpKind::kSmallRecv) return Status();
    return check_message(p, m, t.bytes());
  }

  // The message's bytes, scattered over m.to in order.
  Status check_message(const OpPlan& p, const Movement& m, size_t got) {
    if (got != m.bytes) {
      corrupt(p, "a message of " + std::to_string(m.bytes) + " B arrived as " + std::to_string(got) + " B");
      return Status();
    }
    for (const auto& pc : m.to) {
      if (pc.stream_offset >= m.bytes) break;
      uint64_t n = std::min(pc.size, m.bytes - pc.stream_offset);
      FERRY_RETURN_IF_ERROR(check(p, *mem_.local, pc.offset, n, m.seed, pc.stream_offset));
    }
    ctx_.counters->add("bytes", m.bytes);
    return Status();
  }

  Status check(const OpPlan& p, SoakMemory& mem, uint64_t offset, uint64_t n, uint64_t seed, uint64_t start) {
    // Held while checking, so that the dereg fault cannot lay its canary
    // under the check. A region deregistered under this operation holds the
    // canary now, not the operation's bytes; it is checked when the lane ends.
    platform::MutexLock lock(regions_.mu);
    if ((&mem == mem_.local && regions_.local_canary) || (&mem == mem_.inbox && regions_.inbox_canary)) {
      ctx_.counters->add("unchecked_after_dereg");
      return Status();
    }
    if (n > 0 && ctx_.debug->corrupt_one.exchange(false)) {
      FERRY_RETURN_IF_ERROR(mem.flip(offset + n / 2));
      emit("DEBUG corrupt-one: flipped a byte before checking " + describe(p));
    }
    auto bad = mem.check(offset, n, seed, start);
    if (!bad.ok()) return bad.status().with_context("checking received bytes");
    if (bad.value() != kNoMismatch) {
      corrupt(p, "byte " + std::to_string(bad.value()) + " of a " + std::to_string(n) + " B piece at offset " +
                     std::to_string(offset) + " differs from its pattern");
    }
    return Status();
  }

  std::string note_for(const OpPlan& p) const { return "soak " + tag_ + " op " + std::to_string(p.index); }

  Status write(const OpPlan& p, Deadline d) {
    const Movement& m = p.main;
    FERRY_RETURN_IF_ERROR(fill(*mem_.local, m.from, m.seed));
    std::string note = note_for(p);
    Transfer t;
    std::string_view with_note = p.kind == OpKind::kWrite ? std::string_view(note) : std::string_view();
    if (!p.vector && blocking(p)) {
      Armed a(*ctx_.watchdog, tag_ + " blocking " + describe(p), d);
      FERRY_RETURN_IF_ERROR(conn_.write(mem_.local->data() + m.from[0].offset, m.from[0].size, peer_inbox_,
                                        m.to[0].offset, with_note, d));
    } else if (!p.vector) {
      t = conn_.write_async(mem_.local->data() + m.from[0].offset, m.from[0].size, peer_inbox_, m.to[0].offset,
                            with_note);
    } else {
      std::vector<WriteItem> items;
      for (size_t i = 0; i < m.from.size(); ++i) {
        items.push_back({mem_.local->data() + m.from[i].offset, m.from[i].size, peer_inbox_, m.to[i].offset});
      }
      t = conn_.writev_async(items, note);
    }
    if (t.state() != nullptr) FERRY_RETURN_IF_ERROR(wait(t, d, describe(p)));
    if (p.kind == OpKind::kWriteNotify && blocking(p)) {
      Armed a(*ctx_.watchdog, tag_ + " blocking notify", d);
      FERRY_RETURN_IF_ERROR(conn_.notify(note, d));
    } else if (p.kind == OpKind::kWriteNotify) {
      FERRY_RETURN_IF_ERROR(wait(conn_.notify_async(note), d, "notify"));
    }
    // The target checks its inbox, then says so: only then may the next
    // write land there.
    auto ack = recv_text(d);
    if (!ack.ok()) return ack.status();
    if (ack.value() != "ack " + std::to_string(p.index)) {
      violation(p, "expected the target's ack, got \"" + ack.value().substr(0, 80) + "\"");
      return Status(Code::kInternal, "lane out of step");
    }
    return Status();
  }

  Status write_target(const OpPlan& p, Deadline d) {
    Result<std::string> note = Status();
    {
      Armed a(*ctx_.watchdog, tag_ + " wait_notification for " + describe(p), d);
      note = conn_.wait_notification(d);
    }
    if (!note.ok()) return note.status();
    if (note.value() != note_for(p)) {
      corrupt(p, "notification \"" + note.value().substr(0, 80) + "\", expected \"" + note_for(p) + "\"");
    }
    const Movement& m = p.main;
    for (const auto& pc : m.to)
      FERRY_RETURN_IF_ERROR(check(p, *mem_.inbox, pc.offset, pc.size, m.seed, pc.stream_offset));
    ctx_.counters->add("bytes", m.bytes);
    return send_text("ack " + std::to_string(p.index), d);
  }

  Status read(const OpPlan& p, Deadline d) {
    const Movement& m = p.main;
    Transfer t;
    if (!p.vector && blocking(p)) {
      Armed a(*ctx_.watchdog, tag_ + " blocking " + describe(p), d);
      FERRY_RETURN_IF_ERROR(
          conn_.read(mem_.local->data() + m.from[0].offset, m.from[0].size, peer_source_, m.to[0].offset, d));
    } else if (!p.vector) {
      t = conn_.read_async(mem_.local->data() + m.from[0].offset, m.from[0].size, peer_source_, m.to[0].offset);
    } else {
      std::vector<ReadItem> items;
      for (size_t i = 0; i < m.from.size(); ++i) {
        items.push_back({mem_.local->data() + m.from[i].offset, m.from[i].size, peer_source_, m.to[i].offset});
      }
      t = conn_.readv_async(items);
    }
    if (t.state() != nullptr) FERRY_RETURN_IF_ERROR(wait(t, d, describe(p)));
    for (size_t i = 0; i < m.from.size(); ++i) {
      FERRY_RETURN_IF_ERROR(check(p, *mem_.local, m.from[i].offset, m.from[i].size, peer_source_seed_, m.to[i].offset));
    }
    ctx_.counters->add("bytes", m.bytes);
    return Status();
  }

  void maybe_hang(const OpPlan& p) {
    if (p.index < 3 || !ctx_.debug->hang_one.exchange(false)) return;
    emit("DEBUG hang-one: a call sleeps past its deadline and the watchdog's margin");
    Deadline d = after(1s);
    Armed a(*ctx_.watchdog, tag_ + " debug hang before " + describe(p), d);
    std::this_thread::sleep_until(d + ctx_.watchdog->margin() + 2s);
  }

  void corrupt(const OpPlan& p, const std::string& what) {
    ctx_.counters->add("corrupt");
    emit("CORRUPT " + tag_ + " " + describe(p) + ": " + what);
  }

  void violation(const OpPlan& p, const std::string& what) {
    ctx_.counters->add("violation");
    emit("VIOLATION " + tag_ + " " + describe(p) + ": " + what);
  }

  const EndContext& ctx_;
  Connection& conn_;
  LaneMemory mem_;
  LaneRegions regions_;
  RemoteDescriptor inbox_desc_, peer_inbox_, peer_source_;
  uint64_t peer_source_seed_ = 0;
};

}  // namespace

uint64_t run_lane_as_peer(const EndContext& ctx, Connection& conn, LaneMemory mem, uint64_t lane_seed,
                          uint64_t max_op_bytes, uint64_t max_ops) {
  LaneRun lane(ctx, conn, mem);
  lane.seed_ = lane_seed;
  lane.max_ = max_op_bytes;
  Status s = lane.register_memory();
  if (!s.ok()) {
    emit("NOTE lane not started: " + s.to_string());
    return 0;
  }
  char seed[40];
  std::snprintf(seed, sizeof(seed), "seed=%" PRIx64 " ops=%" PRIu64 " ", lane_seed, max_ops);
  s = lane.send_text("SOAK1 lane " + std::string(seed) + lane.my_header_fields(), after(10s));
  if (!s.ok()) {
    ctx.counters->add("fail." + std::string(code_name(s.code())));
    return 0;
  }
  auto reply = lane.recv_text(after(10s));
  if (!reply.ok()) {
    ctx.counters->add("fail." + std::string(code_name(reply.status().code())));
    return 0;
  }
  if (reply.value().rfind("SOAK1 busy", 0) == 0) {
    ctx.counters->add("lane_busy");
    return 0;
  }
  s = reply.value().rfind("SOAK1 ok ", 0) == 0 ? lane.take_header(reply.value(), false)
                                               : Status(Code::kInvalidArgument, "unexpected reply");
  if (!s.ok()) {
    emit("VIOLATION survivor's lane header: " + s.to_string());
    ctx.counters->add("violation");
    return 0;
  }
  uint64_t done = lane.run(max_ops);
  // A lane of a fixed length ends with a goodbye that the survivor takes
  // only once its own last operation is over: the peer's last operation may
  // be the passive end of the survivor's read, which closing now would cut.
  if (max_ops > 0 && done == max_ops) {
    Status s = lane.send_text("SOAK1 bye", after(20s));
    if (!s.ok()) ctx.counters->add("fail." + std::string(code_name(s.code())));
  }
  return done;
}

uint64_t run_lane_as_survivor(const EndContext& ctx, Connection& conn, LaneMemory mem, const std::string& header,
                              uint64_t max_op_bytes) {
  LaneRun lane(ctx, conn, mem);
  lane.max_ = max_op_bytes;
  Status s = lane.take_header(header, true);
  if (!s.ok()) {
    emit("NOTE refused a lane: " + s.to_string());
    ctx.counters->add("bad_header");
    return 0;
  }
  s = lane.register_memory();
  if (!s.ok()) {
    emit("NOTE lane not started: " + s.to_string());
    return 0;
  }
  s = lane.send_text("SOAK1 ok " + lane.my_header_fields(), after(10s));
  if (!s.ok()) {
    ctx.counters->add("fail." + std::string(code_name(s.code())));
    return 0;
  }
  uint64_t done = lane.run(lane.ops_);
  if (lane.ops_ > 0 && done == lane.ops_) {
    auto bye = lane.recv_text(after(20s));
    if (!bye.ok()) {
      ctx.counters->add("fail." + std::string(code_name(bye.status().code())));
    } else if (bye.value() != "SOAK1 bye") {
      ctx.counters->add("violation");
      emit("VIOLATION a lane's goodbye was \"" + bye.value().substr(0, 80) + "\"");
    }
  }
  return done;
}

}  // namespace ferry::soak
