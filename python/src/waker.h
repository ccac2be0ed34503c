// Waker: an eventfd that ferry's threads signal and an asyncio event loop
// watches (loop.add_reader), so that `await transfer` and awaiting a
// notification need neither a thread per wait nor polling.
//
// signal() runs on ferry threads without the GIL and never blocks; the
// object is shared with every hook that may still signal it, so its
// descriptor closes only after the last one is gone.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

namespace ferry::py {

class Waker {
 public:
  Waker();  // raises ResourceExhausted when no eventfd can be made
  ~Waker();
  Waker(const Waker&) = delete;
  Waker& operator=(const Waker&) = delete;

  int fileno() const { return fd_; }
  // Makes the descriptor readable. Any thread; no GIL needed.
  void signal();
  // Makes it unreadable again (the loop's reader calls it first).
  void drain();

 private:
  int fd_ = -1;
};

void bind_waker(pybind11::module_& m);

}  // namespace ferry::py
