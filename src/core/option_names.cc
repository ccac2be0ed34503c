// The Options enums' names (core/option_names.h) and the public to_string and
// parse_* functions over them.
#include "core/option_names.h"

#include <array>
#include <string>
#include <string_view>

namespace ferry {
namespace {

// The names of an enum's values, indexed by value.
template <typename E, size_t N>
struct Names {
  const char* field;  // the Options field that holds an E
  std::array<std::string_view, N> names;
};

constexpr Names<TransportChoice, 3> kTransportNames{"transport", {"auto", "tcp", "local"}};
constexpr Names<NicPolicy, 2> kNicPolicyNames{"nic_policy", {"nearest", "all"}};
constexpr Names<PathPolicy, 2> kPathPolicyNames{"path_policy", {"adaptive", "all"}};
constexpr Names<StagingCopy, 2> kStagingCopyNames{"staging_copy", {"kernel", "engine"}};

template <typename E, size_t N>
std::string_view name_of(const Names<E, N>& n, E value) {
  auto i = static_cast<size_t>(value);
  return i < N ? n.names[i] : std::string_view();
}

// "transport must be auto, tcp or local, got " + `got`.
template <typename E, size_t N>
Status not_a_name(const Names<E, N>& n, const std::string& got) {
  std::string m = std::string(n.field) + " must be ";
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) m += i + 1 < N ? ", " : " or ";
    m += n.names[i];
  }
  return Status(Code::kInvalidArgument, m + ", got " + got);
}

template <typename E, size_t N>
Result<E> parse_name(const Names<E, N>& n, std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (n.names[i] == name) return static_cast<E>(i);
  }
  return not_a_name(n, "\"" + std::string(name) + "\"");
}

// validate's check of a field no name was parsed for (a cast can make any value).
template <typename E, size_t N>
Status check_named(const Names<E, N>& n, E value) {
  if (!name_of(n, value).empty()) return Status();
  return not_a_name(n, std::to_string(static_cast<int>(value)));
}

}  // namespace

std::string_view to_string(TransportChoice choice) { return name_of(kTransportNames, choice); }
std::string_view to_string(NicPolicy policy) { return name_of(kNicPolicyNames, policy); }
std::string_view to_string(PathPolicy policy) { return name_of(kPathPolicyNames, policy); }
std::string_view to_string(StagingCopy copy) { return name_of(kStagingCopyNames, copy); }

Result<TransportChoice> parse_transport(std::string_view name) { return parse_name(kTransportNames, name); }
Result<NicPolicy> parse_nic_policy(std::string_view name) { return parse_name(kNicPolicyNames, name); }
Result<PathPolicy> parse_path_policy(std::string_view name) { return parse_name(kPathPolicyNames, name); }
Result<StagingCopy> parse_staging_copy(std::string_view name) { return parse_name(kStagingCopyNames, name); }

namespace core {

Status check_option_names(const Options& o) {
  for (const Status& s : {check_named(kStagingCopyNames, o.staging_copy), check_named(kPathPolicyNames, o.path_policy),
                          check_named(kNicPolicyNames, o.nic_policy), check_named(kTransportNames, o.transport)}) {
    if (!s.ok()) return s;
  }
  return Status();
}

}  // namespace core
}  // namespace ferry
