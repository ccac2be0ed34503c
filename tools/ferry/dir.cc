// `ferry dir ls|get|watch [URL]`: the engines a directory names (Redis or
// etcd, docs/directory.md); without URL, the directory FERRY_DIRECTORY
// names, as for the engines themselves. Reads only; entries come from the
// engines themselves, or from anyone else who can write the directory, so
// the table and the watch's lines show their text escaped (--json escapes it
// as JSON does).
#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "directory/entry.h"
#include "ferry/commands.h"
#include "ferry/directory.h"
#include "ferry/options.h"

namespace ferry::cli {
namespace {

using namespace std::chrono_literals;

struct DirFlags {
  // The command line's words after the command: [URL] for ls and watch,
  // [URL] NAME for get (see resolve).
  std::vector<std::string> words;
  std::string url;
  std::string name;
  bool json = false;
  double timeout_s = 5;
  int interval_ms = 500;
  double for_s = 0;
};

nlohmann::json to_json(const DirectoryEntry& e) {
  char id[17];
  std::snprintf(id, sizeof(id), "%016" PRIx64, e.engine_id);
  return {{"name", e.name},          {"engine", id}, {"incarnation", e.incarnation},
          {"host", e.host_id},       {"pid", e.pid}, {"started_unix_ms", e.started_unix_ms},
          {"addresses", e.addresses}};
}

std::string dump(const nlohmann::json& j) { return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace); }

// Fills f.url (and f.name for get) from the words given and FERRY_DIRECTORY;
// a usage error (exit 2) names `command` when the URL or the name is missing.
void resolve(DirFlags& f, const std::string& command, bool wants_name) {
  size_t need = wants_name ? 1 : 0;
  if (f.words.size() > need + 1 || f.words.size() < need) {
    std::fprintf(stderr, "ferry dir %s: give %s\nRun 'ferry dir %s --help' for its flags.\n", command.c_str(),
                 wants_name ? "[URL] NAME" : "at most one URL", command.c_str());
    std::exit(2);
  }
  if (wants_name) f.name = f.words.back();
  if (f.words.size() == need + 1) {
    f.url = f.words.front();
    return;
  }
  // The engines read FERRY_DIRECTORY through the tunables' registry; so does this.
  auto env = apply_environment(Options{});
  if (!env.ok()) {
    std::fprintf(stderr, "ferry dir %s: %s\n", command.c_str(), env.status().to_string().c_str());
    std::exit(2);
  }
  f.url = env->directory;
  if (f.url.empty()) {
    std::fprintf(stderr,
                 "ferry dir %s: which directory? Give its URL (redis://host:port[/ns] or etcd://host:port[/ns]) or "
                 "set FERRY_DIRECTORY\nRun 'ferry dir %s --help' for its flags.\n",
                 command.c_str(), command.c_str());
    std::exit(2);
  }
}

std::unique_ptr<Directory> open_or_exit(const std::string& url) {
  auto d = Directory::open(url);
  if (!d.ok()) {
    std::fprintf(stderr, "ferry dir: %s\n", d.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(d).value();
}

// Whoever can write the directory writes these fields: every text field is
// escaped (directory::terminal_text) so that the terminal never acts on it.
void print_row(const DirectoryEntry& e) {
  char id[17];
  std::snprintf(id, sizeof(id), "%016" PRIx64, e.engine_id);
  std::string addrs;
  for (size_t i = 0; i < e.addresses.size(); ++i) addrs += (i ? "," : "") + directory::terminal_text(e.addresses[i]);
  std::printf("%-24s %-18" PRIu64 " %-16s %-8" PRId64 " %-28s %s\n", directory::terminal_text(e.name).c_str(),
              e.incarnation, id, e.pid, directory::terminal_text(e.host_id).c_str(), addrs.c_str());
}

int run_ls(const DirFlags& f) {
  auto dir = open_or_exit(f.url);
  auto l = dir->list(after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(f.timeout_s))));
  if (!l.ok()) {
    std::fprintf(stderr, "ferry dir ls: %s\n", l.status().to_string().c_str());
    return 1;
  }
  for (const Status& m : l->malformed) std::fprintf(stderr, "ferry dir ls: skipped: %s\n", m.message().c_str());
  if (f.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : l->entries) out.push_back(to_json(e));
    std::printf("%s\n", dump(out).c_str());
    return 0;
  }
  std::printf("%-24s %-18s %-16s %-8s %-28s %s\n", "name", "incarnation", "engine", "pid", "host", "addresses");
  for (const auto& e : l->entries) print_row(e);
  return 0;
}

int run_get(const DirFlags& f) {
  auto dir = open_or_exit(f.url);
  auto e = dir->lookup(f.name,
                       after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(f.timeout_s))));
  if (!e.ok()) {
    std::fprintf(stderr, "ferry dir get: %s\n", e.status().to_string().c_str());
    return e.status().code() == Code::kNotFound ? 3 : 1;
  }
  std::printf("%s\n", f.json ? dump(to_json(e.value())).c_str() : e->to_string().c_str());
  return 0;
}

int run_watch(const DirFlags& f) {
  auto dir = open_or_exit(f.url);
  auto w = dir->watch();
  Deadline end = f.for_s > 0
                     ? after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(f.for_s)))
                     : kNoDeadline;
  bool reported_down = false;
  int failed_slices = 0;
  for (;;) {
    Deadline slice = std::min(end, after(2s));
    auto ev = w->next(slice, std::chrono::milliseconds(f.interval_ms));
    if (!ev.ok() && ev.status().code() == Code::kUnavailable) {
      // Keep watching: the directory may come back. Said once, after two
      // slices in a row found it unreachable.
      if (!reported_down && ++failed_slices >= 2) {
        std::fprintf(stderr, "ferry dir watch: %s (still watching)\n", ev.status().to_string().c_str());
      }
      if (failed_slices >= 2) reported_down = true;
      if (Clock::now() >= end) return 1;
      continue;
    }
    if (!ev.ok()) {
      std::fprintf(stderr, "ferry dir watch: %s\n", ev.status().to_string().c_str());
      return 1;
    }
    if (reported_down) std::fprintf(stderr, "ferry dir watch: the directory answers again\n");
    reported_down = false;
    failed_slices = 0;
    for (const auto& e : *ev) {
      if (f.json) {
        nlohmann::json j = to_json(e.entry);
        j["event"] = std::string(event_kind_name(e.kind));
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      } else {
        std::printf("%-9s %s\n", std::string(event_kind_name(e.kind)).c_str(), e.entry.to_string().c_str());
      }
    }
    std::fflush(stdout);
    if (Clock::now() >= end) return 0;
  }
}

}  // namespace

void add_dir_command(CLI::App& app) {
  auto f = std::make_shared<DirFlags>();
  CLI::App* d = app.add_subcommand("dir", "the engines a directory (redis://... or etcd://...) names");
  d->require_subcommand(1);
  static const char kUrl[] =
      "redis://[user:pass@]host:port[/ns] or etcd://host:port[,host:port...][/ns] (default: FERRY_DIRECTORY)";
  auto common = [&](CLI::App* c) {
    c->add_option("--timeout", f->timeout_s, "seconds to wait for the directory")->capture_default_str();
    c->add_flag("--json", f->json, "JSON instead of a table");
  };
  CLI::App* ls = d->add_subcommand("ls", "list every engine");
  ls->add_option("url", f->words, kUrl);
  common(ls);
  ls->callback([f] {
    resolve(*f, "ls", false);
    std::exit(run_ls(*f));
  });
  CLI::App* get = d->add_subcommand("get", "one engine's entry (exit 3: no such name)");
  get->add_option("url_and_name", f->words,
                  std::string("[URL] NAME: the engine's name, in the directory at URL, ") + kUrl)
      ->required();
  common(get);
  get->callback([f] {
    resolve(*f, "get", true);
    std::exit(run_get(*f));
  });
  CLI::App* watch = d->add_subcommand("watch", "print names as they appear, vanish or restart");
  watch->add_option("url", f->words, kUrl);
  common(watch);
  watch->add_option("--interval", f->interval_ms, "milliseconds between listings")->capture_default_str();
  watch->add_option("--for", f->for_s, "stop after this many seconds (0: never)")->capture_default_str();
  watch->callback([f] {
    resolve(*f, "watch", false);
    std::exit(run_watch(*f));
  });
}

}  // namespace ferry::cli
