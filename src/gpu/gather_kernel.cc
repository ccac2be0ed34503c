// GatherKernels: the gather kernel's PTX, the list it takes and its launch.
#include "gpu/gather_kernel.h"

#include <algorithm>
#include <array>

namespace ferry::platform {
namespace {

constexpr char kPtx[] =
#include "gpu/gather_kernel_ptx.inc"
    ;


// The kernel's parameters, laid out as gather_kernel.cu declares them.
struct Item {
  uint64_t dst, src, n;
};
static_assert(sizeof(Item) == 24);

// Blocks of threads a launch starts at most; they take the items in turn.
constexpr unsigned kMaxGrid = 1024;

// 16-byte words: a thread per word of the average item, 128 to 512.
unsigned threads_for(uint64_t bytes, uint64_t items) {
  return static_cast<unsigned>(std::clamp<uint64_t>(bytes / items / 16, 128, 512));
}

}  // namespace

GatherKernels::GatherKernels()
    : kernels_(kPtx, {"ferry_gather_small", "ferry_gather_medium", "ferry_gather_large", "ferry_gather_table",
                "ferry_gather_resident"},
               "gather kernel for batches of blocks") {}

static_assert(sizeof(GatherPiece) == sizeof(Item), "a table of GatherPieces is the kernel's list of items");

bool GatherKernels::suits(size_t pieces, uint64_t bytes) {
  return pieces >= 2 && bytes <= kMaxAveragePiece * pieces;
}

Status GatherKernels::copy(int device, cu::Stream stream, std::span<const GatherPiece> pieces) {
  const CudaDriver& d = cuda();
  uint64_t items_total = 0;
  for (const GatherPiece& p : pieces) items_total += (p.n + kItemBytes - 1) / kItemBytes;
  // The entry points in the order PtxKernels was given them.
  const size_t entry = items_total <= kSmallItems ? 0 : items_total <= kMediumItems ? 1 : 2;
  cu::Function f = kernels_.function(device, entry);
  if (f == nullptr) return Status(Code::kUnimplemented, "no gather kernel on GPU " + std::to_string(device));
  const size_t capacity = std::array{kSmallItems, kMediumItems, kLargeItems}[entry];
  std::array<Item, kLargeItems> list;  // 32 KiB: the launch copies it, so it may live on the stack
  unsigned count = 0;
  uint64_t listed = 0;
  auto launch = [&]() -> Status {
    unsigned threads = threads_for(listed, count);
    unsigned grid = std::min(count, kMaxGrid);
    void* params[] = {list.data(), &count};
    Status s = d.check(d.launch_kernel(f, grid, 1, 1, threads, 1, 1, 0, stream, params, nullptr),
                       "cuLaunchKernel (gather kernel)");
    count = 0;
    listed = 0;
    return s;
  };
  for (const GatherPiece& p : pieces) {
    for (uint64_t at = 0; at < p.n; at += kItemBytes) {
      uint64_t n = std::min(kItemBytes, p.n - at);
      list[count++] = Item{reinterpret_cast<uint64_t>(p.dst + at), reinterpret_cast<uint64_t>(p.src + at), n};
      listed += n;
      if (count == capacity) FERRY_RETURN_IF_ERROR(launch());
    }
  }
  if (count > 0) FERRY_RETURN_IF_ERROR(launch());
  return Status();
}

Status GatherKernels::copy_table(int device, cu::Stream stream, const GatherPiece* table, unsigned count,
                                 uint64_t bytes) {
  if (count == 0) return Status();
  const CudaDriver& d = cuda();
  cu::Function f = kernels_.function(device, 3);
  if (f == nullptr) return Status(Code::kUnimplemented, "no gather kernel on GPU " + std::to_string(device));
  const GatherPiece* list = table;
  void* params[] = {&list, &count};
  return d.check(d.launch_kernel(f, std::min(count, kMaxGrid), 1, 1, threads_for(bytes, count), 1, 1, 0, stream,
                                 params, nullptr),
                 "cuLaunchKernel (gather kernel, listed in memory)");
}

Status GatherKernels::launch_resident(int device, cu::Stream stream, void* mailbox, cu::DevicePtr relay,
                                      uint64_t generation, uint64_t linger_ns, unsigned grid, unsigned threads) {
  const CudaDriver& d = cuda();
  cu::Function f = kernels_.function(device, 4);
  if (f == nullptr) return Status(Code::kUnimplemented, "no gather kernel on GPU " + std::to_string(device));
  void* params[] = {&mailbox, &relay, &generation, &linger_ns};
  return d.check(d.launch_kernel(f, grid, 1, 1, threads, 1, 1, 0, stream, params, nullptr),
                 "cuLaunchKernel (resident gather kernel)");
}

}  // namespace ferry::platform
