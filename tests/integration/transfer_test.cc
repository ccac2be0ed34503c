// Data moves correctly between two processes over loopback TCP: every
// operation, odd sizes and unaligned offsets, random bytes verified end to
// end, many transfers in flight both ways, notifications after their data.
#include <cinttypes>
#include <random>

#include "integration/fixture.h"

namespace ferry::test {
namespace {

const std::vector<uint64_t> kSizes = {1, 7, 4095, 4096, (1u << 20) + 3, 64u << 20};
const std::vector<std::pair<uint64_t, uint64_t>> kOffsets = {{0, 0}, {1, 5}, {3, 4093}, {13, 1}};

TEST(Transfer, SendRecvEverySizeAndOffset) {
  PeerProcess peer({"--listen", "127.0.0.1:0", "--mode", "echo"});
  ASSERT_FALSE(peer.address().empty()) << "peer said: " << peer.line();
  const size_t half = kMaxMessage + 64;
  LocalSide me(2 * half);
  auto conn = connect_to(*me.engine, peer);
  ASSERT_TRUE(conn);
  uint8_t* src = me.at(0);
  uint8_t* dst = me.at(half);
  for (uint64_t size : kSizes) {
    for (auto [soff, doff] : kOffsets) {
      fill_random(src + soff, size, size * 131 + soff);
      std::memset(dst, 0xAB, half);
      // The receive is larger than the message: it must report the message size.
      Transfer r = conn->recv_async(dst + doff, size + 5);
      ASSERT_OK(conn->send(src + soff, size, after(30s)));
      ASSERT_OK(r.wait(after(30s)));
      ASSERT_EQ(r.bytes(), size);
      ASSERT_EQ(std::memcmp(dst + doff, src + soff, size), 0) << "size " << size << " offsets " << soff << "," << doff;
      // Nothing written outside the message.
      for (uint64_t i = 0; i < doff; ++i) ASSERT_EQ(dst[i], 0xAB);
      for (uint64_t i = doff + size; i < doff + size + 5; ++i) ASSERT_EQ(dst[i], 0xAB);
    }
  }
  std::memcpy(src, "QUIT", 4);
  ASSERT_OK(conn->send(src, 4, after(10s)));
  EXPECT_EQ(peer.wait_exit(10s), 0);
}

TEST(Transfer, SendvRecvvScatterGather) {
  PeerProcess peer({"--listen", "127.0.0.1:0", "--mode", "echo"});
  ASSERT_FALSE(peer.address().empty());
  LocalSide me(8 << 20);
  auto conn = connect_to(*me.engine, peer);
  ASSERT_TRUE(conn);
  // Four odd parts scattered over the buffer, received into three others.
  std::vector<ConstBuffer> out = {
      {me.at(1), 3}, {me.at(100), 4093}, {me.at(10000), (1 << 20) + 1}, {me.at(3 << 20), 17}};
  std::vector<uint8_t> expect;
  for (size_t i = 0; i < out.size(); ++i) {
    auto* p = const_cast<uint8_t*>(static_cast<const uint8_t*>(out[i].data));
    fill_random(p, out[i].size, 77 + i);
    expect.insert(expect.end(), p, p + out[i].size);
  }
  std::vector<MutableBuffer> in = {
      {me.at(4 << 20), (1 << 20) + 50}, {me.at(6 << 20) + 3, 4000}, {me.at(7 << 20) + 1, 64}};
  Transfer r = conn->recvv_async(in);
  ASSERT_OK(conn->sendv(out, after(30s)));
  ASSERT_OK(r.wait(after(30s)));
  ASSERT_EQ(r.bytes(), expect.size());
  std::vector<uint8_t> got;
  for (auto& b : in) got.insert(got.end(), static_cast<uint8_t*>(b.data), static_cast<uint8_t*>(b.data) + b.size);
  got.resize(expect.size());
  EXPECT_EQ(got, expect);
}

TEST(Transfer, WriteAndReadEverySizeAndOffset) {
  const uint64_t remote_size = kMaxMessage;
  PeerProcess peer(
      {"--listen", "127.0.0.1:0", "--mode", "target", "--size", std::to_string(remote_size), "--seed", "7"});
  ASSERT_FALSE(peer.address().empty());
  const size_t half = kMaxMessage + 64;
  LocalSide me(2 * half + (1 << 20));
  auto conn = connect_to(*me.engine, peer);
  ASSERT_TRUE(conn);
  uint8_t* src = me.at(0);
  uint8_t* dst = me.at(half);
  uint8_t* ctl = me.at(2 * half);
  auto desc = recv_descriptor(*conn, ctl);
  ASSERT_TRUE(desc.ok()) << desc.status().to_string();
  ASSERT_EQ(desc->length, remote_size);
  // What the peer's memory holds, tracked here.
  std::vector<uint8_t> mirror(remote_size);
  fill_random(mirror.data(), remote_size, 7);

  for (uint64_t size : kSizes) {
    for (auto [loff, roff] : kOffsets) {
      if (roff + size > remote_size) roff = remote_size - size;
      // read: the peer's current bytes arrive here.
      ASSERT_OK(conn->read(dst + loff, size, *desc, roff, after(30s)));
      ASSERT_EQ(std::memcmp(dst + loff, mirror.data() + roff, size), 0) << "read size " << size << " at " << roff;
      // write: new random bytes land there...
      fill_random(src + loff, size, size * 7 + loff + roff);
      ASSERT_OK(conn->write(src + loff, size, *desc, roff, {}, after(30s)));
      std::memcpy(mirror.data() + roff, src + loff, size);
      // ...as the peer itself confirms, by sending its memory back.
      std::string cmd = "DUMP " + std::to_string(roff) + " " + std::to_string(size);
      std::memcpy(ctl, cmd.data(), cmd.size());
      ASSERT_OK(conn->send(ctl, cmd.size(), after(10s)));
      auto got = conn->recv(dst, half, after(30s));
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      ASSERT_EQ(got.value(), size);
      ASSERT_EQ(std::memcmp(dst, src + loff, size), 0) << "write size " << size << " at " << roff;
    }
  }
}

TEST(Transfer, VectorWriteAndReadWithTrailingNotification) {
  PeerProcess peer({"--listen", "127.0.0.1:0", "--mode", "target", "--size", std::to_string(8 << 20), "--seed", "9"});
  ASSERT_FALSE(peer.address().empty());
  LocalSide me(24 << 20);
  auto conn = connect_to(*me.engine, peer);
  ASSERT_TRUE(conn);
  uint8_t* ctl = me.at(20 << 20);
  auto got = recv_descriptor(*conn, ctl);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  RemoteDescriptor desc = got.value();
  // Three writes of mixed sizes; the notification names the largest range, and
  // the peer checks that range's hash the moment the notification arrives.
  std::vector<WriteItem> items = {
      {me.at(1), 5, desc, 3}, {me.at(4096), (3 << 20) + 11, desc, 1 << 20}, {me.at(7 << 20), 70000, desc, 5 << 20}};
  for (size_t i = 0; i < items.size(); ++i)
    fill_random(const_cast<uint8_t*>(static_cast<const uint8_t*>(items[i].local)), items[i].size, 100 + i);
  char note[96];
  std::snprintf(note, sizeof(note), "%" PRIu64 " %zu %016" PRIx64, items[1].remote_offset, items[1].size,
                fnv1a(static_cast<const uint8_t*>(items[1].local), items[1].size));
  std::string cmd = "NOTES 1";
  std::memcpy(ctl, cmd.data(), cmd.size());
  ASSERT_OK(conn->send(ctl, cmd.size(), after(10s)));
  ASSERT_OK(conn->writev_async(items, note).wait(after(30s)));
  auto reply = conn->recv(ctl, 1 << 20, after(30s));
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(ctl), reply.value()), "1/1");
  // Read the three ranges back in one vector read, into fresh places.
  std::vector<ReadItem> reads;
  size_t at = 10 << 20;
  for (auto& w : items) {
    reads.push_back({me.at(at), w.size, desc, w.remote_offset});
    at += w.size + 13;
  }
  Transfer r = conn->readv_async(reads);
  ASSERT_OK(r.wait(after(30s)));
  EXPECT_EQ(r.bytes(), items[0].size + items[1].size + items[2].size);
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(std::memcmp(reads[i].local, items[i].local, items[i].size), 0) << "item " << i;
  }
}

TEST(Transfer, NotificationsArriveAfterTheirData) {
  const uint64_t remote_size = 48 << 20;
  PeerProcess peer(
      {"--listen", "127.0.0.1:0", "--mode", "target", "--size", std::to_string(remote_size), "--seed", "3"});
  ASSERT_FALSE(peer.address().empty());
  LocalSide me(remote_size + (1 << 20));
  auto conn = connect_to(*me.engine, peer);
  ASSERT_TRUE(conn);
  uint8_t* ctl = me.at(remote_size);
  auto got = recv_descriptor(*conn, ctl);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  RemoteDescriptor desc = got.value();
  // The peer starts checking before the writes go: each notification must
  // find its range already in place, while later writes are still streaming.
  const int kWrites = 24;
  std::string cmd = "NOTES " + std::to_string(kWrites);
  std::memcpy(ctl, cmd.data(), cmd.size());
  ASSERT_OK(conn->send(ctl, cmd.size(), after(10s)));
  std::mt19937_64 rng(5);
  std::vector<Transfer> writes;
  uint64_t off = 0;
  for (int i = 0; i < kWrites; ++i) {
    uint64_t size = i % 3 == 0 ? (1 + rng() % 4000) : (1 + rng() % (3 << 20));
    if (off + size > remote_size) break;
    fill_random(me.at(off), size, 1000 + i);
    char note[96];
    std::snprintf(note, sizeof(note), "%" PRIu64 " %" PRIu64 " %016" PRIx64, off, size, fnv1a(me.at(off), size));
    writes.push_back(conn->write_async(me.at(off), size, desc, off, note));
    off += size;
  }
  ASSERT_EQ(writes.size(), static_cast<size_t>(kWrites));
  for (auto& w : writes) ASSERT_OK(w.wait(after(30s)));
  auto reply = conn->recv(ctl, 1 << 20, after(30s));
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  EXPECT_EQ(std::string(reinterpret_cast<char*>(ctl), reply.value()),
            std::to_string(kWrites) + "/" + std::to_string(kWrites));
}

// A peer that exits as soon as it sees a notification must not make the
// sender's notify fail: the note arrived, so its confirmation must beat the
// peer's goodbye. Repeated, because the race is narrow.
// The peer confirms a notification and exits at once. Small reads in flight
// keep the peer's control stream busy, so its confirmation often has to wait
// in the queue behind a read reply: it must still go out before the goodbye.
TEST(Transfer, NotifyToAPeerThatExitsOnReceiptSucceeds) {
  for (int round = 0; round < 15; ++round) {
    PeerProcess peer({"--listen", "127.0.0.1:0", "--mode", "target", "--size", "65536", "--seed", "1"});
    ASSERT_FALSE(peer.address().empty());
    LocalSide me(1 << 20);
    auto conn = connect_to(*me.engine, peer);
    ASSERT_TRUE(conn);
    uint8_t* ctl = me.at(0);
    auto desc = recv_descriptor(*conn, ctl);
    ASSERT_TRUE(desc.ok());
    std::string cmd = "NOTE_THEN_EXIT";
    std::memcpy(ctl, cmd.data(), cmd.size());
    ASSERT_OK(conn->send(ctl, cmd.size(), after(10s)));
    std::vector<Transfer> reads;
    for (int i = 0; i < 32; ++i) reads.push_back(conn->read_async(me.at(65536 + i * 16384), 16384, *desc, 0));
    Status s = conn->notify("round " + std::to_string(round), after(10s));
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.to_string();
    for (Transfer& r : reads) (void)r.wait(after(10s));  // the peer may leave before answering them all
  }
}

TEST(Transfer, ManyInFlightInBothDirections) {
  PeerProcess peer({"--listen", "127.0.0.1:0", "--mode", "echo"});
  ASSERT_FALSE(peer.address().empty());
  const int kCount = 96;
  const size_t kSlot = 320 * 1024;
  LocalSide me(2 * kCount * kSlot);
  auto conn = connect_to(*me.engine, peer);
  ASSERT_TRUE(conn);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> sizes;
  std::vector<Transfer> sends, recvs;
  // Receives first, then every send at once: the peer echoes each message
  // while later ones are still arriving, so both directions are busy.
  for (int i = 0; i < kCount; ++i) {
    sizes.push_back(1 + rng() % (kSlot - 1));
    recvs.push_back(conn->recv_async(me.at((kCount + i) * kSlot), kSlot));
  }
  for (int i = 0; i < kCount; ++i) {
    fill_random(me.at(i * kSlot), sizes[i], 500 + i);
    sends.push_back(conn->send_async(me.at(i * kSlot), sizes[i]));
  }
  for (int i = 0; i < kCount; ++i) {
    ASSERT_OK(sends[i].wait(after(30s)));
    ASSERT_OK(recvs[i].wait(after(30s)));
    ASSERT_EQ(recvs[i].bytes(), sizes[i]) << "message " << i;
    ASSERT_EQ(std::memcmp(me.at((kCount + i) * kSlot), me.at(i * kSlot), sizes[i]), 0) << "message " << i;
  }
}

// Two engines in this process, each writing to the other while sending
// notifications both ways.
TEST(Transfer, BothSidesWriteAndNotifyAtOnce) {
  Options o;
  o.local_same_process = true;  // the local transport between engines of one process is an opt-in
  LocalSide a(16 << 20, o), b(16 << 20, o);
  auto ab = a.engine->connect(b.engine->address(), after(10s));
  ASSERT_TRUE(ab.ok()) << ab.status().to_string();
  auto ba = b.engine->accept(after(10s));
  ASSERT_TRUE(ba.ok()) << ba.status().to_string();
  auto da = a.engine->export_region(a.region, 8 << 20, 8 << 20).value();
  auto db = b.engine->export_region(b.region, 8 << 20, 8 << 20).value();
  fill_random(a.at(0), 8 << 20, 1);
  fill_random(b.at(0), 8 << 20, 2);
  Transfer wa = (*ab)->write_async(a.at(0), (8 << 20) - 1, db, 1, "from a");
  Transfer wb = (*ba)->write_async(b.at(0), (8 << 20) - 3, da, 3, "from b");
  ASSERT_OK((*ab)->notify("standalone from a", after(10s)));
  ASSERT_OK(wa.wait(after(30s)));
  ASSERT_OK(wb.wait(after(30s)));
  EXPECT_EQ(std::memcmp(b.at((8 << 20) + 1), a.at(0), (8 << 20) - 1), 0);
  EXPECT_EQ(std::memcmp(a.at((8 << 20) + 3), b.at(0), (8 << 20) - 3), 0);
  // The write's notification and the standalone one both reach b, each once.
  std::vector<std::string> at_b;
  for (int i = 0; i < 2; ++i) {
    auto n = (*ba)->wait_notification(after(10s));
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    at_b.push_back(n.value());
  }
  std::sort(at_b.begin(), at_b.end());
  EXPECT_EQ(at_b, (std::vector<std::string>{"from a", "standalone from a"}));
  auto at_a = (*ab)->wait_notification(after(10s));
  ASSERT_TRUE(at_a.ok());
  EXPECT_EQ(at_a.value(), "from b");
  EXPECT_FALSE((*ab)->poll_notification().has_value());
  EXPECT_CODE((*ab)->wait_notification(after(50ms)).status(), Code::kDeadlineExceeded);
}

}  // namespace
}  // namespace ferry::test
