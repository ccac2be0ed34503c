// ConnectionCore's one-sided operations: a write's or a read's remote
// descriptor checked against the peer and its local memory resolved, write
// batches and blocks into prepared pools, a write's notification given its
// place in order (sent after the data where the transport's notes do not
// ride with it), and a write's or a read's stop.
#include <cinttypes>
#include <cstdio>
#include <functional>

#include "transport/connection_core.h"

namespace ferry::transport {

// ---- one-sided ----------------------------------------------------------------

Status ConnectionCore::check_remote(const RemoteDescriptor& r, uint64_t offset, uint64_t size, const char* op) const {
  if (r.engine_id != peer_.engine_id) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s: descriptor belongs to engine %016" PRIx64 ", but ", op, r.engine_id);
    return Status(Code::kInvalidArgument, buf + where());
  }
  if (offset > r.length || size > r.length - offset) {
    return Status(Code::kOutOfRange, std::string(op) + ": [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                         ") leaves remote export " + std::to_string(r.export_id) + " of " +
                                         std::to_string(r.length) + " bytes");
  }
  return Status();
}

namespace {

template <typename Access>
Result<std::vector<RemoteItem>> resolve(const core::Registry& registry, std::span<const Access> items, const char* what,
                                        const std::function<Status(const Access&)>& check, const std::string& where) {
  std::vector<RemoteItem> out;
  out.reserve(items.size());
  for (const Access& a : items) {
    FERRY_RETURN_IF_ERROR(check(a));
    RemoteItem it;
    it.remote = a.remote;
    it.offset = a.remote_offset;
    if (a.size > 0) {
      ConstBuffer part{a.local, a.size};
      auto list = core::resolve_parts(registry, std::span<const ConstBuffer>(&part, 1), what, /*allow_gpu=*/true);
      if (!list.ok()) return list.status().with_context(where);
      it.local = std::move(list).value();
    }
    out.push_back(std::move(it));
  }
  return out;
}

}  // namespace

Result<std::vector<RemoteItem>> ConnectionCore::resolve_items(std::span<const ReadItem> items, const char* op) const {
  return resolve<ReadItem>(
      ctx_->registry, items, "read destination",
      [&](const ReadItem& a) { return check_remote(a.remote, a.remote_offset, a.size, op); }, where());
}

Transfer ConnectionCore::writev_async(std::span<const WriteItem> items, std::string_view notification) {
  if (Status u = usable(); !u.ok()) return failed_transfer(u);
  if (items.empty()) return failed_transfer(Status(Code::kInvalidArgument, "writev: no items"));
  if (Status c = core::NotificationQueue::check_size(notification, "write"); !c.ok()) return failed_transfer(c);
  WriteBatch batch;
  batch.targets.reserve(items.size());
  core::RegionRef last;  // the region of the previous item: a KV cache's blocks share a pool
  for (const WriteItem& a : items) {
    if (Status c = check_remote(a.remote, a.remote_offset, a.size, "write"); !c.ok()) return failed_transfer(c);
    if (a.size > 0) {
      auto* p = static_cast<uint8_t*>(const_cast<void*>(a.local));
      if (last != nullptr && core::holds(last->region, p, a.size)) {
        batch.source.add(last, p, a.size);
      } else {
        auto span = ctx_->registry.resolve_local(a.local, a.size, "write source");
        if (!span.ok()) return failed_transfer(span.status().with_context(where()));
        last = span->region;
        batch.source.add(std::move(span).value());
      }
    }
    batch.targets.push_back({a.remote, a.remote_offset, a.size});
  }
  return post_writes(std::move(batch), notification);
}

Result<BlockPools> ConnectionCore::prepare_blocks(std::span<const Region> local,
                                                  std::span<const RemoteDescriptor> remote) {
  if (local.empty() || remote.empty()) {
    return Status(Code::kInvalidArgument, "prepare_blocks: give at least one local region and one remote export");
  }
  if (local.size() > UINT32_MAX || remote.size() > UINT32_MAX) {
    return Status(Code::kInvalidArgument, "prepare_blocks: more pools than a block can name");
  }
  auto pools = std::make_shared<PreparedPools>();
  pools->engine = ctx_.get();
  pools->connection = id_;
  for (size_t i = 0; i < local.size(); ++i) {
    auto span = ctx_->registry.resolve_local(local[i].base, local[i].length, "local pool");
    if (!span.ok()) return span.status().with_context("prepare_blocks: local pool " + std::to_string(i));
    pools->local.push_back(std::move(span).value());
  }
  for (size_t i = 0; i < remote.size(); ++i) {
    if (Status c = check_remote(remote[i], 0, 0, "prepare_blocks"); !c.ok()) {
      return c.with_context("remote pool " + std::to_string(i));
    }
    pools->remote.push_back(remote[i]);
  }
  BlockPools out;
  out.pools_ = std::move(pools);
  return out;
}

Transfer ConnectionCore::write_blocks_async(const BlockPools& pools, std::span<const Block> blocks,
                                            std::string_view notification) {
  if (Status u = usable(); !u.ok()) return failed_transfer(u);
  const PreparedPools* p = pools.pools_.get();
  if (p == nullptr || p->engine != ctx_.get() || p->connection != id_) {
    return failed_transfer(Status(Code::kInvalidArgument,
                                  "write_blocks: the pools were not prepared on " + where() + " (prepare_blocks)"));
  }
  if (blocks.empty()) return failed_transfer(Status(Code::kInvalidArgument, "write_blocks: no blocks"));
  if (Status c = core::NotificationQueue::check_size(notification, "write"); !c.ok()) return failed_transfer(c);
  uint64_t total = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    if (b.local_pool >= p->local.size() || b.remote_pool >= p->remote.size()) {
      return failed_transfer(Status(Code::kInvalidArgument,
                                    "write_blocks: block " + std::to_string(i) + " names local pool " +
                                        std::to_string(b.local_pool) + " and remote pool " +
                                        std::to_string(b.remote_pool) + "; there are " +
                                        std::to_string(p->local.size()) + " and " + std::to_string(p->remote.size())));
    }
    const core::MemorySpan& from = p->local[b.local_pool];
    const RemoteDescriptor& to = p->remote[b.remote_pool];
    if (b.local_offset > from.size || b.size > from.size - b.local_offset || b.remote_offset > to.length ||
        b.size > to.length - b.remote_offset) {
      return failed_transfer(Status(
          Code::kOutOfRange, "write_blocks: block " + std::to_string(i) + " ([" + std::to_string(b.local_offset) +
                                 ", +" + std::to_string(b.size) + ") of local pool " + std::to_string(b.local_pool) +
                                 " of " + std::to_string(from.size) + " bytes to offset " +
                                 std::to_string(b.remote_offset) + " of remote pool " + std::to_string(b.remote_pool) +
                                 " of " + std::to_string(to.length) + ") runs past a pool's end"));
    }
    total += b.size;
  }
  // The transport's own way with the blocks where it has one, else a batch.
  // Called on this thread before post_writes returns: the references hold.
  return post_writes(total, notification, [&](const std::shared_ptr<TransferState>& state, std::string_view note,
                                              uint64_t seq) {
    if (transport_->start_pool_blocks(state, *p, blocks, total, note, seq)) return;
    WriteBatch batch;
    batch.source.reserve(blocks.size());
    batch.targets.reserve(blocks.size());
    for (const Block& b : blocks) {
      const core::MemorySpan& from = p->local[b.local_pool];
      batch.source.add(from.region, from.data + b.local_offset, static_cast<size_t>(b.size));
      batch.targets.push_back({p->remote[b.remote_pool], b.remote_offset, b.size});
    }
    start_writes(state, std::move(batch), note, seq);
  }, core::MeteredOp::kWriteBlocks);
}

Transfer ConnectionCore::post_writes(WriteBatch batch, std::string_view notification) {
  const uint64_t bytes = batch.source.total();
  return post_writes(bytes, notification,
                     [&](const std::shared_ptr<TransferState>& state, std::string_view note, uint64_t seq) {
                       start_writes(state, std::move(batch), note, seq);
                     });
}

Transfer ConnectionCore::post_writes(uint64_t bytes, std::string_view notification, const StartWrites& start,
                                     core::MeteredOp op) {
  // The notification's place among this connection's notifications is
  // taken now (NotificationQueue::push_numbered); a write that fails gives
  // it up with a skip.
  uint64_t seq = notification.empty() ? 0 : next_note_seq_.fetch_add(1, std::memory_order_relaxed);
  if (seq != 0 && !transport_->notes_ride_with_writes()) {
    return writes_with_trailing_note(bytes, start, notification, seq, op);
  }
  auto state = new_state(op);
  state->set_bytes(bytes);
  if (seq != 0) {
    std::weak_ptr<ConnectionCore> self = weak_from_this();
    state->on_finish([self, seq, note = std::string(notification)](const Status& s) {
      if (auto core = self.lock(); core && !s.ok() && !core->failed()) core->transport_->skip_note(seq, note);
    });
  }
  start(state, notification, seq);
  let_stop(state, state);
  return Transfer(state);
}

void ConnectionCore::let_stop_landing(const std::shared_ptr<TransferState>& state) {
  std::weak_ptr<ConnectionCore> self = weak_from_this();
  std::weak_ptr<TransferState> weak = state;
  state->set_stopper([self, weak] {
    auto core = self.lock();
    auto st = weak.lock();
    return core && st && core->transport_->stop_landing(st);
  });
}

void ConnectionCore::let_stop(const std::shared_ptr<TransferState>& shown,
                              const std::shared_ptr<TransferState>& started) {
  std::weak_ptr<ConnectionCore> self = weak_from_this();
  std::weak_ptr<TransferState> weak_shown = shown, weak_started = started;
  shown->set_stopper([self, weak_shown, weak_started] {
    auto core = self.lock();
    auto outer = weak_shown.lock();
    if (!core || !outer) return false;
    auto started = weak_started.lock();  // gone once the write ended (its notification may still be on its way)
    bool stopped = started && core->transport_->stop_write(started);
    // The handle the application holds ends with it (on the thread that
    // ended the write, which also sends the notification or the skip).
    if (outer != started) (void)outer->wait(Clock::now() + core->ctx_->options.peer_timeout);
    return stopped;
  });
}

void ConnectionCore::start_writes(const std::shared_ptr<TransferState>& state, WriteBatch batch,
                                  std::string_view note, uint64_t seq) {
  if (batch.targets.size() > 1) {
    transport_->start_write_batch(state, std::move(batch), note, seq);
    return;
  }
  RemoteItem item;
  item.local = std::move(batch.source);
  item.remote = batch.targets.front().remote;
  item.offset = batch.targets.front().offset;
  transport_->start_write(state, std::move(item), note, seq);
}

Transfer ConnectionCore::writes_with_trailing_note(uint64_t bytes, const StartWrites& start, std::string_view note,
                                                   uint64_t seq, core::MeteredOp op) {
  // The items may land in any order: the notification follows once every
  // one of them is in place, or is skipped if one failed (the peer then
  // delivers the notifications after it without waiting).
  auto outer = new_state(op);
  outer->set_bytes(bytes);
  auto parts = std::make_shared<TransferState>(0, 1);
  std::weak_ptr<ConnectionCore> self = weak_from_this();
  // Runs on a ferry thread: the transport queues the note, never blocks here.
  parts->on_finish([self, outer, seq, note = std::string(note)](const Status& s) {
    auto core = self.lock();
    if (!core) {
      outer->finish(Status(Code::kCancelled, "notification not sent: the connection is gone"));
      return;
    }
    if (!s.ok()) {
      if (!core->failed()) core->transport_->skip_note(seq, note);
      outer->finish(s);
      return;
    }
    if (Status u = core->usable(); !u.ok()) {
      outer->finish(u);
      return;
    }
    core->transport_->send_note(outer, seq, note, /*caller_thread=*/false);
  });
  start(parts, "", 0);
  let_stop(outer, parts);
  return Transfer(outer);
}

Transfer ConnectionCore::readv_async(std::span<const ReadItem> items) {
  if (Status u = usable(); !u.ok()) return failed_transfer(u);
  if (items.empty()) return failed_transfer(Status(Code::kInvalidArgument, "readv: no items"));
  auto resolved = resolve_items(items, "read");
  if (!resolved.ok()) return failed_transfer(resolved.status());
  auto state = new_state(core::MeteredOp::kRead, static_cast<int>(resolved->size()));
  size_t total = 0;
  for (const RemoteItem& it : *resolved) total += it.local.total();
  state->set_bytes(total);
  let_stop_landing(state);
  for (RemoteItem& it : *resolved) transport_->start_read(state, std::move(it));
  return Transfer(state);
}

}  // namespace ferry::transport
