// Finding and loading NCCL at run time.
#include "profile/nccl_library.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ferry::profile {
namespace {

// The folder of the nvidia.nccl Python package, or "" (no python3, no
// package). Runs python3 from PATH once.
std::string python_nccl_dir() {
  FILE* p = popen("python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null", "r");
  if (p == nullptr) return "";
  char buf[4096] = {};
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, p);
  pclose(p);
  std::string dir(buf, n);
  while (!dir.empty() && (dir.back() == '\n' || dir.back() == '\r')) dir.pop_back();
  return dir;
}

}  // namespace

Result<std::unique_ptr<NcclLibrary>> NcclLibrary::load() {
  std::vector<std::string> candidates;
  std::string tried;
  if (const char* env = std::getenv(kNcclLibraryEnv); env != nullptr && *env != '\0') {
    candidates.push_back(env);
  } else {
    candidates.push_back("libnccl.so.2");
    if (std::string dir = python_nccl_dir(); !dir.empty()) {
      candidates.push_back(dir + "/lib/libnccl.so.2");
    } else {
      tried += "; python3 has no nvidia.nccl package";
    }
  }
  for (const std::string& c : candidates) {
    auto lib = platform::DynamicLibrary::open({c});
    if (!lib.ok()) {
      tried += "; " + lib.status().message();
      continue;
    }
    std::unique_ptr<NcclLibrary> n(new NcclLibrary());
    n->lib_ = std::move(lib).value();
    n->path_ = c;
    bool missing = false;
    auto sym = [&](auto& fn, const char* name, bool required = true) {
      Status s = n->lib_.lookup(name, fn);
      if (!s.ok() && required) {
        missing = true;
        tried += "; " + s.message();
      }
    };
    sym(n->get_version, "ncclGetVersion");
    sym(n->get_unique_id, "ncclGetUniqueId");
    sym(n->comm_init_rank, "ncclCommInitRank");
    sym(n->comm_destroy, "ncclCommDestroy");
    sym(n->send, "ncclSend");
    sym(n->recv, "ncclRecv");
    sym(n->all_reduce, "ncclAllReduce");
    sym(n->group_start, "ncclGroupStart");
    sym(n->group_end, "ncclGroupEnd");
    sym(n->get_error_string, "ncclGetErrorString");
    sym(n->get_last_error, "ncclGetLastError", false);
    if (missing) continue;  // the destructor closes it
    return n;
  }
  std::string where = std::getenv(kNcclLibraryEnv) ? std::string(kNcclLibraryEnv) + "=" + candidates[0]
                                                   : "libnccl.so.2 and the Python environment";
  return Status(Code::kUnavailable, "NCCL not found (looked at " + where + ")" + tried);
}

std::string NcclLibrary::version() const {
  int v = 0;
  if (get_version(&v) != 0) return "unknown";
  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9.
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
  return buf;
}

std::string NcclLibrary::error(Result_t r) const {
  std::string s = get_error_string ? get_error_string(r) : "error " + std::to_string(r);
  if (get_last_error != nullptr) {
    const char* last = get_last_error(nullptr);
    if (last != nullptr && *last != '\0') s += std::string(" (") + last + ")";
  }
  return s;
}

std::string to_hex(const NcclUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (char c : id.internal) {
    auto b = static_cast<unsigned char>(c);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

Result<NcclUniqueId> nccl_id_from_hex(const std::string& hex) {
  NcclUniqueId id{};
  if (hex.size() != 2 * sizeof(id.internal)) {
    return Status(Code::kInvalidArgument, "NCCL id: expected 256 hex digits, got " + std::to_string(hex.size()));
  }
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    int hi = val(hex[2 * i]), lo = val(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status(Code::kInvalidArgument, "NCCL id: not hex");
    id.internal[i] = static_cast<char>(hi * 16 + lo);
  }
  return id;
}

}  // namespace ferry::profile
