// Named worker threads.
#include "platform/thread.h"

#include <pthread.h>

namespace ferry::platform {

std::thread start_thread(std::string name, std::function<void()> fn) {
  return std::thread([name = std::move(name), fn = std::move(fn)]() {
    ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
    fn();
  });
}

}  // namespace ferry::platform
