// NCCL, loaded at run time (no nccl.h needed to build), with the handful of
// entry points `ferry profile --backend nccl` uses, declared here by hand.
//
// Where it is looked for, first found wins:
//   1. the file named by FERRY_NCCL_LIBRARY (kNcclLibraryEnv), if set;
//   2. libnccl.so.2 on the dynamic loader's path (the system's NCCL);
//   3. the NCCL of the Python environment: lib/libnccl.so.2 under the folder
//      that `python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])"`
//      prints (the nvidia-nccl wheel that PyTorch installs).
//
// Thread-safety: the table is immutable once loaded; NCCL's own rules apply
// to the calls.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ferry/status.h"
#include "platform/dynamic_library.h"

namespace ferry::profile {

// The variable naming the NCCL library file to load, and its meaning.
inline constexpr const char* kNcclLibraryEnv = "FERRY_NCCL_LIBRARY";
inline constexpr const char* kNcclLibraryDoc =
    "NCCL library file for `ferry profile --backend nccl` (else libnccl.so.2, else the Python environment's)";

// ncclUniqueId: 128 opaque bytes.
struct NcclUniqueId {
  char internal[128];
};

class NcclLibrary {
 public:
  using Comm = struct ncclComm*;
  using Result_t = int;  // ncclResult_t; 0 is success
  static constexpr int kInt8 = 0;
  static constexpr int kInt32 = 2;
  static constexpr int kSum = 0;

  // Loads NCCL from the first place above that has it. kUnavailable listing
  // every place tried and why each failed.
  static Result<std::unique_ptr<NcclLibrary>> load();
  ~NcclLibrary() = default;  // closes the library

  const std::string& path() const { return path_; }
  // "2.28.3" (from ncclGetVersion).
  std::string version() const;
  // The error's text, with NCCL's last-error detail where available.
  std::string error(Result_t r) const;

  // Entry points; streams are cudaStream_t passed as void*.
  Result_t (*get_version)(int*) = nullptr;
  Result_t (*get_unique_id)(NcclUniqueId*) = nullptr;
  Result_t (*comm_init_rank)(Comm*, int nranks, NcclUniqueId id, int rank) = nullptr;
  Result_t (*comm_destroy)(Comm) = nullptr;
  Result_t (*send)(const void* buf, size_t count, int type, int peer, Comm, void* stream) = nullptr;
  Result_t (*recv)(void* buf, size_t count, int type, int peer, Comm, void* stream) = nullptr;
  Result_t (*all_reduce)(const void* in, void* out, size_t count, int type, int op, Comm, void* stream) = nullptr;
  Result_t (*group_start)() = nullptr;
  Result_t (*group_end)() = nullptr;
  const char* (*get_error_string)(Result_t) = nullptr;
  const char* (*get_last_error)(Comm) = nullptr;

 private:
  NcclLibrary() = default;
  platform::DynamicLibrary lib_;
  std::string path_;
};

// Hex text of an id (256 characters) and back, to hand it to child processes.
std::string to_hex(const NcclUniqueId& id);
Result<NcclUniqueId> nccl_id_from_hex(const std::string& hex);

}  // namespace ferry::profile
