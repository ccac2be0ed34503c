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
    op->header.type = wire::FrameType::kData;
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

}  // namespace
}  // namespace ferry::tcp
