// The FERRY backend's pure parts against hostile input: the notification
// codec, a peer's memory metadata, the range checks, and the parameters.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "agent_note.h"
#include "backend_params.h"
#include "memory_metadata.h"

namespace ferry::nixl {
namespace {

TEST(AgentNote, RoundTripsBinaryMessagesAndTheFailedFlag) {
  const std::string message("\0\x01\xff\n", 4);
  auto encoded = encode_agent_note({"agent-7", message, true}, 1000);
  ASSERT_TRUE(encoded.ok());
  auto decoded = decode_agent_note(*encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  EXPECT_EQ(decoded->agent, "agent-7");
  EXPECT_EQ(decoded->message, message);
  EXPECT_TRUE(decoded->failed);
}

TEST(AgentNote, RefusesWhatDoesNotFit) {
  EXPECT_FALSE(encode_agent_note({"", "m", false}, 1000).ok());
  EXPECT_FALSE(encode_agent_note({std::string(kMaxAgentName + 1, 'a'), "", false}, 1 << 20).ok());
  EXPECT_TRUE(encode_agent_note({"a", std::string(95, 'x'), false}, 100).ok());
  auto too_long = encode_agent_note({"a", std::string(96, 'x'), false}, 100);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("at most 95"), std::string::npos) << too_long.status().message();
}

TEST(AgentNote, EveryTruncationAndCorruptionOfAHeaderIsDataLoss) {
  const std::string good = encode_agent_note({"abc", "hello", false}, 1000).value();
  for (size_t n = 0; n < kAgentNoteHeader + 3; ++n) {
    auto r = decode_agent_note(good.substr(0, n));
    EXPECT_FALSE(r.ok()) << n;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kDataLoss);
    }
  }
  std::string bad = good;
  bad[0] = 9;  // version
  EXPECT_FALSE(decode_agent_note(bad).ok());
  bad = good;
  bad[1] = 2;  // unknown flag
  EXPECT_FALSE(decode_agent_note(bad).ok());
  bad = good;
  bad[2] = 0;  // empty name
  bad[3] = 0;
  EXPECT_FALSE(decode_agent_note(bad).ok());
  bad = good;
  bad[2] = static_cast<char>(0xff);  // a name past the end
  bad[3] = static_cast<char>(0xff);
  EXPECT_FALSE(decode_agent_note(bad).ok());
}

LocalMemory local_memory(uintptr_t base, size_t length, uint64_t exported_length) {
  Region region;
  region.base = reinterpret_cast<void*>(base);
  region.length = length;
  RemoteDescriptor d;
  d.engine_id = 1;
  d.export_id = 2;
  d.key = 3;
  d.length = exported_length;
  return LocalMemory(region, d);
}

TEST(MemoryMetadata, APeersDataIsCheckedAgainstItsDescriptor) {
  const std::string data = memory_data(local_memory(0x10000, 4096, 4096));
  EXPECT_TRUE(RemoteMemory::make("p", 0x10000, 4096, data).ok());
  EXPECT_TRUE(RemoteMemory::make("p", 0x10000, 100, data).ok());
  // More bytes than the export reaches: refused, though the owner would
  // refuse every access past it anyway.
  EXPECT_FALSE(RemoteMemory::make("p", 0x10000, 4097, data).ok());
  // Metadata of another address.
  EXPECT_FALSE(RemoteMemory::make("p", 0x20000, 4096, data).ok());
  EXPECT_FALSE(RemoteMemory::make("p", 0x10000, 0, data).ok());
  for (size_t n = 0; n < data.size(); ++n) EXPECT_FALSE(RemoteMemory::make("p", 0x10000, 1, data.substr(0, n)).ok()) << n;
  std::string bad = data;
  bad[0] = 7;
  EXPECT_FALSE(RemoteMemory::make("p", 0x10000, 1, bad).ok());
}

TEST(MemoryMetadata, RangesAreCheckedWithoutOverflow) {
  const uintptr_t max = std::numeric_limits<uintptr_t>::max();
  EXPECT_EQ(offset_within(1000, 100, 1000, 100, "x").value(), 0u);
  EXPECT_EQ(offset_within(1000, 100, 1099, 1, "x").value(), 99u);
  EXPECT_EQ(offset_within(1000, 100, 1100, 0, "x").value(), 100u);
  EXPECT_FALSE(offset_within(1000, 100, 1099, 2, "x").ok());
  EXPECT_FALSE(offset_within(1000, 100, 999, 1, "x").ok());
  EXPECT_FALSE(offset_within(1000, 100, 1050, max, "x").ok());
  EXPECT_FALSE(offset_within(1000, 100, max, 2, "x").ok());
  auto r = offset_within(1000, 100, 1099, 2, "remote descriptor 3");
  EXPECT_NE(r.status().message().find("remote descriptor 3"), std::string::npos);
}

TEST(BackendParams, MapToFerryOptionsAndRefuseUnknownKeys) {
  auto s = settings_from_params({{"streams", "3"}, {"transport", "tcp"}, {"nics", "eth1"},
                                 {"peer_timeout_ms", "1500"}, {"failed_notif_prefix", "F:"}});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->options.streams, 3);
  EXPECT_EQ(s->options.transport, TransportChoice::kTcp);
  EXPECT_EQ(s->options.nics, "eth1");
  EXPECT_EQ(s->options.peer_timeout.count(), 1500);
  EXPECT_EQ(s->failed_prefix, "F:");
  EXPECT_TRUE(s->options.local_same_process);
  EXPECT_TRUE(settings_from_params(default_backend_params()).ok());
  auto unknown = settings_from_params({{"stream", "3"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("\"stream\""), std::string::npos);
  EXPECT_FALSE(settings_from_params({{"streams", "0"}}).ok());
  EXPECT_FALSE(settings_from_params({{"streams", "3x"}}).ok());
  EXPECT_FALSE(settings_from_params({{"transport", "udp"}}).ok());
  EXPECT_FALSE(settings_from_params({{"peer_timeout_ms", "-1"}}).ok());
}

}  // namespace
}  // namespace ferry::nixl
