// Feeds arbitrary CLOSE frames (header and aux bytes) to wire::decode_close
// and checks what it accepts round-trips (wire_message_fuzz.h).
#include "wire_message_fuzz.h"

FERRY_FUZZ_WIRE_MESSAGE(kClose, decode_close)
