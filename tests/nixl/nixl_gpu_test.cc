// The FERRY NIXL plugin on GPU memory: two nixlAgents of this process, one
// on GPU 0 and one on GPU 1, WRITE and READ between VRAM descriptor lists
// (1, 7 and 256 descriptors, odd sizes and offsets) with notifications,
// every byte of both buffers checked after each (skips without two GPUs);
// and one agent moving bytes between its own DRAM and VRAM on GPU 0, itself
// as the remote (skips without a GPU). ctest runs it over the local
// transport and over TCP.
#include <gtest/gtest.h>
#include <nixl.h>

#include <algorithm>
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

// One agent, its own remote (supportsLocal): host memory and two buffers on
// GPU 0, WRITE and READ between each kind, a notification to itself after
// each, every byte of all three checked.
class NixlGpuWithinOneAgent : public ::testing::Test {
 protected:
  static constexpr size_t kSize = (8u << 20) + 4099;

  void SetUp() override {
    if (gpu::gpu_count() < 1) GTEST_SKIP() << "needs a GPU";
    host_.resize(kSize);
    for (int i = 0; i < 2; ++i) {
      vram_[i] = gpu::gpu_alloc(0, kSize);
      ASSERT_NE(vram_[i].ptr, nullptr);
    }
    image_[0] = gpu::pattern(20, kSize);
    image_[1] = gpu::pattern(21, kSize);
    image_[2] = gpu::pattern(22, kSize);
    host_ = image_[0];
    ASSERT_TRUE(gpu::copy_to(vram_[0].ptr, image_[1].data(), kSize));
    ASSERT_TRUE(gpu::copy_to(vram_[1].ptr, image_[2].data(), kSize));
    nixlBackendH* backend = nullptr;
    ASSERT_EQ(agent_.createBackend("FERRY", {}, backend), NIXL_SUCCESS);
    nixl_reg_dlist_t dram(DRAM_SEG), vram(VRAM_SEG);
    dram.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(host_.data()), kSize, 0, ""));
    for (auto& b : vram_) vram.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(b.ptr), kSize, 0, ""));
    ASSERT_EQ(agent_.registerMem(dram), NIXL_SUCCESS);
    ASSERT_EQ(agent_.registerMem(vram), NIXL_SUCCESS);
  }

  // Memory 0 is the host buffer, 1 and 2 the GPU buffers.
  uint8_t* base(int memory) { return memory == 0 ? host_.data() : vram_[memory - 1].ptr; }
  nixl_mem_t kind(int memory) { return memory == 0 ? DRAM_SEG : VRAM_SEG; }

  void transfer(nixl_xfer_op_t op, int from, int to, const std::vector<Range>& ranges, const std::string& note) {
    nixl_xfer_dlist_t local(kind(from)), remote(kind(to));
    for (const Range& r : ranges) {
      local.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(base(from)) + r.local, r.size, 0));
      remote.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(base(to)) + r.remote, r.size, 0));
    }
    nixl_opt_args_t extra;
    extra.notif = note;
    nixlXferReqH* request = nullptr;
    ASSERT_EQ(agent_.createXferReq(op, local, remote, "self", request, &extra), NIXL_SUCCESS);
    nixl_status_t s = agent_.postXferReq(request);
    nixl_notifs_t notifs;
    const auto deadline = Clock::now() + 60s;
    while ((s == NIXL_IN_PROG || notifs.empty()) && s >= 0 && Clock::now() < deadline) {
      if (s == NIXL_IN_PROG) s = agent_.getXferStatus(request);
      if (notifs.empty()) {
        ASSERT_EQ(agent_.getNotifs(notifs), NIXL_SUCCESS);
      }
    }
    ASSERT_EQ(s, NIXL_SUCCESS) << note;
    ASSERT_EQ(notifs["self"].size(), 1u) << note;
    EXPECT_EQ(notifs["self"][0], note);
    for (const Range& r : ranges) {
      if (op == NIXL_WRITE) {
        std::copy_n(image_[from].data() + r.local, r.size, image_[to].data() + r.remote);
      } else {
        std::copy_n(image_[to].data() + r.remote, r.size, image_[from].data() + r.local);
      }
    }
    for (int m = 0; m < 3; ++m) {
      std::vector<uint8_t> got(kSize);
      ASSERT_TRUE(gpu::copy_to(got.data(), base(m), kSize));
      EXPECT_TRUE(got == image_[m]) << "memory " << m << "'s bytes differ after " << note;
    }
    EXPECT_EQ(agent_.releaseXferReq(request), NIXL_SUCCESS);
  }

  std::vector<uint8_t> host_;
  gpu::GpuBuffer vram_[2];
  std::vector<uint8_t> image_[3];
  // Last, so that it goes first, before the memory it registered.
  nixlAgent agent_{"self", nixlAgentConfig(false)};
};

TEST_F(NixlGpuWithinOneAgent, WritesAndReadsBetweenItsOwnHostAndGpuMemory) {
  const auto ranges = [](uint32_t seed) { return ferry::test::scattered(64, 64 * 1024, seed, kSize); };
  transfer(NIXL_WRITE, 0, 1, ranges(1), "host to gpu");
  transfer(NIXL_WRITE, 1, 2, ranges(2), "gpu to gpu");
  transfer(NIXL_WRITE, 2, 0, {{5, 3, (8u << 20) + 1}}, "gpu to host, big");
  transfer(NIXL_READ, 0, 2, ranges(3), "host reads gpu");
  transfer(NIXL_READ, 1, 0, ranges(4), "gpu reads host");
  transfer(NIXL_READ, 2, 1, ranges(5), "gpu reads gpu");
}

}  // namespace
