// The NIXL notification codec (agent_note.h).
#include "agent_note.h"

namespace ferry::nixl {

Result<std::string> encode_agent_note(const AgentNote& note, size_t max_bytes) {
  if (note.agent.empty() || note.agent.size() > kMaxAgentName) {
    return Status(Code::kInvalidArgument, "nixl notification: agent name of " + std::to_string(note.agent.size()) +
                                              " bytes; it must be 1 to " + std::to_string(kMaxAgentName));
  }
  const size_t total = kAgentNoteHeader + note.agent.size() + note.message.size();
  if (total > max_bytes) {
    return Status(Code::kInvalidArgument, "nixl notification: message of " + std::to_string(note.message.size()) +
                                              " bytes is too long; with the agent name it may be at most " +
                                              std::to_string(max_bytes - kAgentNoteHeader - note.agent.size()));
  }
  std::string out;
  out.reserve(total);
  out.push_back(static_cast<char>(kAgentNoteVersion));
  out.push_back(static_cast<char>(note.failed ? 1 : 0));
  out.push_back(static_cast<char>(note.agent.size() & 0xff));
  out.push_back(static_cast<char>(note.agent.size() >> 8));
  out += note.agent;
  out += note.message;
  return out;
}

Result<AgentNote> decode_agent_note(std::string_view bytes) {
  if (bytes.size() < kAgentNoteHeader) {
    return Status(Code::kDataLoss, "nixl notification of " + std::to_string(bytes.size()) +
                                       " bytes is shorter than its 4-byte header");
  }
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  if (byte(0) != kAgentNoteVersion) {
    return Status(Code::kDataLoss, "nixl notification of version " + std::to_string(byte(0)) + "; this build reads " +
                                       std::to_string(kAgentNoteVersion));
  }
  if ((byte(1) & ~1u) != 0) {
    return Status(Code::kDataLoss, "nixl notification with unknown flags " + std::to_string(byte(1)));
  }
  const size_t name_length = byte(2) | (size_t{byte(3)} << 8);
  if (name_length == 0 || name_length > kMaxAgentName || name_length > bytes.size() - kAgentNoteHeader) {
    return Status(Code::kDataLoss, "nixl notification names an agent of " + std::to_string(name_length) +
                                       " bytes in " + std::to_string(bytes.size() - kAgentNoteHeader) +
                                       " bytes after its header");
  }
  AgentNote note;
  note.failed = (byte(1) & 1u) != 0;
  note.agent.assign(bytes.substr(kAgentNoteHeader, name_length));
  note.message.assign(bytes.substr(kAgentNoteHeader + name_length));
  return note;
}

}  // namespace ferry::nixl
