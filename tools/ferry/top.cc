// `ferry top ADDR`: a live table of what an engine is doing, from its
// metrics page (FERRY_METRICS_ADDR, docs/metrics.md): rates by operation
// with p50/p99, by peer and by NIC, and failures, between scrapes
// --interval apart, redrawn in place on a terminal. Reads only.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "ferry/commands.h"
#include "top/http_get.h"
#include "top/top_view.h"

namespace ferry::cli {
namespace {

struct TopFlags {
  std::string address;
  double interval_s = 1;
  int count = 0;
  size_t peers = 20;
  bool json = false;
  double timeout_s = 5;
};

Result<top::Scrape> scrape(const top::MetricsUrl& url, double timeout_s) {
  auto deadline = after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
  auto body = top::http_get(url, deadline);
  if (!body.ok()) return body.status();
  auto samples = top::parse_metrics_text(*body);
  if (!samples.ok()) {
    return Status(samples.status().code(),
                  "http://" + url.host_port + url.path + ": " + samples.status().message());
  }
  return top::Scrape{std::move(samples).value(), Clock::now()};
}

int run_top(const TopFlags& f) {
  auto url = top::parse_metrics_url(f.address);
  if (!url.ok()) {
    std::fprintf(stderr, "ferry top: %s\n", url.status().message().c_str());
    return 2;
  }
  if (!(f.interval_s >= 0.05 && f.interval_s <= 3600) || f.count < 0 || !(f.timeout_s > 0)) {
    std::fprintf(stderr, "ferry top: --interval must lie in [0.05, 3600] seconds, --count be >= 0, --timeout > 0\n");
    return 2;
  }
  const std::string source = "http://" + url->host_port + url->path;
  // The first scrape says whether anything answers: an address that is
  // wrong fails at once rather than drawing empty tables.
  auto before = scrape(*url, f.timeout_s);
  if (!before.ok()) {
    std::fprintf(stderr, "ferry top: %s\n", before.status().to_string().c_str());
    return 1;
  }
  const bool redraw = !f.json && ::isatty(STDOUT_FILENO) == 1;
  for (int shown = 0; f.count == 0 || shown < f.count; ++shown) {
    std::this_thread::sleep_for(std::chrono::duration<double>(f.interval_s));
    auto now = scrape(*url, f.timeout_s);
    if (!now.ok()) {
      // The engine may be restarting: say so and keep watching.
      std::fprintf(stderr, "ferry top: %s\n", now.status().to_string().c_str());
      continue;
    }
    top::TopView view = top::make_view(*before, *now);
    if (f.json) {
      nlohmann::json j = top::to_json(view);
      j["source"] = source;
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      // Home and clear, then the table: redrawn in place on a terminal.
      if (redraw) std::fputs("\x1b[H\x1b[2J", stdout);
      std::fputs(top::render_text(view, source, f.peers).c_str(), stdout);
      if (!redraw) std::fputs("\n", stdout);
    }
    std::fflush(stdout);
    before = std::move(now);
  }
  return 0;
}

}  // namespace

void add_top_command(CLI::App& app) {
  auto f = std::make_shared<TopFlags>();
  CLI::App* c = app.add_subcommand("top", "a live table of an engine's transfers, from its metrics page");
  c->add_option("address", f->address,
                "the engine's metrics address (FERRY_METRICS_ADDR): host:port or http://host:port[/path]")
      ->required();
  c->add_option("--interval", f->interval_s, "seconds between scrapes")->capture_default_str();
  c->add_option("--count", f->count, "stop after this many tables (0: never)")->capture_default_str();
  c->add_option("--peers", f->peers, "peer rows shown at most")->capture_default_str();
  c->add_option("--timeout", f->timeout_s, "seconds a scrape may take")->capture_default_str();
  c->add_flag("--json", f->json, "one JSON object a line instead of tables");
  c->callback([f] { std::exit(run_top(*f)); });
}

}  // namespace ferry::cli
