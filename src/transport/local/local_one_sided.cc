// LocalTransport's one-sided operations: writes and reads into the peer's
// exports (each opened once, its key checked by its owner), copied by this
// side where it can address both ends and by the peer where it cannot; a
// batch of blocks into one export as one copy; and a write's stop.
#include <algorithm>

#include "transport/local/local_transport.h"

namespace ferry::local {

using wire::FrameHeader;
using wire::FrameType;

// ---- one-sided ------------------------------------------------------------------------

void LocalTransport::start_write(const std::shared_ptr<TransferState>& state, transport::RemoteItem item,
                                 std::string_view /*note*/, uint64_t /*note_seq*/) {
  start_item(state, std::move(item), /*is_write=*/true);
}

void LocalTransport::start_write_batch(const std::shared_ptr<TransferState>& state, transport::WriteBatch batch,
                                       std::string_view /*note*/, uint64_t /*note_seq*/) {
  const RemoteDescriptor& first = batch.targets.front().remote;
  bool one_export = std::all_of(batch.targets.begin(), batch.targets.end(), [&](const auto& t) {
    return t.remote.export_id == first.export_id && t.remote.key == first.key;
  });
  if (!one_export) {
    start_each(state, std::move(batch));
    return;
  }
  // A KV cache's blocks all go into one pool: one copy of every block.
  std::weak_ptr<transport::ConnectionHost> self = core_.weak_host();
  auto shared = std::make_shared<transport::WriteBatch>(std::move(batch));
  with_export(first, [this, self, state, shared](Result<const ExportInfo*> info) {
    auto core = self.lock();  // the transport lives as long as its core
    if (!core) return;
    if (!info.ok()) {
      state->finish_part(info.status());
      return;
    }
    run_batch(state, shared, **info);
  });
}

bool LocalTransport::start_pool_blocks(const std::shared_ptr<TransferState>& state,
                                       const transport::PreparedPools& pools, std::span<const Block> blocks,
                                       uint64_t bytes, std::string_view note, uint64_t /*note_seq*/) {
  // A note follows the write here (notes_ride_with_writes() is false): the
  // core never hands one over, and the general path would carry it.
  if (!note.empty()) return false;
  // This side's pools: GPU memory, all on one device.
  const int device = pools.local.front().region->region.device;
  std::vector<uint8_t*> local;
  local.reserve(pools.local.size());
  for (const core::MemorySpan& m : pools.local) {
    if (m.region->region.kind != MemoryKind::kCuda || m.region->region.device != device) return false;
    local.push_back(m.data);
  }
  platform::ReaderLock gate(revoke_mu_);  // no export of the peer's closes while the copy is queued
  std::vector<SharedSpan> remote;
  remote.reserve(pools.remote.size());
  {
    platform::MutexLock lock(mu_);
    for (const RemoteDescriptor& r : pools.remote) {
      auto it = exports_.find(std::make_pair(r.export_id, r.key));
      // Not opened yet, or not one GPU allocation reaching as far as the
      // descriptor says: the general path opens it, or fails the blocks
      // that reach past it.
      if (it == exports_.end() || it->second.spans.size() != 1) return false;
      const SharedSpan& span = it->second.spans.front();
      if (!span.gpu() || r.length > it->second.length || r.length > span.length) return false;
      remote.push_back(span);
    }
  }
  // Held until the copy ends: deregistering a pool waits for it.
  core::SegmentList held;
  for (const core::MemorySpan& m : pools.local) held.add(m);
  auto access = std::make_shared<core::ChunkAccess>(held, 0, held.total());
  if (!access->ok()) {
    state->finish_part(Status(Code::kNotFound, where() + ": a local pool was deregistered"));
    return true;
  }
  Status s = copier_.start_blocks(
      device, local, remote, blocks, bytes, [state, access](const Status& st) { state->finish_part(st); },
      stop_check(state));
  if (s.code() == Code::kUnimplemented) return false;
  if (!s.ok()) state->finish_part(s.with_context(where()));
  if (copier_.busy()) {
    kick();
  }
  return true;
}

void LocalTransport::run_batch(const std::shared_ptr<TransferState>& state,
                               const std::shared_ptr<transport::WriteBatch>& batch, const ExportInfo& info) {
  std::vector<SharedSpan> remote;
  remote.reserve(batch->targets.size());
  for (const transport::WriteBatch::Target& t : batch->targets) {
    if (t.offset > info.length || t.size > info.length - t.offset) {
      state->finish_part(Status(Code::kOutOfRange, where() + ": access past the end of export " +
                                                       std::to_string(t.remote.export_id)));
      return;
    }
    // The export's spans that hold [offset, offset + size), walked in place.
    uint64_t skip = t.offset, left = t.size;
    for (const SharedSpan& s : info.spans) {
      if (left == 0) break;
      if (skip >= s.length) {
        skip -= s.length;
        continue;
      }
      uint64_t address = s.address + skip, length = std::min(left, s.length - skip);
      skip = 0;
      left -= length;
      // Blocks that continue each other in one allocation: one span, one copy.
      SharedSpan* last = remote.empty() ? nullptr : &remote.back();
      if (last != nullptr && last->kind == s.kind && last->alloc_id == s.alloc_id &&
          last->alloc_base == s.alloc_base && last->address + last->length == address) {
        last->length += length;
      } else {
        remote.push_back(s);
        remote.back().address = address;
        remote.back().length = length;
      }
    }
  }
  const uint64_t size = batch->source.total();
  if (size == 0) {
    state->finish_part(Status());
    return;
  }
  if (!LocalCopier::can_execute(batch->source, remote)) {
    start_each(state, std::move(*batch));  // the peer copies its parts
    return;
  }
  // Held until the copy ends (the completion owns it): dereg waits for it.
  auto access = std::make_shared<core::ChunkAccess>(batch->source, 0, size);
  if (!access->ok()) {
    state->finish_part(Status(Code::kNotFound, where() + ": local buffer was deregistered"));
    return;
  }
  Status s = copier_.start(
      batch->source, remote, size, /*to_remote=*/true,
      [state, access, batch](const Status& st) { state->finish_part(st); }, copy_by(), stop_check(state));
  if (!s.ok()) state->finish_part(s.with_context(where()));
  if (copier_.busy()) {
    kick();
  }
}

void LocalTransport::start_each(const std::shared_ptr<TransferState>& state, transport::WriteBatch batch) {
  // Each item is copied on its own; the batch ends with the last of them.
  auto items_state = std::make_shared<TransferState>(0, static_cast<int>(batch.targets.size()));
  items_state->on_finish([state](const Status& s) { state->finish_part(s); });
  uint64_t at = 0;
  for (const transport::WriteBatch::Target& t : batch.targets) {
    transport::RemoteItem item;
    item.local = batch.source.part(at, t.size);
    item.remote = t.remote;
    item.offset = t.offset;
    at += t.size;
    start_item(items_state, std::move(item), /*is_write=*/true, state);
  }
}

void LocalTransport::start_read(const std::shared_ptr<TransferState>& state, transport::RemoteItem item) {
  start_item(state, std::move(item), /*is_write=*/false);
}

void LocalTransport::with_export(const RemoteDescriptor& r, std::function<void(Result<const ExportInfo*>)> then) {
  auto key = std::make_pair(r.export_id, r.key);
  {
    platform::ReaderLock gate(revoke_mu_);
    platform::UniqueLock lock(mu_);
    auto it = exports_.find(key);
    if (it != exports_.end()) {
      const ExportInfo* info = &it->second;
      lock.unlock();
      then(info);  // starts the copy under the gate
      return;
    }
    if (core_.failed()) {
      lock.unlock();
      then(core_.usable());  // see expect()
      return;
    }
    auto& waiters = opening_[key];
    waiters.push_back(std::move(then));
    if (waiters.size() > 1) return;  // a request is already out
  }
  post(wire::encode(wire::LocalOpen{core_.next_op(), r.export_id, r.key, r.length}));
}

LocalCopier::StopCheck LocalTransport::stop_check(std::shared_ptr<TransferState> transfer) {
  return [transfer = std::move(transfer)] {
    if (!transfer->stop_requested()) return Status();
    return Status(Code::kCancelled, "the write was cancelled by the application");
  };
}

bool LocalTransport::stop_write(const std::shared_ptr<TransferState>& state) {
  // This side does every copy of a write (or the peer does, and answers once
  // it did): a copy not begun does not begin, a host copy stops before its
  // next piece, and the write is over once the copies that run have ended.
  state->request_stop();
  if (!state->wait(Clock::now() + ctx_->options.peer_timeout).ok() && !state->done()) {
    core_.fail(Status(Code::kPeerLost, where() + ": a cancelled write did not end within peer_timeout"));
    (void)state->wait(Clock::now() + ctx_->options.peer_timeout);
  }
  return state->done() && state->status().code() == Code::kCancelled;
}

void LocalTransport::start_item(const std::shared_ptr<TransferState>& state, Item item, bool is_write,
                                std::shared_ptr<TransferState> stop_from) {
  if (item.local.total() == 0) {
    state->finish_part(Status());
    return;
  }
  if (!stop_from) stop_from = state;
  std::weak_ptr<transport::ConnectionHost> self = core_.weak_host();
  auto shared = std::make_shared<Item>(std::move(item));
  with_export(shared->remote, [this, self, state, shared, is_write, stop_from](Result<const ExportInfo*> info) {
    auto core = self.lock();  // the transport lives as long as its core
    if (!core) return;
    if (!info.ok()) {
      state->finish_part(info.status());
      return;
    }
    run_item(state, *shared, **info, is_write, stop_from);
  });
}

void LocalTransport::run_item(const std::shared_ptr<TransferState>& state, const Item& item, const ExportInfo& info,
                               bool is_write, const std::shared_ptr<TransferState>& stop_from) {
  uint64_t size = item.local.total();
  if (item.offset + size > info.length) {
    state->finish_part(Status(Code::kOutOfRange,
                              where() + ": access past the end of export " + std::to_string(item.remote.export_id)));
    return;
  }
  std::vector<SharedSpan> remote = slice_spans(info.spans, item.offset, size);
  if (LocalCopier::can_execute(item.local, remote)) {
    // Held until the copy ends (the completion owns it): dereg waits for it.
    auto access = std::make_shared<core::ChunkAccess>(item.local, 0, size);
    if (!access->ok()) {
      state->finish_part(Status(Code::kNotFound, where() + ": local buffer was deregistered"));
      return;
    }
    // The first item to use an export runs here on a progress worker,
    // once the peer opened it (on_export): a large host copy then goes to
    // the copier's helpers, so acks and notifications do not wait for it.
    Status s = copier_.start(
        item.local, remote, size, is_write, [state, access](const Status& st) { state->finish_part(st); }, copy_by(),
        is_write ? stop_check(stop_from) : LocalCopier::StopCheck());
    if (!s.ok()) state->finish_part(s.with_context(where()));
    if (copier_.busy()) {
      // Queued GPU copies complete on the progress worker. A small copy has
      // already completed here: waking that thread would cost the caller a
      // futex call for nothing.
      kick();
    }
    return;
  }
  // This side's GPU memory against the peer's host memory: the peer copies.
  std::vector<SharedSpan> mine;
  if (Status s = describe(item.local, size, mine); !s.ok()) {
    state->finish_part(s.with_context(where()));
    return;
  }
  std::string payload;
  encode_spans(mine, payload);
  if (Status f = fits(payload, is_write ? "this write" : "this read"); !f.ok()) {
    state->finish_part(f);
    return;
  }
  uint64_t op = core_.next_op();
  expect(op, [state](const Status& st) { state->finish_part(st); });
  const wire::LocalCopy copy{op, item.remote.export_id, item.remote.key, item.offset, size, payload};
  post(is_write ? wire::encode(wire::LocalPull{copy}) : wire::encode(wire::LocalPush{copy}), {}, payload);
}

}  // namespace ferry::local
