// Per-transfer path choice: NICs on the memory's NUMA node first, all when
// asked, any live path when none is near; and the scheduler honouring it.
#include "transport/tcp/path_choice.h"

#include <gtest/gtest.h>

#include "core/registry.h"
#include "transport/tcp/chunk_queue.h"

namespace ferry::tcp {
namespace {

TEST(PathChoice, NearestPicksThePathsOnTheMemorysNode) {
  std::vector<int> nodes = {0, 0, 1, 1};  // two NICs per node, as on a two-socket host
  std::vector<bool> alive(4, true);
  EXPECT_EQ(choose_paths(nodes, alive, 0, true), 0b0011u);
  EXPECT_EQ(choose_paths(nodes, alive, 1, true), 0b1100u);
  EXPECT_EQ(choose_paths(nodes, alive, 1, false), 0u) << "all: any path";
  EXPECT_EQ(choose_paths(nodes, alive, -1, true), 0u) << "unknown node: any path";
  EXPECT_EQ(choose_paths(nodes, alive, 2, true), 0u) << "no NIC near: any path";
  alive[2] = alive[3] = false;
  EXPECT_EQ(choose_paths(nodes, alive, 1, true), 0u) << "near paths dead: any path";
  alive[3] = true;
  EXPECT_EQ(choose_paths(nodes, alive, 1, true), 0b1000u);
}

TEST(PathChoice, SchedulerKeepsATransferOnItsPathsUntilTheyDie) {
  std::vector<uint8_t> buf(64 << 10);
  core::Registry registry;
  ASSERT_TRUE(registry.add(buf.data(), buf.size(), platform::PointerKind{}).ok());
  auto make = [&](uint64_t paths) {
    auto op = std::make_shared<OutOp>();
    op->frame = wire::DataChunk{};
    op->source.add(registry.resolve_local(buf.data(), buf.size(), "test").value());
    op->paths = paths;
    return op;
  };
  ChunkQueue q(4096, 64, 3);
  auto near1 = make(0b010);  // only path 1
  auto any = make(0);
  ASSERT_TRUE(q.push(near1));
  ASSERT_TRUE(q.push(any));
  // Path 0 may not carry near1, so it skips to the next transfer.
  auto c0 = q.try_claim(0);
  ASSERT_TRUE(c0.has_value());
  EXPECT_EQ(c0->op, any);
  auto c1 = q.try_claim(1);
  ASSERT_TRUE(c1.has_value());
  EXPECT_EQ(c1->op, near1);
  // Once path 1 dies, near1 may go anywhere.
  q.fail_path(1);
  bool path2_got_near1 = false;
  for (int i = 0; i < 64; ++i) {
    auto c = q.try_claim(2);
    if (!c) break;
    path2_got_near1 = path2_got_near1 || c->op == near1;
  }
  EXPECT_TRUE(path2_got_near1);
}

TEST(PathChoice, PciDistanceFindsTheNicsBehindTheGpusSwitch) {
  // Two PCIe switches under root complex 0, one under root complex 1.
  const std::string sw0 = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
  const std::string sw1 = "/sys/devices/pci0000:00/0000:00:02.0/0000:11:00.0";
  const std::string gpu = sw0 + "/0000:02:00.0/0000:03:00.0";
  const std::string nic_same_switch = sw0 + "/0000:02:01.0/0000:04:00.0";
  const std::string nic_other_switch = sw1 + "/0000:12:00.0/0000:13:00.0";
  const std::string nic_other_root = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:00.0";
  int same = pci_distance(gpu, nic_same_switch);
  int other = pci_distance(gpu, nic_other_switch);
  EXPECT_EQ(same, 4);
  EXPECT_EQ(other, 8);
  EXPECT_EQ(pci_distance(gpu, nic_other_root), 1000);
  EXPECT_EQ(pci_distance(gpu, ""), -1);
  EXPECT_EQ(pci_distance(gpu, gpu), 0);
  // Paths: 0 other root, 1 same switch, 2 other switch, 3 same switch, 4 unknown NIC.
  std::vector<int> d = {1000, same, other, same, -1};
  std::vector<bool> alive(5, true);
  EXPECT_EQ(closest_paths(d, alive), 0b01010u);
  alive[1] = alive[3] = false;  // the near NICs died: next nearest
  EXPECT_EQ(closest_paths(d, alive), 0b00100u);
  EXPECT_EQ(closest_paths({-1, -1}, {true, true}), 0u) << "nothing known: any path";
}

}  // namespace
}  // namespace ferry::tcp
