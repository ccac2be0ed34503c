// Feeds arbitrary LOCAL_OPEN frames (header, aux and payload bytes) to
// wire::decode_local_open and checks what it accepts round-trips (wire_message_fuzz.h).
#include "wire_message_fuzz.h"

FERRY_FUZZ_WIRE_LOCAL_MESSAGE(kLocalOpen, decode_local_open)
