// Codecs of the local transport's frames (local_messages.h).
#include "wire/local_messages.h"

#include <cstring>
#include <string>

#include "wire/field_checks.h"
#include "wire/messages.h"

namespace ferry::wire {

using namespace field_checks;

namespace {

// A failure's reason only with a failure.
Status reason_fits(const FrameHeader& h, std::string_view reason) {
  if (h.code == 0 && !reason.empty()) return refuse(h, "a reason for an operation that succeeded");
  return Status();
}

FrameHeader with_payload(FrameHeader h, std::string_view payload) {
  h.payload_len = static_cast<uint32_t>(payload.size());
  return h;
}

}  // namespace

FrameHeader encode(const LocalSetup& m) {
  FrameHeader h = of(FrameType::kLocalSetup);
  std::memcpy(&h.a, m.ticket.data(), 8);
  std::memcpy(&h.b, m.ticket.data() + 8, 8);
  h.c = m.nonce;
  h.aux_len = aux_len(m.rendezvous);
  return h;
}

FrameHeader encode(const LocalReady& m) {
  FrameHeader h = of(FrameType::kLocalReady);
  h.a = m.pid;
  return h;
}

FrameHeader encode(const LocalRts& m) {
  FrameHeader h = of(FrameType::kLocalRts);
  h.id = m.op;
  h.a = m.size;
  return with_payload(h, m.spans);
}

FrameHeader encode(const LocalCts& m) {
  FrameHeader h = of(FrameType::kLocalCts);
  h.id = m.op;
  h.a = m.token;
  return with_payload(h, m.spans);
}

FrameHeader encode(const LocalDone& m) {
  FrameHeader h = of(FrameType::kLocalDone);
  h.id = m.id;
  h.code = m.code;
  h.aux_len = aux_len(m.reason);
  return h;
}

FrameHeader encode(const LocalOpen& m) {
  FrameHeader h = of(FrameType::kLocalOpen);
  h.id = m.request;
  h.a = m.export_id;
  h.b = m.key;
  h.c = m.length;
  return h;
}

FrameHeader encode(const LocalExport& m) {
  FrameHeader h = of(FrameType::kLocalExport);
  h.id = m.request;
  h.code = m.code;
  h.a = m.export_id;
  h.b = m.key;
  h.c = m.length;
  h.aux_len = aux_len(m.reason);
  return with_payload(h, m.spans);
}

namespace {
template <typename Copy>
FrameHeader copy_header(FrameType type, const Copy& m) {
  FrameHeader h = of(type);
  h.id = m.op;
  h.a = m.export_id;
  h.b = m.key;
  h.c = m.offset;
  h.d = m.size;
  return with_payload(h, m.spans);
}

template <typename Copy>
Result<Copy> decode_copy(FrameType type, const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FERRY_RETURN_IF_ERROR(payload_agrees(h, payload));
  FERRY_RETURN_IF_ERROR(check(h, aux, type, 0, kId | kA | kB | kC | kD, 0, true));
  if (h.c + h.d < h.c) return refuse(h, "offset " + std::to_string(h.c) + " plus size wraps around");
  return Copy{{h.id, h.a, h.b, h.c, h.d, payload}};
}
}  // namespace

FrameHeader encode(const LocalPull& m) { return copy_header(FrameType::kLocalPull, m); }
FrameHeader encode(const LocalPush& m) { return copy_header(FrameType::kLocalPush, m); }

FrameHeader encode(const LocalNote& m) {
  FrameHeader h = of(FrameType::kLocalNote);
  h.id = m.op;
  h.a = m.seq;
  if (m.skip) h.flags = kLocalNoteSkip;
  h.aux_len = aux_len(m.note);
  return h;
}

FrameHeader encode(const LocalRevoke& m) {
  FrameHeader h = of(FrameType::kLocalRevoke);
  h.id = m.request;
  h.a = m.exports;
  return with_payload(h, m.values);
}

Result<LocalSetup> decode_local_setup(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FERRY_RETURN_IF_ERROR(payload_agrees(h, payload));
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kLocalSetup, 0, kA | kB | kC, kMaxAux, false));
  if (aux.empty()) return refuse(h, "no rendezvous name");
  LocalSetup m;
  std::memcpy(m.ticket.data(), &h.a, 8);
  std::memcpy(m.ticket.data() + 8, &h.b, 8);
  m.nonce = h.c;
  m.rendezvous = aux;
  return m;
}

Result<LocalReady> decode_local_ready(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FERRY_RETURN_IF_ERROR(payload_agrees(h, payload));
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kLocalReady, 0, kA, 0, false));
  return LocalReady{h.a};
}

Result<LocalRts> decode_local_rts(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FERRY_RETURN_IF_ERROR(payload_agrees(h, payload));
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kLocalRts, 0, kId | kA, 0, true));
  return LocalRts{h.id, h.a, payload};
}

Result<LocalCts> decode_local_cts(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FERRY_RETURN_IF_ERROR(payload_agrees(h, payload));
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kLocalCts, 0, kId | kA, 0, true));
  return LocalCts{h.id, h.a, payload};
}

Result<LocalDone> decode_local_done(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FERRY_RETURN_IF_ERROR(payload_agrees(h, payload));
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kLocalDone, 0, kId | kCode, kMaxLocalReason, false));
  FERRY_RETURN_IF_ERROR(reason_fits(h, aux));
  return LocalDone{h.id, h.code, aux};
}

Result<LocalOpen> decode_local_open(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FERRY_RETURN_IF_ERROR(payload_agrees(h, payload));
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kLocalOpen, 0, kId | kA | kB | kC, 0, false));
  return LocalOpen{h.id, h.a, h.b, h.c};
}

Result<LocalExport> decode_local_export(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FERRY_RETURN_IF_ERROR(payload_agrees(h, payload));
  const bool failed = h.code != 0;
  FERRY_RETURN_IF_ERROR(
      check(h, aux, FrameType::kLocalExport, 0, kId | kA | kB | kC | kCode, failed ? kMaxLocalReason : 0, !failed));
  return LocalExport{h.id, h.code, h.a, h.b, h.c, aux, payload};
}

Result<LocalPull> decode_local_pull(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  return decode_copy<LocalPull>(FrameType::kLocalPull, h, aux, payload);
}

Result<LocalPush> decode_local_push(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  return decode_copy<LocalPush>(FrameType::kLocalPush, h, aux, payload);
}

Result<LocalNote> decode_local_note(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FERRY_RETURN_IF_ERROR(payload_agrees(h, payload));
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kLocalNote, kLocalNoteSkip, kId | kA, kMaxNote, false));
  return LocalNote{h.id, h.a, (h.flags & kLocalNoteSkip) != 0, aux};
}

Result<LocalRevoke> decode_local_revoke(const FrameHeader& h, std::string_view aux, std::string_view payload) {
  FERRY_RETURN_IF_ERROR(payload_agrees(h, payload));
  FERRY_RETURN_IF_ERROR(check(h, aux, FrameType::kLocalRevoke, 0, kId | kA, 0, true));
  if (payload.size() % 8 != 0 || h.a > payload.size() / 8) {
    return refuse(h, std::to_string(h.a) + " export ids in a payload of " + std::to_string(payload.size()) +
                         " bytes (8 a value)");
  }
  return LocalRevoke{h.id, h.a, payload};
}

}  // namespace ferry::wire
