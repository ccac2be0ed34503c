// ferry_soak: the fault-injecting soak (bench/soak.sh runs it on both
// transports). `ferry_soak run` is the supervisor; it starts this same
// program as the survivor, the peers and the garbage sender.
//
//   ferry_soak run --seconds 60 --transport tcp|local [--gpu] [--faults LIST] [--json FILE]
//   ferry_soak survivor|peer|garbage ...   (started by `run`; see roles.h)
#include <CLI/CLI.hpp>

#include "soak/roles.h"
#include "soak/supervisor.h"

namespace {

void engine_flags(CLI::App* app, ferry::soak::EngineArgs* e, int64_t* peer_ms, int64_t* hs_ms) {
  app->add_option("--transport", e->transport, "tcp or local")->check(CLI::IsMember({"tcp", "local"}));
  app->add_option("--peer-timeout-ms", *peer_ms, "engine peer_timeout (ms)")->check(CLI::Range(200, 600000));
  app->add_option("--handshake-timeout-ms", *hs_ms, "engine handshake_timeout (ms)")->check(CLI::Range(200, 600000));
  app->add_option("--max-per-peer", e->max_connections_per_peer, "engine max_connections_per_peer")
      ->check(CLI::Range(1, 4096));
  app->add_option("--connection-memory", e->connection_memory_bytes, "engine connection_memory_bytes");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ferry::soak;
  CLI::App app{"ferry_soak: two processes exchange every operation while faults are injected"};
  app.require_subcommand(1);

  RunArgs run;
  int64_t run_peer_ms = 2000, run_hs_ms = 2000;
  double minutes = 0;
  auto* r = app.add_subcommand("run", "the supervisor: survivor, peers, faults, report");
  engine_flags(r, &run.engine, &run_peer_ms, &run_hs_ms);
  r->add_option("--seconds", run.seconds, "how long faults and operations run")->check(CLI::PositiveNumber);
  r->add_option("--minutes", minutes, "the same in minutes")->check(CLI::PositiveNumber);
  r->add_option("--peers", run.peers, "peer processes")->check(CLI::Range(1, 8));
  r->add_option("--lanes", run.lanes, "connections (lanes) per peer")->check(CLI::Range(1, 8));
  r->add_option("--max-bytes", run.max_op_bytes, "largest operation in bytes (default 64 MiB)")
      ->check(CLI::Range(uint64_t{16}, uint64_t{1} << 30));
  r->add_flag("--gpu", run.gpu,
              "every buffer in GPU memory: the survivor's on GPU 0, the peers' on GPU 1 "
              "(GPU 0 with one GPU); fails without a CUDA driver and GPU");
  r->add_option("--faults", run.faults, "all, none, or a comma list of kill,stop,link,garbage,dereg,exhaust");
  r->add_option("--fault-gap-min", run.fault_gap_min, "fewest seconds between faults");
  r->add_option("--fault-gap-max", run.fault_gap_max, "most seconds between faults");
  r->add_option("--probe-every", run.probe_every, "seconds between probe connections");
  r->add_option("--netns-server", run.netns_server, "network namespace of the survivor (TCP link faults)");
  r->add_option("--netns-client", run.netns_client, "network namespace of every other process");
  r->add_option("--server-host", run.server_host, "address the survivor listens on (in --netns-server)");
  r->add_option("--link-dev", run.link_dev, "interface in --netns-server that the link fault sets down and up");
  r->add_option("--json", run.json, "also write the report as JSON to this file");
  r->add_option("--out", run.out_dir, "directory for logs (default: a new one in the temporary directory)");
  r->add_option("--seed", run.seed, "seed of the fault schedule (default: random)");
  r->add_flag("--corrupt-one", run.corrupt_one, "debug: the survivor flips one received byte (the run must fail)");
  r->add_flag("--hang-one", run.hang_one, "debug: one survivor call overruns its deadline (the run must fail)");

  SurvivorArgs sv;
  int64_t sv_peer_ms = 2000, sv_hs_ms = 2000;
  auto* s = app.add_subcommand("survivor", "the engine under test (started by run)");
  engine_flags(s, &sv.engine, &sv_peer_ms, &sv_hs_ms);
  s->add_option("--listen", sv.listen);
  s->add_option("--max-bytes", sv.max_op_bytes)->check(CLI::Range(uint64_t{16}, uint64_t{1} << 30));
  s->add_option("--slots", sv.slots)->check(CLI::Range(1, 64));
  s->add_option("--gpu-device", sv.engine.gpu);
  s->add_flag("--corrupt-one", sv.corrupt_one);
  s->add_flag("--hang-one", sv.hang_one);

  PeerArgs pr;
  int64_t pr_peer_ms = 2000, pr_hs_ms = 2000;
  auto* p = app.add_subcommand("peer", "a peer of the survivor (started by run)");
  engine_flags(p, &pr.engine, &pr_peer_ms, &pr_hs_ms);
  p->add_option("--connect", pr.connect)->required();
  p->add_option("--mode", pr.mode)->check(CLI::IsMember({"lane", "probe", "hold", "memflood"}));
  p->add_option("--lanes", pr.lanes)->check(CLI::Range(1, 8));
  p->add_option("--max-bytes", pr.max_op_bytes)->check(CLI::Range(uint64_t{16}, uint64_t{1} << 30));
  p->add_option("--seed", pr.seed);
  p->add_option("--probe-ops", pr.probe_ops);
  p->add_option("--hold-count", pr.hold_count)->check(CLI::Range(1, 4096));
  p->add_option("--gpu-device", pr.engine.gpu);

  GarbageArgs gb;
  int64_t gb_hs_ms = 2000;
  auto* g = app.add_subcommand("garbage", "hostile bytes at the survivor's port (started by run)");
  g->add_option("--connect", gb.connect)->required();
  g->add_option("--seed", gb.seed);
  g->add_option("--handshake-timeout-ms", gb_hs_ms);

  uint64_t plans = 20000;
  auto* c = app.add_subcommand("selfcheck", "check the operation plans and the pattern (no engine)");
  c->add_option("--plans", plans, "plans to check at each largest size");

  CLI11_PARSE(app, argc, argv);

  if (*c) return selfcheck_main(plans);

  if (*r) {
    if (minutes > 0) run.seconds = minutes * 60;
    run.engine.peer_timeout = std::chrono::milliseconds(run_peer_ms);
    run.engine.handshake_timeout = std::chrono::milliseconds(run_hs_ms);
    if (run.fault_gap_max < run.fault_gap_min) run.fault_gap_max = run.fault_gap_min;
    return run_main(run);
  }
  if (*s) {
    sv.engine.peer_timeout = std::chrono::milliseconds(sv_peer_ms);
    sv.engine.handshake_timeout = std::chrono::milliseconds(sv_hs_ms);
    return survivor_main(sv);
  }
  if (*p) {
    pr.engine.peer_timeout = std::chrono::milliseconds(pr_peer_ms);
    pr.engine.handshake_timeout = std::chrono::milliseconds(pr_hs_ms);
    // A peer's calls may be frozen by SIGSTOP for up to peer_timeout + 2 s.
    pr.margin = pr.engine.peer_timeout + std::chrono::seconds(10);
    return peer_main(pr);
  }
  gb.handshake_timeout = std::chrono::milliseconds(gb_hs_ms);
  return garbage_main(gb);
}
