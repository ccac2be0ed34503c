// A hostile peer's batched writes over TCP: a chunk's block table is the
// peer's word on where its bytes go. A malformed table (no entries, too many,
// entries that do not cover the payload, an empty entry) is a protocol
// violation that fails the connection; a well-formed one that names memory
// the peer may not touch (a wrong key, past an export's end) is refused and
// answered, and nothing of it lands. The engine keeps serving others.
#include <random>

#include "hostile_peer.h"
#include "transport/tcp/block_table.h"
#include "wire/messages.h"

namespace ferry::hostile {
namespace {

struct Entry {
  uint64_t export_id, key, offset, size;
};

std::string table_of(const std::vector<Entry>& entries) {
  std::string out;
  for (const Entry& e : entries) {
    uint8_t b[tcp::BlockTable::kEntryBytes];
    wire::put_u64(b, e.export_id);
    wire::put_u64(b + 8, e.key);
    wire::put_u64(b + 16, e.offset);
    wire::put_u64(b + 24, e.size);
    out.append(reinterpret_cast<const char*>(b), sizeof b);
  }
  return out;
}

// One chunk of batched write `op` (`total` bytes in all) at stream offset 0:
// `count` entries claimed, `body` after the header (table then bytes).
bool send_chunk(Peer& peer, uint64_t op, uint64_t count, uint64_t total, const std::string& body) {
  wire::FrameHeader h;
  h.type = wire::FrameType::kWrite;
  h.flags = wire::kFlagBlocks;
  h.id = op;
  h.a = count;
  h.d = total;
  h.payload_len = static_cast<uint32_t>(body.size());
  return peer.frame(h, body.data(), body.size());
}

struct Exported {
  std::vector<uint8_t> mem = std::vector<uint8_t>(1 << 16, 0x5A);
  RemoteDescriptor d;
};

void export_into(Target& t, Exported& x) {
  Region r = t.engine->reg(x.mem.data(), x.mem.size()).value();
  x.d = t.engine->export_region(r).value();
}

void expect_untouched(const Exported& x) {
  EXPECT_EQ(x.mem, std::vector<uint8_t>(x.mem.size(), 0x5A)) << "bytes landed from a refused chunk";
}

void expect_protocol_violation(std::vector<Entry> entries, uint64_t count, size_t data_bytes, const char* what) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  Exported x;
  export_into(t, x);
  for (Entry& e : entries) {
    if (e.export_id == 0) e.export_id = x.d.export_id;
    if (e.key == 0) e.key = x.d.key;
  }
  std::string body = table_of(entries) + std::string(data_bytes, 'x');
  send_chunk(t.peer, 9, count, data_bytes, body);
  Status s = t.failure(after(5s));
  EXPECT_EQ(s.code(), Code::kDataLoss) << what << ": " << s.to_string();
  expect_untouched(x);
  still_serves_others(*t.engine);
}

TEST(TcpHostileBlocks, ATableOfNoEntriesFailsTheConnection) {
  expect_protocol_violation({}, 0, 64, "no entries");
}

TEST(TcpHostileBlocks, ATableOfMoreEntriesThanAChunkMayCarryFailsTheConnection) {
  std::vector<Entry> many(tcp::BlockTable::kMaxEntriesPerChunk + 1, Entry{0, 0, 0, 1});
  expect_protocol_violation(many, many.size(), many.size(), "too many entries");
}

TEST(TcpHostileBlocks, ATableLongerThanItsPayloadFailsTheConnection) {
  expect_protocol_violation({{0, 0, 0, 8}}, 100, 8, "count past the payload");
}

TEST(TcpHostileBlocks, EntriesThatDoNotCoverThePayloadFailTheConnection) {
  expect_protocol_violation({{0, 0, 0, 10}, {0, 0, 100, 10}}, 2, 64, "entries short of the payload");
  expect_protocol_violation({{0, 0, 0, 60}, {0, 0, 100, 10}}, 2, 64, "entries past the payload");
}

TEST(TcpHostileBlocks, AnEmptyEntryFailsTheConnection) {
  expect_protocol_violation({{0, 0, 0, 0}, {0, 0, 100, 64}}, 2, 64, "an empty entry");
}

// Well-formed, aimed where the peer may not write: refused and answered.
void expect_refused(const std::function<Entry(const RemoteDescriptor&)>& second, Code code) {
  Target t;
  ASSERT_NO_FATAL_FAILURE(t.open());
  Exported x;
  export_into(t, x);
  std::vector<Entry> entries = {{x.d.export_id, x.d.key, 0, 32}, second(x.d)};
  std::string body = table_of(entries) + std::string(64, 'x');
  ASSERT_TRUE(send_chunk(t.peer, 11, entries.size(), 64, body));
  auto ack = t.peer.next_control_frame(after(3s));
  ASSERT_TRUE(ack.ok()) << "the batch was not answered: " << ack.status().to_string();
  EXPECT_EQ(ack->type, wire::FrameType::kAck);
  EXPECT_EQ(ack->id, 11u);
  EXPECT_EQ(ack->code, static_cast<uint32_t>(code));
  expect_untouched(x);
  EXPECT_TRUE(t.conn->health().ok()) << t.conn->health().to_string();
}

TEST(TcpHostileBlocks, ABlockWithAWrongKeyIsRefusedAndNothingLands) {
  expect_refused([](const RemoteDescriptor& d) { return Entry{d.export_id, d.key ^ 1, 100, 32}; },
                 Code::kPermissionDenied);
}

TEST(TcpHostileBlocks, ABlockPastTheExportsEndIsRefusedAndNothingLands) {
  expect_refused([](const RemoteDescriptor& d) { return Entry{d.export_id, d.key, d.length - 16, 32}; },
                 Code::kOutOfRange);
}

TEST(TcpHostileBlocks, ABlockWhoseOffsetWrapsAroundIsRefusedAndNothingLands) {
  expect_refused([](const RemoteDescriptor& d) { return Entry{d.export_id, d.key, ~uint64_t{0} - 8, 32}; },
                 Code::kOutOfRange);
}

// The table's own arithmetic, apart from any connection.
// The entries `table` encodes for [at, at + n) of its stream, decoded as a
// receiver would: false if the receiver would refuse them.
bool entries_of(const tcp::BlockTable& table, uint64_t at, uint64_t n, std::vector<tcp::RemoteBlock>& out) {
  std::string bytes;
  size_t count = table.encode(at, n, bytes);
  return tcp::decode_block_table(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), count, n,
                                 out)
      .ok();
}

TEST(BlockTable, ChunksCutAnywhereCarryEntriesThatCoverThemExactly) {
  tcp::BlockTable table;
  table.add({1, 2, 100, 10});
  table.add({1, 2, 110, 5});  // continues the previous one: joined
  table.add({1, 2, 500, 7});
  table.add({3, 4, 0, 1});
  table.add({3, 4, 1, 0});  // empty: ignored
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.total(), 23u);
  EXPECT_EQ(table.smallest(), 1u);
  for (uint64_t at = 0; at < table.total(); ++at) {
    for (uint64_t n = 1; at + n <= table.total(); ++n) {
      std::vector<tcp::RemoteBlock> back;
      ASSERT_TRUE(entries_of(table, at, n, back));
      // Walk the stream byte by byte: each lands where the whole table says.
      uint64_t s = at;
      for (const tcp::RemoteBlock& b : back) {
        for (uint64_t k = 0; k < b.size; ++k, ++s) {
          uint64_t where = s < 15 ? 100 + s : s < 22 ? 500 + (s - 15) : 0;
          uint64_t export_id = s < 22 ? 1 : 3;
          ASSERT_EQ(b.export_id, export_id) << "stream byte " << s;
          ASSERT_EQ(b.offset + k, where) << "stream byte " << s;
        }
      }
      ASSERT_EQ(s, at + n);
    }
  }
}

TEST(BlockTable, ChunkLimitKeepsEveryChunkWithinTheEntryLimit) {
  tcp::BlockTable table;
  for (uint64_t i = 0; i < 10000; ++i) table.add({1, 1, i * 2, 1});  // one-byte blocks, never adjacent
  uint64_t chunk = table.chunk_limit(512 << 10);
  EXPECT_LE(chunk, tcp::BlockTable::kMaxEntriesPerChunk);  // one entry a byte
  for (uint64_t at = 0; at + chunk <= table.total(); at += chunk / 3 + 1) {
    std::string bytes;
    EXPECT_LE(table.encode(at, chunk, bytes), tcp::BlockTable::kMaxEntriesPerChunk);
  }
}

// Over pools, the table works each chunk's entries and local bytes out from
// the application's list: for every cut of the stream they must name, byte
// by byte, what the list says, whatever the pools and block sizes.
TEST(BlockTable, OverPoolsEveryCutNamesTheBytesTheListSays) {
  std::mt19937_64 rng(5);
  std::vector<std::vector<uint8_t>> mem(3, std::vector<uint8_t>(4096));
  std::vector<std::shared_ptr<core::RegionEntry>> entries;
  std::vector<core::MemorySpan> local;
  for (auto& m : mem) {
    entries.push_back(std::make_shared<core::RegionEntry>());
    local.push_back(core::MemorySpan{entries.back(), m.data(), m.size()});
  }
  std::vector<RemoteDescriptor> remote(2);
  remote[0].export_id = 7, remote[0].key = 70;
  remote[1].export_id = 8, remote[1].key = 80;
  // Blocks of 0-9 bytes; every third continues the one before it on both
  // sides (joined into one entry and one span), every fifth is empty.
  std::vector<Block> list;
  for (int i = 0; i < 60; ++i) {
    Block b{static_cast<uint32_t>(rng() % 3), static_cast<uint32_t>(rng() % 2), rng() % 4000, rng() % 4000,
            1 + rng() % 9};
    if (i % 3 == 2) {
      const Block& a = list.back();
      b = Block{a.local_pool, a.remote_pool, a.local_offset + a.size, a.remote_offset + a.size, b.size};
    }
    if (i % 5 == 4) b.size = 0;
    list.push_back(b);
  }
  // The stream byte by byte: where it comes from and where it goes.
  std::vector<const uint8_t*> from;
  std::vector<std::pair<uint64_t, uint64_t>> to;  // export, offset
  for (const Block& b : list) {
    for (uint64_t k = 0; k < b.size; ++k) {
      from.push_back(mem[b.local_pool].data() + b.local_offset + k);
      to.emplace_back(remote[b.remote_pool].export_id, b.remote_offset + k);
    }
  }
  auto table = tcp::BlockTable::over_pools(local, remote, list);
  ASSERT_TRUE(table->over_pools());
  ASSERT_EQ(table->total(), from.size());
  EXPECT_FALSE(table->any_gpu_source());
  for (uint64_t at = 0; at < table->total(); ++at) {
    for (uint64_t n = 1; at + n <= table->total(); n += 1 + n / 4) {
      std::vector<tcp::RemoteBlock> back;
      ASSERT_TRUE(entries_of(*table, at, n, back));
      uint64_t s = at;
      for (const tcp::RemoteBlock& b : back) {
        for (uint64_t k = 0; k < b.size; ++k, ++s) {
          ASSERT_EQ(b.export_id, to[s].first) << "stream byte " << s;
          ASSERT_EQ(b.key, b.export_id * 10) << "stream byte " << s;
          ASSERT_EQ(b.offset + k, to[s].second) << "stream byte " << s;
        }
      }
      ASSERT_EQ(s, at + n);
      core::SegmentList spans;
      table->sources(at, n, spans);
      ASSERT_EQ(spans.total(), n);
      std::vector<struct iovec> iov;
      spans.slice(0, n, iov);
      s = at;
      for (const struct iovec& v : iov) {
        for (size_t k = 0; k < v.iov_len; ++k, ++s) {
          ASSERT_EQ(static_cast<const uint8_t*>(v.iov_base) + k, from[s]) << "stream byte " << s;
        }
      }
      ASSERT_EQ(s, at + n);
    }
  }
  std::string whole;
  EXPECT_LT(table->encode(0, table->total(), whole), table->size()) << "no block was joined to the one before it: the test is wrong";
}

}  // namespace
}  // namespace ferry::hostile
