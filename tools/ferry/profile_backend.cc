// The registry of `ferry profile` backends.
#include "ferry/profile_backend.h"

namespace ferry::cli::profile {

#ifdef FERRY_PROFILE_CUDA
#define FERRY_PROFILE_NEEDS_CUDA nullptr
#else
#define FERRY_PROFILE_NEEDS_CUDA \
  "this ferry was built without CUDA (no nvcc at configure time); rebuild where the CUDA toolkit is installed"
#endif

const std::vector<BackendSpec>& backends() {
  static const std::vector<BackendSpec> table = {
      {"ce", "cudaMemcpyPeerAsync on the copy engines, one process (the hardware reference)", false,
       FERRY_PROFILE_NEEDS_CUDA},
      {"nccl", "ncclSend/ncclRecv, one process per GPU (NCCL loaded at run time)", true, FERRY_PROFILE_NEEDS_CUDA},
      {"ferry", "this engine's send/recv over its local transport (CUDA IPC), one process per GPU", true,
       FERRY_PROFILE_NEEDS_CUDA},
  };
  return table;
}

Result<std::optional<PeerRole>> peer_role(const ferry::profile::Config& c, const std::vector<int>& gpus, int gpu) {
  if (c.src != gpu && c.dst != gpu) return std::optional<PeerRole>();
  PeerRole role;
  role.sending = c.src == gpu;
  const int other = role.sending ? c.dst : c.src;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i] == other) role.peer = static_cast<int>(i);
  }
  if (role.peer < 0) {
    return Status(Code::kInvalidArgument, "GPU of configuration " + std::to_string(c.id) + " has no rank");
  }
  return std::optional<PeerRole>(role);
}

Status check_rank(const BackendArgs& args, const std::string& backend) {
  if (args.rank < 0 || args.rank >= static_cast<int>(args.gpus.size()) ||
      args.world != static_cast<int>(args.gpus.size())) {
    return Status(Code::kInvalidArgument, backend + " backend: rank " + std::to_string(args.rank) + " of " +
                                              std::to_string(args.world) + " does not match the GPU list");
  }
  return Status();
}

const BackendSpec* find_backend(const std::string& name) {
  for (const BackendSpec& b : backends()) {
    if (name == b.name) return &b;
  }
  return nullptr;
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const BackendArgs& args) {
  const BackendSpec* spec = find_backend(name);
  if (spec == nullptr) return Status(Code::kInvalidArgument, "unknown backend \"" + name + "\": use ce, nccl or ferry");
  if (spec->unavailable != nullptr) return Status(Code::kUnimplemented, "backend " + name + ": " + spec->unavailable);
#ifdef FERRY_PROFILE_CUDA
  if (name == "ce") return make_ce_backend(args);
  if (name == "nccl") return make_nccl_backend(args);
  if (name == "ferry") return make_ferry_backend(args);
#endif
  return Status(Code::kInternal, "backend " + name + " has no factory");
}

}  // namespace ferry::cli::profile
