// Feeds values of the FERRY_* environment variables (and NCCL's binding
// variables) to Options::apply_environment, which every Engine::create runs:
// the environment is a user's, often set by job scripts far from the code.
// Whatever it accepts must pass validate(), and printing the tunables
// (`ferry config`) then setting them back from what was printed must give
// the same options. (FERRY_AUTH_TOKEN_FILE, which names a file to read, is
// not among the variables set.)
#include <fuzzer/FuzzedDataProvider.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ferry/options.h"

namespace {

using namespace ferry;

void require(bool ok) {
  if (!ok) std::abort();
}

const std::vector<std::string>& variables() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const TunableInfo& t : describe_tunables(Options{})) v.push_back(t.env);
    v.push_back("NCCL_GPUDIRECTTCPX_TX_BINDINGS");
    v.push_back("NCCL_GPUDIRECTTCPX_RX_BINDINGS");
    return v;
  }();
  return names;
}

// Every tunable as `ferry config` prints it, but the secret, which it never prints.
std::vector<std::pair<std::string, std::string>> described(const Options& o) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const TunableInfo& t : describe_tunables(o)) {
    if (t.env != "FERRY_AUTH_TOKEN") out.emplace_back(t.env, t.value);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::vector<std::string>& vars = variables();
  std::vector<std::string> set;
  while (in.remaining_bytes() > 0 && set.size() < 8) {
    const std::string& name = vars[in.ConsumeIntegralInRange<size_t>(0, vars.size() - 1)];
    std::string value = in.ConsumeRandomLengthString(64);
    value = value.substr(0, value.find('\0'));
    ::setenv(name.c_str(), value.c_str(), 1);
    set.push_back(name);
  }
  auto o = apply_environment(Options{});
  for (const std::string& name : set) ::unsetenv(name.c_str());
  if (o.ok()) {
    require(validate(*o).ok());
    auto first = described(*o);
    for (const auto& [env, value] : first) ::setenv(env.c_str(), value.c_str(), 1);
    auto again = apply_environment(Options{});
    for (const auto& [env, value] : first) ::unsetenv(env.c_str());
    require(again.ok() && described(*again) == first);
  }
  return 0;
}
