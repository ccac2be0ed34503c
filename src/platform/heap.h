// Giving freed heap memory back to the system.
//
// Why this file exists: what a peer made an engine hold (messages nobody
// received, notifications nobody took: up to connection_memory_bytes) lives
// in many small heap blocks. Freed, the C library keeps their pages for
// later allocations, so a process that one hostile peer flooded would stay
// that much larger for good. A connection that held a lot calls this once it
// let go of it.
#pragma once

namespace ferry::platform {

// Returns the whole pages of free heap memory, in every allocation arena, to
// the system. Costs about a millisecond on a large heap: call it after
// freeing megabytes, not per operation. Thread-safe.
void return_free_heap();

}  // namespace ferry::platform
