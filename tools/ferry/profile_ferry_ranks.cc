// The ferry backend's rendezvous directory, connections and barrier.
#include "ferry/profile_ferry_ranks.h"

#include <charconv>
#include <chrono>
#include <thread>

#include "profile/run_files.h"

namespace ferry::cli::profile {
namespace {

// How often a rank looks again for a file that is not there yet: short
// next to a process's start-up (CUDA alone takes longer), cheap on the disk.
constexpr std::chrono::milliseconds kRendezvousPoll{10};

bool parse_number(std::string_view s, uint64_t& v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

// A connecting rank's first notification: this prefix, then its rank.
constexpr std::string_view kHello = "rank ";

// Waits for rank `rank`'s file in `dir` and reads it.
Result<RendezvousEntry> wait_for_entry(const std::string& dir, int rank, Deadline deadline) {
  const std::string path = rendezvous_file(dir, rank);
  for (;;) {
    auto text = ferry::profile::read_file(path);
    if (text.ok()) {
      auto e = parse_rendezvous(text.value());
      if (!e.ok()) return e.status().with_context(path);
      return e;
    }
    if (Clock::now() >= deadline) {
      return Status(Code::kDeadlineExceeded, "rank " + std::to_string(rank) + " did not publish its engine (" + path +
                                                 ") by the deadline: it failed to start or is stuck before it");
    }
    std::this_thread::sleep_for(kRendezvousPoll);
  }
}

}  // namespace

std::string rendezvous_file(const std::string& dir, int rank) {
  return dir + "/rank_" + std::to_string(rank) + ".engine";
}

std::string format_rendezvous(const RendezvousEntry& e) { return std::to_string(e.engine_id) + "\n" + e.metadata; }

Result<RendezvousEntry> parse_rendezvous(const std::string& text) {
  const size_t nl = text.find('\n');
  RendezvousEntry e;
  if (nl == std::string::npos || !parse_number(std::string_view(text).substr(0, nl), e.engine_id)) {
    return Status(Code::kInvalidArgument, "rendezvous file does not start with an engine id and a newline");
  }
  e.metadata = text.substr(nl + 1);
  if (e.metadata.empty()) return Status(Code::kInvalidArgument, "rendezvous file has no engine metadata");
  return e;
}

RankConnections::RankConnections(int rank, int world, std::unique_ptr<Engine> engine)
    : rank_(rank), world_(world), engine_(std::move(engine)), peers_(world), unconfirmed_(world) {}

RankConnections::~RankConnections() {
  for (auto& p : peers_) {
    if (p != nullptr) p->close();
  }
  peers_.clear();
  engine_.reset();
}

Result<std::unique_ptr<RankConnections>> RankConnections::create(const std::string& dir, int rank, int world,
                                                                 Options options, Deadline deadline) {
  if (world < 1 || rank < 0 || rank >= world) {
    return Status(Code::kInvalidArgument,
                  "rank " + std::to_string(rank) + " of " + std::to_string(world) + " is not a rank of the run");
  }
  auto engine = Engine::create(std::move(options));
  if (!engine.ok()) return engine.status().with_context("rank " + std::to_string(rank) + ": creating its engine");
  std::unique_ptr<RankConnections> ranks(new RankConnections(rank, world, std::move(engine).value()));
  const RendezvousEntry mine{ranks->engine_->id(), ranks->engine_->metadata()};
  FERRY_RETURN_IF_ERROR(ferry::profile::write_file(rendezvous_file(dir, rank), format_rendezvous(mine))
                            .with_context("publishing rank " + std::to_string(rank) + "'s engine"));
  FERRY_RETURN_IF_ERROR(ranks->connect_lower(dir, deadline));
  FERRY_RETURN_IF_ERROR(ranks->accept_higher(dir, deadline));
  return ranks;
}

Status RankConnections::connect_lower(const std::string& dir, Deadline deadline) {
  for (int q = 0; q < rank_; ++q) {
    const std::string who = "connecting to rank " + std::to_string(q);
    FERRY_ASSIGN_OR_RETURN(RendezvousEntry e, wait_for_entry(dir, q, deadline));
    auto c = engine_->connect(e.metadata, deadline);
    if (!c.ok()) return c.status().with_context(who);
    if (c.value()->peer_engine_id() != e.engine_id) {
      return Status(Code::kDataLoss, who + ": the engine that answered is not the one rank " + std::to_string(q) +
                                         " published (a stale rendezvous file?)");
    }
    FERRY_RETURN_IF_ERROR(c.value()->notify(std::string(kHello) + std::to_string(rank_), deadline).with_context(who));
    peers_[q] = std::move(c).value();
  }
  return Status();
}

Status RankConnections::accept_higher(const std::string& dir, Deadline deadline) {
  for (int left = world_ - 1 - rank_; left > 0; --left) {
    const std::string where =
        "rank " + std::to_string(rank_) + " waiting for " + std::to_string(left) + " higher rank(s) to connect";
    auto c = engine_->accept(deadline);
    if (!c.ok()) return c.status().with_context(where);
    auto hello = c.value()->wait_notification(deadline);
    if (!hello.ok()) return hello.status().with_context(where + ": the first notification of a new connection");
    uint64_t s = 0;
    const std::string& word = hello.value();
    if (!word.starts_with(kHello) || !parse_number(std::string_view(word).substr(kHello.size()), s) ||
        s <= static_cast<uint64_t>(rank_) || s >= static_cast<uint64_t>(world_) || peers_[s] != nullptr) {
      return Status(Code::kDataLoss, where + ": a peer introduced itself as \"" + word + "\" (" +
                                         c.value()->peer_address() + "), not as a higher rank of this run");
    }
    FERRY_ASSIGN_OR_RETURN(RendezvousEntry e, wait_for_entry(dir, static_cast<int>(s), deadline));
    if (e.engine_id != c.value()->peer_engine_id()) {
      return Status(Code::kDataLoss, where + ": the engine that says it is rank " + std::to_string(s) +
                                         " is not the one that rank published");
    }
    peers_[s] = std::move(c).value();
  }
  return Status();
}

Status RankConnections::barrier(Deadline deadline) {
  // The last barrier's notifications first: every peer has them (it passed
  // that barrier), and checking their confirmations only now keeps a barrier
  // at one message each way instead of a round trip.
  for (int q = 0; q < world_; ++q) {
    if (q == rank_ || unconfirmed_[q].id() == 0) continue;
    FERRY_RETURN_IF_ERROR(unconfirmed_[q].wait(deadline).with_context("barrier " + std::to_string(barriers_) +
                                                                      ": notifying rank " + std::to_string(q)));
  }
  const std::string word = "barrier " + std::to_string(++barriers_);
  for (int q = 0; q < world_; ++q) {
    if (q != rank_) unconfirmed_[q] = peers_[q]->notify_async(word);
  }
  for (int q = 0; q < world_; ++q) {
    if (q == rank_) continue;
    const std::string where = word + ": rank " + std::to_string(rank_) + " waiting for rank " + std::to_string(q);
    auto got = peers_[q]->wait_notification(deadline);
    if (!got.ok()) return got.status().with_context(where);
    if (got.value() != word) {
      return Status(Code::kDataLoss, where + ": it sent \"" + got.value() + "\" (the ranks run different plans)");
    }
  }
  return Status();
}

}  // namespace ferry::cli::profile
