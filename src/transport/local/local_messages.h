// What both halves of LocalTransport (posting and the progress turn) say
// about messages: flag values.
#pragma once

#include <cstdint>

namespace ferry::local {

// LOCAL_NOTE flags: the write carrying this sequence number failed, so there
// is nothing to deliver, only a place in the order to skip.
inline constexpr uint8_t kNoteSkip = 1;

}  // namespace ferry::local
