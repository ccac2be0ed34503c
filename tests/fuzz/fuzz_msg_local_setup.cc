// Feeds arbitrary LOCAL_SETUP frames (header, aux and payload bytes) to
// wire::decode_local_setup and checks what it accepts round-trips (wire_message_fuzz.h).
#include "wire_message_fuzz.h"

FERRY_FUZZ_WIRE_LOCAL_MESSAGE(kLocalSetup, decode_local_setup)
