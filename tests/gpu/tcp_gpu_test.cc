// GPU memory over TCP between two processes (FERRY_TRANSPORT=tcp over
// loopback): every operation GPU->GPU, GPU->host and host->GPU, sizes from
// 1 byte to 1 GiB with odd ones and odd offsets, random bytes verified by
// hash on both ends; a peer killed mid-transfer fails the transfer in bounded
// time, leaves no staging memory behind and the engine keeps serving.
// Skips without a GPU. This process uses GPU 0, the peer GPU 1 when there is
// one (else GPU 0 too).
#include <gtest/gtest.h>

#include <cinttypes>
#include <thread>

#include "gpu/staging_kernel.h"
#include "gpu/tcp_gpu_util.h"
#include "integration/peer_process.h"
#include "transport/tcp/staging_copier.h"
#include "transport/tcp/staging_ring.h"

namespace ferry::test {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kPeerBytes = (1ull << 30) + (64 << 20);
constexpr uint64_t kLocalBytes = (1ull << 30) + (64 << 20);

std::string hex(uint64_t h) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
  return buf;
}

// One peer process with memory of one kind, and a connection to it.
struct Peer {
  std::unique_ptr<PeerProcess> process;
  std::shared_ptr<Connection> conn;
  RemoteDescriptor desc;
};

class TcpGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gpus_ = gpu_count();
    if (gpus_ == 0) return;
    Options o;
    o.transport = TransportChoice::kTcp;
    o.streams = 4;
    engine_ = Engine::create(o).value().release();
    ctl_ = new std::vector<uint8_t>(1 << 20);
    (void)engine_->reg(ctl_->data(), ctl_->size());
    gpu_mem_ = new Memory(0, kLocalBytes);
    host_mem_ = new Memory(-1, kLocalBytes);
    (void)engine_->reg(gpu_mem_->data(), gpu_mem_->size());
    (void)engine_->reg(host_mem_->data(), host_mem_->size());
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete gpu_mem_;
    delete host_mem_;
    delete ctl_;
    engine_ = nullptr;
  }
  void SetUp() override {
    if (gpus_ == 0) GTEST_SKIP() << "no GPU on this host";
    ASSERT_TRUE(gpu_mem_->ok()) << "cannot allocate GPU memory";
  }

  static int peer_gpu() { return gpus_ > 1 ? 1 : 0; }

  Peer start_peer(bool gpu) {
    Peer p;
    p.process = std::make_unique<PeerProcess>(
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--gpu", std::to_string(gpu ? peer_gpu() : -1), "--size",
                                 std::to_string(kPeerBytes)},
        std::vector<std::string>{"FERRY_TRANSPORT=tcp", "NCCL_NVLS_ENABLE=0"}, 60s);
    EXPECT_FALSE(p.process->address().empty()) << "peer did not start: " << p.process->line();
    auto c = engine_->connect(p.process->address(), after(20s));
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (!c.ok()) return p;
    p.conn = c.value();
    EXPECT_EQ(p.conn->transport_name(), "tcp");
    auto n = p.conn->recv(ctl_->data(), ctl_->size(), after(30s));
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    if (n.ok()) p.desc = RemoteDescriptor::parse(std::string((char*)ctl_->data(), n.value())).value();
    return p;
  }

  // Sends a command and returns the peer's reply.
  static std::string command(Connection& c, const std::string& text) {
    std::memcpy(ctl_->data(), text.data(), text.size());
    Status s = c.send(ctl_->data(), text.size(), after(60s));
    if (!s.ok()) return "send failed: " + s.to_string();
    auto n = c.recv(ctl_->data(), ctl_->size(), after(180s));
    if (!n.ok()) return "recv failed: " + n.status().to_string();
    return std::string((char*)ctl_->data(), n.value());
  }

  static Memory& local(bool gpu) { return gpu ? *gpu_mem_ : *host_mem_; }

  // Fills local [off, off+n) with random bytes; returns their hash.
  static uint64_t fill_local(Memory& m, size_t off, size_t n, uint64_t seed) {
    std::vector<uint8_t> tmp(n);
    fill_random(tmp.data(), n, seed);
    m.put(off, tmp.data(), n);
    return fnv1a(tmp.data(), n);
  }

  // Every operation, both directions, between local memory of one kind and a
  // peer's of another, for `sizes`: at odd offsets on both sides, or at
  // offsets that are multiples of 16 (`aligned`), where staging copies may
  // run as the copy kernel.
  void every_operation(bool local_gpu, bool peer_gpu_mem, const std::vector<size_t>& sizes, bool aligned = false) {
    Peer p = start_peer(peer_gpu_mem);
    ASSERT_TRUE(p.conn);
    Connection& c = *p.conn;
    Memory& m = local(local_gpu);
    uint64_t seed = 100;
    for (size_t n : sizes) {
      SCOPED_TRACE("size " + std::to_string(n) + (local_gpu ? " local GPU" : " local host") +
                   (peer_gpu_mem ? " peer GPU" : " peer host"));
      size_t lo = aligned ? 16 * (n % 61) : 3 + n % 61, po = aligned ? 4096 + 16 * (n % 97) : 5 + n % 97;
      // send: local -> peer
      uint64_t h = fill_local(m, lo, n, ++seed);
      {
        std::string cmd = "RECV " + std::to_string(po) + " " + std::to_string(n + 1);
        std::memcpy(ctl_->data(), cmd.data(), cmd.size());
        ASSERT_TRUE(c.send(ctl_->data(), cmd.size(), after(30s)).ok());
        ASSERT_TRUE(c.send(m.data() + lo, n, after(120s)).ok());
        auto r = c.recv(ctl_->data(), ctl_->size(), after(120s));
        ASSERT_TRUE(r.ok());
        ASSERT_EQ(std::string((char*)ctl_->data(), r.value()), "ok " + std::to_string(n));
      }
      ASSERT_EQ(command(c, "HASH " + std::to_string(po) + " " + std::to_string(n)), hex(h)) << "send";
      // send: peer -> local
      ASSERT_EQ(command(c, "FILL " + std::to_string(++seed) + " " + std::to_string(po) + " " + std::to_string(n)),
                "ok");
      std::vector<uint8_t> expect(n);
      fill_random(expect.data(), n, seed);
      {
        Transfer r = c.recv_async(m.data() + lo, n);
        std::string cmd = "SEND " + std::to_string(po) + " " + std::to_string(n);
        std::memcpy(ctl_->data(), cmd.data(), cmd.size());
        ASSERT_TRUE(c.send(ctl_->data(), cmd.size(), after(30s)).ok());
        ASSERT_TRUE(r.wait(after(120s)).ok()) << r.status().to_string();
        ASSERT_EQ(r.bytes(), n);
        auto ok = c.recv(ctl_->data(), ctl_->size(), after(60s));
        ASSERT_TRUE(ok.ok());
      }
      ASSERT_EQ(hash_of(m, lo, n), fnv1a(expect.data(), n)) << "recv";
      // write with a notification, then read it back
      h = fill_local(m, lo, n, ++seed);
      ASSERT_TRUE(c.write(m.data() + lo, n, p.desc, po, "w" + std::to_string(n), after(120s)).ok());
      ASSERT_EQ(command(c, "NOTE"), "w" + std::to_string(n));
      ASSERT_EQ(command(c, "HASH " + std::to_string(po) + " " + std::to_string(n)), hex(h)) << "write";
      size_t ro = lo + (aligned ? 16 : 1);
      fill_local(m, ro, n, 7);  // overwritten by the read
      ASSERT_TRUE(c.read(m.data() + ro, n, p.desc, po, after(120s)).ok());
      ASSERT_EQ(hash_of(m, ro, n), h) << "read";
    }
    EXPECT_EQ(command(c, "QUIT").rfind("recv failed", 0), 0u);  // the peer hangs up
    EXPECT_EQ(p.process->wait_exit(20s), 0);
  }

  static int gpus_;
  static Engine* engine_;
  static std::vector<uint8_t>* ctl_;
  static Memory* gpu_mem_;
  static Memory* host_mem_;
};

int TcpGpu::gpus_ = 0;
Engine* TcpGpu::engine_ = nullptr;
std::vector<uint8_t>* TcpGpu::ctl_ = nullptr;
Memory* TcpGpu::gpu_mem_ = nullptr;
Memory* TcpGpu::host_mem_ = nullptr;

const std::vector<size_t> kSizes = {1, 4095, 65536, 65537, (1 << 20) + 3, (16 << 20) + 1, (64 << 20) + 7};

TEST_F(TcpGpu, GpuToGpuEveryOperation) { every_operation(true, true, kSizes); }
TEST_F(TcpGpu, GpuToHostEveryOperation) { every_operation(true, false, kSizes); }
TEST_F(TcpGpu, HostToGpuEveryOperation) { every_operation(false, true, kSizes); }
TEST_F(TcpGpu, GpuToGpuOneGiB) { every_operation(true, true, {size_t{1} << 30}); }

// Messages small enough for the control stream, whose bytes pass through
// ordinary host memory, at aligned offsets and in multiples of 16 bytes: the
// sizes the copy kernel would take (it once did, and faulted on GPU memory).
const std::vector<size_t> kAlignedSizes = {16, 4096, 65536, (1 << 20) + 16};

TEST_F(TcpGpu, AlignedGpuToGpuEveryOperation) { every_operation(true, true, kAlignedSizes, true); }
TEST_F(TcpGpu, AlignedGpuToHostEveryOperation) { every_operation(true, false, kAlignedSizes, true); }
TEST_F(TcpGpu, AlignedHostToGpuEveryOperation) { every_operation(false, true, kAlignedSizes, true); }

TEST_F(TcpGpu, VectorFormsMixHostAndGpuParts) {
  Peer p = start_peer(true);
  ASSERT_TRUE(p.conn);
  Connection& c = *p.conn;
  // sendv from GPU, host, GPU parts into a peer recvv over three GPU parts.
  std::vector<ConstBuffer> parts = {
      {gpu_mem_->data() + 1, 100001}, {host_mem_->data() + 3, 7}, {gpu_mem_->data() + (8 << 20), 3 << 20}};
  std::vector<uint8_t> all;
  uint64_t seed = 9;
  for (auto& b : parts) {
    Memory& m = b.data >= host_mem_->data() && b.data < host_mem_->data() + host_mem_->size() ? *host_mem_ : *gpu_mem_;
    std::vector<uint8_t> tmp(b.size);
    fill_random(tmp.data(), b.size, ++seed);
    m.put((const uint8_t*)b.data - m.data(), tmp.data(), b.size);
    all.insert(all.end(), tmp.begin(), tmp.end());
  }
  size_t total = all.size();
  std::string cmd = "RECVV 11 5000 70000 1 90000 " + std::to_string(total);
  std::memcpy(ctl_->data(), cmd.data(), cmd.size());
  ASSERT_TRUE(c.send(ctl_->data(), cmd.size(), after(30s)).ok());
  ASSERT_TRUE(c.sendv(parts, after(60s)).ok());
  auto r = c.recv(ctl_->data(), ctl_->size(), after(60s));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(std::string((char*)ctl_->data(), r.value()), "ok " + std::to_string(total));
  ASSERT_EQ(command(c, "HASH 11 5000"), hex(fnv1a(all.data(), 5000)));
  ASSERT_EQ(command(c, "HASH 70000 1"), hex(fnv1a(all.data() + 5000, 1)));
  ASSERT_EQ(command(c, "HASH 90000 " + std::to_string(total - 5001)), hex(fnv1a(all.data() + 5001, total - 5001)));
  // writev with a trailing notification, readv into GPU and host.
  std::vector<WriteItem> w = {{gpu_mem_->data() + 1, 100001, p.desc, 1 << 20},
                              {host_mem_->data() + 3, 7, p.desc, 3 << 20}};
  ASSERT_TRUE(c.writev_async(w, "both").wait(after(60s)).ok());
  ASSERT_EQ(command(c, "NOTE"), "both");
  std::vector<ReadItem> rd = {{host_mem_->data() + (32 << 20), 100001, p.desc, 1 << 20},
                              {gpu_mem_->data() + (32 << 20), 7, p.desc, 3 << 20}};
  ASSERT_TRUE(c.readv_async(rd).wait(after(60s)).ok());
  EXPECT_EQ(hash_of(*host_mem_, 32 << 20, 100001), fnv1a(all.data(), 100001));
  EXPECT_EQ(hash_of(*gpu_mem_, 32 << 20, 7), fnv1a(all.data() + 100001, 7));
  ASSERT_TRUE(c.notify("done", after(10s)).ok());
  EXPECT_EQ(command(c, "NOTE"), "done");
  command(c, "QUIT");
  EXPECT_EQ(p.process->wait_exit(20s), 0);
}

TEST_F(TcpGpu, PeerKilledMidTransferLeavesNothingStuckOrLeaked) {
  for (bool we_send : {true, false}) {
    SCOPED_TRACE(we_send ? "we send" : "we receive");
    Peer p = start_peer(true);
    ASSERT_TRUE(p.conn);
    Connection& c = *p.conn;
    const size_t n = size_t{1} << 30;
    Transfer t;
    std::string cmd = we_send ? "RECV 0 " + std::to_string(n) : "SEND 0 " + std::to_string(n);
    if (!we_send) t = c.recv_async(gpu_mem_->data(), n);
    std::memcpy(ctl_->data(), cmd.data(), cmd.size());
    ASSERT_TRUE(c.send(ctl_->data(), cmd.size(), after(30s)).ok());
    if (we_send) t = c.send_async(gpu_mem_->data(), n);
    // Kill the peer once bytes are moving (staging in use), or after 2 s.
    auto until = Clock::now() + 2s;
    while (tcp::staging_bytes_allocated() == 0 && Clock::now() < until) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(20ms);
    p.process->signal(SIGKILL);
    Status s = t.wait(after(15s));
    EXPECT_FALSE(s.ok()) << "the transfer cannot succeed once the peer is dead";
    EXPECT_NE(s.code(), Code::kDeadlineExceeded) << "the transfer is stuck: " << s.to_string();
    EXPECT_FALSE(c.health().ok());
    auto deadline = Clock::now() + 10s;
    while (tcp::staging_bytes_allocated() != 0 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(tcp::staging_bytes_allocated(), 0u) << "pinned staging memory left behind";
    p.conn->close();
    p.process->wait_exit(5s);
  }
  // The engine still serves.
  every_operation(true, true, {(1 << 20) + 1});
  EXPECT_EQ(tcp::staging_bytes_allocated(), 0u);
}

// The CUDA copier's fences: a wait returns only once the copies before its
// fence have ended (the bytes read back are the ones copied, not what the
// memory held before), done() agrees, and earlier tickets are done when a
// later one is. Copies through the kernel (aligned) and the copy engines
// (odd sizes and offsets), both directions.
TEST(CudaCopier, AWaitReturnsOnlyOnceItsCopiesEnded) {
  if (gpu_count() == 0) GTEST_SKIP() << "no GPU on this host";
  constexpr size_t kBytes = (64u << 20) + 64;
  Memory dev(0, kBytes);
  ASSERT_TRUE(dev.ok());
  auto copier = tcp::make_cuda_copier(std::make_shared<platform::StagingKernels>());
  auto in = copier->alloc_host(0, kBytes), out = copier->alloc_host(0, kBytes);
  ASSERT_TRUE(in.ok() && out.ok());
  auto* src = static_cast<uint8_t*>(in.value());
  auto* dst = static_cast<uint8_t*>(out.value());
  const std::vector<std::pair<size_t, size_t>> cases = {{64u << 20, 0}, {(16u << 20) + 7, 3},  {4096, 16},
                                                        {1, 5},         {(1u << 20) + 16, 48}, {64u << 20, 64}};
  uint64_t seed = 11, previous = 0;
  for (auto [n, off] : cases) {
    SCOPED_TRACE("copy of " + std::to_string(n) + " bytes at offset " + std::to_string(off));
    fill_random(src + off, n, ++seed);
    std::memset(dst + off, 0, n);
    ASSERT_TRUE(copier->copy(0, dev.data() + off, src + off, n).ok());  // host -> device
    auto up = copier->fence();
    ASSERT_TRUE(up.ok()) << up.status().to_string();
    ASSERT_TRUE(copier->copy(0, dst + off, dev.data() + off, n).ok());  // device -> host, behind it
    auto down = copier->fence();
    ASSERT_TRUE(down.ok()) << down.status().to_string();
    EXPECT_GT(up.value(), previous);
    EXPECT_GT(down.value(), up.value());
    previous = down.value();
    ASSERT_TRUE(copier->wait(down.value()).ok());
    EXPECT_EQ(fnv1a(dst + off, n), fnv1a(src + off, n)) << "the wait returned before its copies ended";
    auto d = copier->done(up.value());
    ASSERT_TRUE(d.ok());
    EXPECT_TRUE(d.value()) << "an earlier ticket is not done once a later one is";
  }
  // Many small fences queued at once and only the last waited for: every earlier one is done.
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(copier->copy(0, dst + i * 4096, dev.data() + i * 4096, 4096).ok());
    auto t = copier->fence();
    ASSERT_TRUE(t.ok());
    tickets.push_back(t.value());
  }
  ASSERT_TRUE(copier->wait(tickets.back()).ok());
  for (uint64_t t : tickets) {
    auto d = copier->done(t);
    ASSERT_TRUE(d.ok());
    EXPECT_TRUE(d.value());
  }
  copier->free_host(src, kBytes);
  copier->free_host(dst, kBytes);
}

}  // namespace
}  // namespace ferry::test
