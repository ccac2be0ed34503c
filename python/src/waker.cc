// Waker: an eventfd in non-blocking mode.
#include "waker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "errors.h"

namespace ferry::py {

Waker::Waker() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw StatusError(Status(Code::kResourceExhausted, std::string("eventfd: ") + std::strerror(errno)));
}

Waker::~Waker() {
  if (fd_ >= 0) ::close(fd_);
}

void Waker::signal() {
  uint64_t one = 1;
  // EAGAIN only when the counter is about to overflow: it is readable then.
  (void)!::write(fd_, &one, sizeof(one));
}

void Waker::drain() {
  uint64_t count = 0;
  (void)!::read(fd_, &count, sizeof(count));
}

void bind_waker(pybind11::module_& m) {
  pybind11::class_<Waker, std::shared_ptr<Waker>>(
      m, "_Waker", "An eventfd that ferry signals when a transfer finishes or a notification arrives (ferry.aio).")
      .def(pybind11::init<>())
      .def("fileno", &Waker::fileno, "The descriptor to watch for reading.")
      .def("drain", &Waker::drain, "Makes the descriptor unreadable until the next signal.")
      .def("signal", &Waker::signal, "Makes the descriptor readable.");
}

}  // namespace ferry::py
