// Giving freed heap memory back to the system (see heap.h).
#include "platform/heap.h"

#include <cstdlib>  // defines __GLIBC__ under the GNU C library

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ferry::platform {

void return_free_heap() {
#if defined(__GLIBC__)
  (void)::malloc_trim(0);
#endif
}

}  // namespace ferry::platform
