// Feeds arbitrary HEARTBEAT frames (header and aux bytes) to wire::decode_heartbeat
// and checks what it accepts round-trips (wire_message_fuzz.h).
#include "wire_message_fuzz.h"

FERRY_FUZZ_WIRE_MESSAGE(kHeartbeat, decode_heartbeat)
