// The FERRY NIXL plugin on GPU memory: two nixlAgents of this process, one
// on GPU 0 and one on GPU 1, WRITE and READ between VRAM descriptor lists
// (1, 7 and 256 descriptors, odd sizes and offsets) with notifications,
// every byte of both buffers checked after each. ctest runs it over the
// local transport and over TCP. Skips without two GPUs.
#include <gtest/gtest.h>
#include <nixl.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_memory.h"
#include "nixl/nixl_test_data.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace gpu = ferry::testing;

constexpr size_t kBytes = (64u << 20) + (1u << 20);

using ferry::test::Range;

// GPU 0's buffer is the local side, GPU 1's the remote.
std::vector<Range> scattered(size_t count, size_t max_size, uint32_t seed) {
  return ferry::test::scattered(count, max_size, seed, kBytes);
}

class NixlGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::gpu_count() < 2) GTEST_SKIP() << "needs two GPUs";
    buf_[0] = gpu::gpu_alloc(0, kBytes);
    buf_[1] = gpu::gpu_alloc(1, kBytes);
    ASSERT_NE(buf_[0].ptr, nullptr);
    ASSERT_NE(buf_[1].ptr, nullptr);
    for (int i = 0; i < 2; ++i) {
      image_[i] = gpu::pattern(10 + i, kBytes);
      ASSERT_TRUE(gpu::copy_to(buf_[i].ptr, image_[i].data(), kBytes));
      nixlBackendH* backend = nullptr;
      ASSERT_EQ(agent_[i].createBackend("FERRY", {}, backend), NIXL_SUCCESS);
      nixl_reg_dlist_t reg(VRAM_SEG);
      reg.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(buf_[i].ptr), kBytes, i, ""));
      ASSERT_EQ(agent_[i].registerMem(reg), NIXL_SUCCESS);
    }
    std::string md, name;
    ASSERT_EQ(agent_[1].getLocalMD(md), NIXL_SUCCESS);
    ASSERT_EQ(agent_[0].loadRemoteMD(md, name), NIXL_SUCCESS);
    ASSERT_EQ(name, "gpu1");
  }

  // Agent 0 moves `ranges` (WRITE: GPU 0 -> GPU 1; READ: GPU 1 -> GPU 0)
  // with a notification; then every byte of both buffers is checked.
  void transfer(nixl_xfer_op_t op, const std::vector<Range>& ranges, const std::string& note) {
    nixl_xfer_dlist_t local(VRAM_SEG), remote(VRAM_SEG);
    for (const Range& r : ranges) {
      local.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(buf_[0].ptr) + r.local, r.size, 0));
      remote.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(buf_[1].ptr) + r.remote, r.size, 1));
    }
    nixl_opt_args_t extra;
    extra.notif = note;
    nixlXferReqH* request = nullptr;
    ASSERT_EQ(agent_[0].createXferReq(op, local, remote, "gpu1", request, &extra), NIXL_SUCCESS);
    nixl_status_t s = agent_[0].postXferReq(request);
    const auto deadline = Clock::now() + 60s;
    while (s == NIXL_IN_PROG && Clock::now() < deadline) s = agent_[0].getXferStatus(request);
    ASSERT_EQ(s, NIXL_SUCCESS);
    for (const Range& r : ranges) {
      if (op == NIXL_WRITE) {
        std::copy_n(image_[0].data() + r.local, r.size, image_[1].data() + r.remote);
      } else {
        std::copy_n(image_[1].data() + r.remote, r.size, image_[0].data() + r.local);
      }
    }
    nixl_notifs_t notifs;
    const auto until = Clock::now() + 20s;
    while (notifs.empty() && Clock::now() < until) {
      ASSERT_EQ(agent_[1].getNotifs(notifs), NIXL_SUCCESS);
    }
    ASSERT_EQ(notifs["gpu0"].size(), 1u);
    EXPECT_EQ(notifs["gpu0"][0], note);
    for (int i = 0; i < 2; ++i) {
      std::vector<uint8_t> got(kBytes);
      ASSERT_TRUE(gpu::copy_to(got.data(), buf_[i].ptr, kBytes));
      EXPECT_TRUE(got == image_[i]) << "GPU " << i << "'s bytes differ after " << note;
    }
    EXPECT_EQ(agent_[0].releaseXferReq(request), NIXL_SUCCESS);
  }

  nixlAgent agent_[2] = {nixlAgent("gpu0", nixlAgentConfig(false)), nixlAgent("gpu1", nixlAgentConfig(false))};
  gpu::GpuBuffer buf_[2];
  std::vector<uint8_t> image_[2];
};

TEST_F(NixlGpu, WritesVramDescriptorLists) {
  transfer(NIXL_WRITE, {{1, 5, 1}}, "w1");
  transfer(NIXL_WRITE, {{3, 7, (64u << 20) + 3}}, "w64MiB");
  transfer(NIXL_WRITE, scattered(7, 1u << 20, 7), "w7");
  transfer(NIXL_WRITE, scattered(256, 16 * 1024, 256), "w256");
}

TEST_F(NixlGpu, ReadsVramDescriptorLists) {
  transfer(NIXL_READ, {{2, 9, 1}}, "r1");
  transfer(NIXL_READ, {{5, 1, (64u << 20) + 1}}, "r64MiB");
  transfer(NIXL_READ, scattered(7, 1u << 20, 8), "r7");
  transfer(NIXL_READ, scattered(256, 16 * 1024, 257), "r256");
}

}  // namespace
