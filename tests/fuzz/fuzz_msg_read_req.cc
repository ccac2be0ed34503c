// Feeds arbitrary READ_REQ frames (header and aux bytes) to wire::decode_read_req
// and checks what it accepts round-trips (wire_message_fuzz.h).
#include "wire_message_fuzz.h"

FERRY_FUZZ_WIRE_MESSAGE(kReadReq, decode_read_req)
