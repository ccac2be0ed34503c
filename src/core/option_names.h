// The names of the Options enums (transport, nic_policy, path_policy,
// staging_copy): one table each, read by to_string and parse_* (public, in
// ferry/options.h), by the engine's validation and by the transports that
// log or report a choice. In core so every layer above can name a choice
// without calling up into the engine.
#pragma once

#include "ferry/options.h"
#include "ferry/status.h"

namespace ferry::core {

// kInvalidArgument naming the field and its names for an enum field of `o`
// that holds no named value (a cast can make any value); OK otherwise.
Status check_option_names(const Options& o);

}  // namespace ferry::core
