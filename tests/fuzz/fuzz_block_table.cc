// Feeds arbitrary bytes to a batched write's block table decoder, which every
// TCP engine runs on the table that opens each chunk of a batch a peer sends.
// Input: 2 bytes of entry count, 4 of payload size, then the table. A table
// it accepts must have exactly that many non-empty entries covering the
// payload; built again into a BlockTable, any cut of the stream must encode
// to entries that cover the cut exactly and decode again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "transport/tcp/block_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::tcp;
  if (size < 6) return 0;
  size_t count = data[0] | (size_t{data[1]} << 8);
  uint64_t payload = data[2] | (uint64_t{data[3]} << 8) | (uint64_t{data[4]} << 16) | (uint64_t{data[5]} << 24);
  std::vector<RemoteBlock> blocks;
  if (!decode_block_table(std::span(data + 6, size - 6), count, payload, blocks).ok()) return 0;
  if (blocks.size() != count) std::abort();
  uint64_t sum = 0;
  BlockTable table;
  for (const RemoteBlock& b : blocks) {
    if (b.size == 0) std::abort();
    sum += b.size;
    table.add(b);
  }
  if (sum != payload || table.total() != payload || table.size() > count) std::abort();
  // A cut chosen by the input: its entries cover it and decode again.
  uint64_t at = payload > 1 ? (data[2] * 7919u) % payload : 0;
  uint64_t n = payload - at > 1 ? 1 + (data[3] * 104729u) % (payload - at) : payload - at;
  if (n == 0) return 0;
  std::string bytes;
  size_t entries = table.encode(at, n, bytes);
  std::vector<RemoteBlock> again;
  if (!decode_block_table(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), entries, n,
                          again)
           .ok()) {
    std::abort();
  }
  return 0;
}
