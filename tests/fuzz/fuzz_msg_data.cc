// Feeds arbitrary DATA frames (header and aux bytes) to wire::decode_data
// and checks what it accepts round-trips (wire_message_fuzz.h).
#include "wire_message_fuzz.h"

FERRY_FUZZ_WIRE_MESSAGE(kData, decode_data)
