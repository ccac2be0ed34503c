// Feeds rewritten /proc and /sys files to everything `ferry diag` and `ferry
// tune` read from a host: a copy of a fixture tree (a small VM, or a
// two-node GPU host) in a temporary folder has some of its files replaced
// with the input's bytes, then the tree is read as a host would be
// (topology, interrupts and their affinities, softirqs, CPU times, sysctls)
// and planned, verified and written out as JSON and read back. The kernel's
// files may hold anything a driver or a container runtime put there; none of
// it may crash the tools or make a plan they cannot read back.
//
// Input: one byte choosing the tree (0xa3 the GPU host, whose 208 CPUs take
// ten times longer to read, anything else the VM), one byte of policy
// overrides, then records of a u16 file number (of the tree's regular
// files, in name order), a u16 length and that many bytes. Files come back
// to their fixture content after each input.
#include <fuzzer/FuzzedDataProvider.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "diag/snapshot.h"
#include "diag/snapshot_json.h"
#include "diag/snapshot_markdown.h"
#include "tune/plan.h"
#include "tune/plan_json.h"
#include "tune/verify.h"

namespace {

namespace fs = std::filesystem;
using namespace ferry;

void require(bool ok) {
  if (!ok) std::abort();
}

struct Tree {
  std::string root;
  std::vector<std::string> files;       // regular files, in name order
  std::map<size_t, std::string> saved;  // fixture content of files an input changed
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void put(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string scratch;  // removed at exit

std::vector<Tree>& trees() {
  static std::vector<Tree> all = [] {
    std::string tmpl = (fs::temp_directory_path() / "ferry-fuzz-sysfs-XXXXXX").string();
    require(::mkdtemp(tmpl.data()) != nullptr);
    scratch = tmpl;
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch, ec);
    });
    std::vector<Tree> out;
    for (const char* name : {"vm", "a3high"}) {
      Tree t;
      t.root = scratch + "/" + name;
      std::error_code ec;
      fs::copy(std::string(FERRY_FIXTURES) + "/" + name, t.root,
               fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
      require(!ec);
      for (auto it = fs::recursive_directory_iterator(t.root); it != fs::recursive_directory_iterator(); ++it) {
        if (it->is_regular_file() && !it->is_symlink()) t.files.push_back(it->path().string());
      }
      std::sort(t.files.begin(), t.files.end());
      require(!t.files.empty());
      out.push_back(std::move(t));
    }
    return out;
  }();
  return all;
}

void read_host(const std::string& root, uint8_t policy_bits) {
  if (auto s = diag::take_snapshot(root); s.ok()) {
    (void)diag::snapshot_to_markdown(*s);
    std::string json = diag::snapshot_to_json(*s);
    auto again = diag::snapshot_from_json(json, "snapshot");
    require(again.ok() && diag::snapshot_to_json(*again) == json);
  }
  tune::TuneOptions o;
  o.irq_mode = (policy_bits & 1) ? tune::IrqMode::kSet : tune::IrqMode::kSpread;
  if (policy_bits & 2) o.policy.system_cores = (policy_bits >> 4) & 3;
  if (policy_bits & 4) o.policy.tx_cores = 1 + ((policy_bits >> 6) & 1);
  if (policy_bits & 8) o.policy.rx_cores = 1 + ((policy_bits >> 7) & 1);
  auto plan = tune::make_plan(root, o);
  if (!plan.ok()) return;
  (void)tune::render_plan_text(*plan);
  (void)tune::plan_changes(*plan, true);
  // The topology does not travel in a plan's JSON; the rest must come back.
  auto read = tune::plan_from_json(tune::plan_to_json(*plan), "plan");
  require(read.ok());
  std::string json = tune::plan_to_json(*read);
  auto again = tune::plan_from_json(json, "plan");
  require(again.ok() && tune::plan_to_json(*again) == json);
  (void)tune::render_verify_text(tune::verify_plan(root, *plan, true));
  if (auto v = tune::verify_bindings(root, plan->bindings.tx, plan->bindings.rx); v.ok()) {
    (void)tune::render_verify_text(*v);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  uint8_t first = in.ConsumeIntegral<uint8_t>();
  Tree& t = trees()[first == 0xa3 ? 1 : 0];
  uint8_t policy = in.ConsumeIntegral<uint8_t>();
  while (in.remaining_bytes() >= 4) {
    size_t i = in.ConsumeIntegral<uint16_t>() % t.files.size();
    std::string bytes = in.ConsumeBytesAsString(in.ConsumeIntegral<uint16_t>());
    if (t.saved.count(i) == 0) t.saved[i] = slurp(t.files[i]);
    put(t.files[i], bytes);
  }
  read_host(t.root, policy);
  for (const auto& [i, bytes] : t.saved) put(t.files[i], bytes);
  t.saved.clear();
  return 0;
}
