// Feeds arbitrary CHUNK_ACK frames (header and aux bytes) to wire::decode_chunk_ack
// and checks what it accepts round-trips (wire_message_fuzz.h).
#include "wire_message_fuzz.h"

FERRY_FUZZ_WIRE_MESSAGE(kChunkAck, decode_chunk_ack)
