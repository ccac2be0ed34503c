// errno to Status.
#include "platform/system_error.h"

#include <system_error>

namespace ferry::platform {

std::string errno_message(std::string_view what, int err) {
  // The same text as strerror(err), made with strerror_r (thread-safe).
  std::string out(what);
  out += ": ";
  out += std::generic_category().message(err);
  return out;
}

Status errno_status(Code code, std::string_view what, int err) { return Status(code, errno_message(what, err)); }

}  // namespace ferry::platform
