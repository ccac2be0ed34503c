// Connection, the public face: every call goes to the connection's one
// ConnectionCore, at once or held behind CUDA streams (StreamOrdered), and
// the blocking forms post, then wait by the one deadline policy.
#include <tuple>

#include "transport/connection_core.h"

// ---- Connection: the public face, over the one core ------------------------------

namespace ferry {
namespace {

transport::ConnectionCore& core_of(Connection* c) { return static_cast<transport::ConnectionCore&>(*c); }
const transport::ConnectionCore& core_of(const Connection* c) {
  return static_cast<const transport::ConnectionCore&>(*c);
}

// An operation's arguments as a held operation keeps them (the caller's
// arrays and strings may be gone when it is posted), and as it passes them.
template <typename T>
std::vector<T> own(std::span<const T> s) {
  return std::vector<T>(s.begin(), s.end());
}
inline std::string own(std::string_view s) { return std::string(s); }
inline BlockPools own(const BlockPools& p) { return p; }
template <typename T>
std::span<const T> pass(const std::vector<T>& v) {
  return std::span<const T>(v);
}
inline std::string_view pass(const std::string& s) { return s; }
inline const BlockPools& pass(const BlockPools& p) { return p; }

// Posts `post(core, args...)` now, or holds it behind the streams and what
// is held already (core/stream_order.h).
template <typename Post, typename... Args>
Transfer in_order(transport::ConnectionCore& core, std::span<const CudaStreamRef> streams, Post post,
                  const Args&... args) {
  core::OrderedPosts& ordered = core.ordered();
  if (ordered.posts_now(streams)) return post(core, args...);
  std::weak_ptr<transport::ConnectionCore> weak = core.weak_from_this();
  auto held = [weak, post, owned = std::make_tuple(own(args)...)]() -> Transfer {
    auto c = weak.lock();
    if (!c) return transport::ConnectionCore::failed_transfer(Status(Code::kCancelled, "the connection is gone"));
    return std::apply([&](const auto&... o) { return post(*c, pass(o)...); }, owned);
  };
  return ordered.post_later(streams, core.new_state(), std::move(held));
}

const auto kSendv = [](transport::ConnectionCore& c, std::span<const ConstBuffer> p) { return c.sendv_async(p); };
const auto kRecvv = [](transport::ConnectionCore& c, std::span<const MutableBuffer> p) { return c.recvv_async(p); };
const auto kWritev = [](transport::ConnectionCore& c, std::span<const WriteItem> i, std::string_view n) {
  return c.writev_async(i, n);
};
const auto kWriteBlocks = [](transport::ConnectionCore& c, const BlockPools& p, std::span<const Block> b,
                             std::string_view n) { return c.write_blocks_async(p, b, n); };
const auto kReadv = [](transport::ConnectionCore& c, std::span<const ReadItem> i) { return c.readv_async(i); };
const auto kNotify = [](transport::ConnectionCore& c, std::string_view m) { return c.notify_async(m); };

template <typename T>
std::span<const T> one(const T& t) {
  return std::span<const T>(&t, 1);
}

}  // namespace

Transfer Connection::send_async(const void* data, size_t size) {
  ConstBuffer b{data, size};
  return in_order(core_of(this), {}, kSendv, one(b));
}
Transfer Connection::sendv_async(std::span<const ConstBuffer> parts) { return in_order(core_of(this), {}, kSendv, parts); }
Transfer Connection::recv_async(void* data, size_t capacity) {
  MutableBuffer b{data, capacity};
  return in_order(core_of(this), {}, kRecvv, one(b));
}
Transfer Connection::recvv_async(std::span<const MutableBuffer> parts) {
  return in_order(core_of(this), {}, kRecvv, parts);
}
Result<uint64_t> Connection::probe(Deadline deadline) { return core_of(this).probe(deadline); }
Transfer Connection::write_async(const void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
                                 std::string_view notification) {
  WriteItem item{local, size, remote, remote_offset};
  return in_order(core_of(this), {}, kWritev, one(item), notification);
}
Transfer Connection::writev_async(std::span<const WriteItem> items, std::string_view notification) {
  return in_order(core_of(this), {}, kWritev, items, notification);
}
Result<BlockPools> Connection::prepare_blocks(std::span<const Region> local, std::span<const RemoteDescriptor> remote) {
  return core_of(this).prepare_blocks(local, remote);
}
Transfer Connection::write_blocks_async(const BlockPools& pools, std::span<const Block> blocks,
                                        std::string_view notification) {
  return in_order(core_of(this), {}, kWriteBlocks, pools, blocks, notification);
}
size_t BlockPools::local_pools() const { return pools_ ? pools_->local.size() : 0; }
size_t BlockPools::remote_pools() const { return pools_ ? pools_->remote.size() : 0; }
Transfer Connection::read_async(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset) {
  ReadItem item{local, size, remote, remote_offset};
  return in_order(core_of(this), {}, kReadv, one(item));
}
Transfer Connection::readv_async(std::span<const ReadItem> items) { return in_order(core_of(this), {}, kReadv, items); }
Transfer Connection::notify_async(std::string_view message) { return in_order(core_of(this), {}, kNotify, message); }
StreamOrdered Connection::after_streams(std::span<void* const> cuda_streams) {
  std::vector<CudaStreamRef> refs;
  for (void* s : cuda_streams) refs.push_back({s, -1});
  return StreamOrdered(this, refs);
}
StreamOrdered Connection::after_streams(std::span<const CudaStreamRef> cuda_streams) {
  return StreamOrdered(this, cuda_streams);
}
Status Connection::stream_wait(const Transfer& transfer, void* cuda_stream) {
  return core_of(this).stream_wait(transfer, {cuda_stream, -1});
}
Status Connection::stream_wait(const Transfer& transfer, const CudaStreamRef& cuda_stream) {
  return core_of(this).stream_wait(transfer, cuda_stream);
}

Transfer StreamOrdered::send_async(const void* data, size_t size) {
  ConstBuffer b{data, size};
  return in_order(core_of(connection_), streams_, kSendv, one(b));
}
Transfer StreamOrdered::sendv_async(std::span<const ConstBuffer> parts) {
  return in_order(core_of(connection_), streams_, kSendv, parts);
}
Transfer StreamOrdered::recv_async(void* data, size_t capacity) {
  MutableBuffer b{data, capacity};
  return in_order(core_of(connection_), streams_, kRecvv, one(b));
}
Transfer StreamOrdered::recvv_async(std::span<const MutableBuffer> parts) {
  return in_order(core_of(connection_), streams_, kRecvv, parts);
}
Transfer StreamOrdered::write_async(const void* local, size_t size, const RemoteDescriptor& remote,
                                    uint64_t remote_offset, std::string_view notification) {
  WriteItem item{local, size, remote, remote_offset};
  return in_order(core_of(connection_), streams_, kWritev, one(item), notification);
}
Transfer StreamOrdered::writev_async(std::span<const WriteItem> items, std::string_view notification) {
  return in_order(core_of(connection_), streams_, kWritev, items, notification);
}
Transfer StreamOrdered::write_blocks_async(const BlockPools& pools, std::span<const Block> blocks,
                                           std::string_view notification) {
  return in_order(core_of(connection_), streams_, kWriteBlocks, pools, blocks, notification);
}
Transfer StreamOrdered::read_async(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset) {
  ReadItem item{local, size, remote, remote_offset};
  return in_order(core_of(connection_), streams_, kReadv, one(item));
}
Transfer StreamOrdered::readv_async(std::span<const ReadItem> items) {
  return in_order(core_of(connection_), streams_, kReadv, items);
}
Result<std::string> Connection::wait_notification(Deadline deadline) {
  return core_of(this).wait_notification(deadline);
}
std::optional<std::string> Connection::poll_notification() { return core_of(this).poll_notification(); }
Result<Note> Connection::wait_note(Deadline deadline) { return core_of(this).wait_note(deadline); }
std::optional<Note> Connection::poll_note() { return core_of(this).poll_note(); }
void Connection::set_notification_listener(std::function<void()> listener) {
  core_of(this).set_notification_listener(std::move(listener));
}
void Connection::close() { core_of(this).close(); }
Status Connection::health() const { return core_of(this).health(); }
uint64_t Connection::id() const { return core_of(this).id(); }
uint64_t Connection::peer_engine_id() const { return core_of(this).peer_engine_id(); }
std::string Connection::peer_address() const { return core_of(this).peer_address(); }
std::string_view Connection::transport_name() const { return core_of(this).transport_name(); }


// The blocking forms: post, then wait by the one deadline policy
// (Transfer::wait_or_cancel), which Python's blocking calls use too.
Status Connection::send(const void* data, size_t size, Deadline deadline) {
  return send_async(data, size).wait_or_cancel(deadline, PastDeadline::kLeave);
}
Status Connection::sendv(std::span<const ConstBuffer> parts, Deadline deadline) {
  return sendv_async(parts).wait_or_cancel(deadline, PastDeadline::kLeave);
}
Result<size_t> Connection::recv(void* data, size_t capacity, Deadline deadline) {
  Transfer t = recv_async(data, capacity);
  FERRY_RETURN_IF_ERROR(t.wait_or_cancel(deadline, PastDeadline::kCancelOrFinish));
  return t.bytes();
}
Result<size_t> Connection::recvv(std::span<const MutableBuffer> parts, Deadline deadline) {
  Transfer t = recvv_async(parts);
  FERRY_RETURN_IF_ERROR(t.wait_or_cancel(deadline, PastDeadline::kCancelOrFinish));
  return t.bytes();
}
Status Connection::write(const void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
                         std::string_view notification, Deadline deadline) {
  return write_async(local, size, remote, remote_offset, notification)
      .wait_or_cancel(deadline, PastDeadline::kCancelOrFinish);
}
Status Connection::read(void* local, size_t size, const RemoteDescriptor& remote, uint64_t remote_offset,
                        Deadline deadline) {
  return read_async(local, size, remote, remote_offset).wait_or_cancel(deadline, PastDeadline::kCancelOrFinish);
}
Status Connection::notify(std::string_view message, Deadline deadline) {
  return notify_async(message).wait_or_cancel(deadline, PastDeadline::kLeave);
}

}  // namespace ferry
