// Alternating NIC sets: each set its own engine and connection to one target,
// bursts taking turns in the order of alternation_order().
#include "ferry/bench_alternate.h"

#include <condition_variable>
#include <cstdio>
#include <thread>

#include "ferry/bench_pairs.h"
#include "ferry/bench_sizes.h"
#include "ferry/connect_hint.h"
#include "platform/mutex.h"
#include "profile/stats.h"

namespace ferry::cli {

namespace {

// Hands the link from burst to burst: a session's timed phase starts only
// when the order says it is its turn, and passing the turn ends it.
class Turns {
 public:
  explicit Turns(std::vector<int> order) : order_(std::move(order)) {}
  void wait_for(int set) {
    platform::UniqueLock lock(mu_);
    cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return next_ < order_.size() && order_[next_] == set; });
  }
  void pass() {
    {
      platform::MutexLock lock(mu_);
      ++next_;
    }
    cv_.notify_all();
  }

 private:
  platform::Mutex mu_;
  std::condition_variable cv_;
  const std::vector<int> order_;
  size_t next_ GUARDED_BY(mu_) = 0;
};

}  // namespace

int run_alternating(const std::vector<std::string>& nic_sets, const Options& base, RunConfig cfg, int rounds,
                    const std::string& peer) {
  if (cfg.sizes.size() != 1 || rounds < 1 || cfg.bidir || cfg.verify) {
    // --verify fills the buffers with random bytes between bursts, beside
    // another set's burst: check data with a plain run instead.
    std::fprintf(stderr, "ferry bench: --alternate-nics takes one size, --rounds >= 1, no --bidir and no --verify\n");
    return 2;
  }
  const int sets = static_cast<int>(nic_sets.size());
  const int total = rounds + 1;  // round 0 warms every connection up and is not counted
  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<std::shared_ptr<Connection>> conns;
  for (const std::string& nics : nic_sets) {
    Options o = base;
    o.nics = nics;
    engines.push_back(must(Engine::create(o), "create engine for NICs " + nics));
    conns.push_back(connect_or_die(*engines.back(), peer, "connect over " + nics));
  }
  std::string transport(conns[0]->transport_name());
  std::fprintf(stderr, "ferry bench: %s %s over the %s transport, %d rounds of %d per set, sets %d, alternating\n",
               cfg.op.c_str(), format_bytes(cfg.sizes[0]).c_str(), transport.c_str(), rounds, cfg.iters, sets);
  if (transport != "tcp") {
    // The local transport moves bytes through shared memory, on no NIC.
    std::fprintf(stderr,
                 "ferry bench: note: --alternate-nics does nothing on the %s transport: every set measures "
                 "the same thing; --transport tcp measures TCP\n",
                 transport.c_str());
  }
  cfg.sizes.assign(static_cast<size_t>(total), cfg.sizes[0]);
  cfg.warmup = 0;  // a warm-up outside the turns would run beside another set's burst
  cfg.group = sets;  // a --once target serves every set's session before it exits
  Turns turns(alternation_order(sets, total));
  std::vector<std::vector<SizeResult>> results(static_cast<size_t>(sets));
  std::vector<std::thread> threads;
  for (int s = 0; s < sets; ++s) {
    threads.emplace_back([&, s] {
      RunConfig c = cfg;
      bool before = true;  // sync() is called before and after each timed phase
      c.sync = [&turns, &before, s] {
        if (before) {
          turns.wait_for(s);
        } else {
          turns.pass();
        }
        before = !before;
      };
      results[static_cast<size_t>(s)] = run_initiator(*engines[static_cast<size_t>(s)], *conns[static_cast<size_t>(s)], c);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& c : conns) c->close();

  std::vector<std::vector<double>> gbs(static_cast<size_t>(sets));
  std::printf("# %s over the %s transport, NIC sets alternating\n", cfg.op.c_str(), transport.c_str());
  std::printf("%-6s", "round");
  for (const std::string& n : nic_sets) std::printf(" %16s", n.c_str());
  std::printf("\n");
  bool bad = false;
  for (int r = 1; r < total; ++r) {
    std::printf("%-6d", r);
    for (int s = 0; s < sets; ++s) {
      const SizeResult& x = results[static_cast<size_t>(s)][static_cast<size_t>(r)];
      gbs[static_cast<size_t>(s)].push_back(x.bytes_per_s / 1e9);
      bad = bad || x.verified == "FAILED";
      std::printf(" %16.3f", x.bytes_per_s / 1e9);
    }
    std::printf("\n");
  }
  std::printf("%-16s %8s %10s %18s %8s\n", "nics", "GB/s", "vs first", "90% interval", "above");
  for (int s = 0; s < sets; ++s) {
    PairedRatio p = paired_ratio(gbs[0], gbs[static_cast<size_t>(s)]);
    std::printf("%-16s %8.3f %10.3f   [%6.3f, %6.3f] %4d/%d\n", nic_sets[static_cast<size_t>(s)].c_str(),
                profile::median(gbs[static_cast<size_t>(s)]), p.median, p.lo, p.hi, p.above, p.pairs);
  }
  std::printf("(GB/s: median over rounds; vs first: median of each round's ratio to the first set's burst)\n");
  return bad ? 3 : 0;
}

}  // namespace ferry::cli
