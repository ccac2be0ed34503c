// The README's ten-line program: two engines in one process, one message
// between them over loopback, checked. Built against an installed ferry.
#include <ferry/ferry.h>

#include <cstdio>
#include <cstring>

int main() {
  ferry::Options o;
  o.local_same_process = true;  // two engines of one process may use the same-host transport
  auto a = ferry::Engine::create(o), b = ferry::Engine::create(o);
  if (!a.ok() || !b.ok()) return std::fprintf(stderr, "%s\n", (a.ok() ? b : a).status().to_string().c_str()), 1;
  char out[] = "hello, ferry", in[sizeof(out)] = {};
  auto ro = a.value()->reg(out, sizeof(out));
  auto ri = b.value()->reg(in, sizeof(in));
  auto conn = a.value()->connect(b.value()->address(), ferry::after(std::chrono::seconds(5)));
  auto peer = b.value()->accept(ferry::after(std::chrono::seconds(5)));
  if (!ro.ok() || !ri.ok() || !conn.ok() || !peer.ok()) return std::fprintf(stderr, "setup failed\n"), 1;
  ferry::Transfer recv = peer.value()->recv_async(in, sizeof(in));
  ferry::Status sent = conn.value()->send(out, sizeof(out), ferry::after(std::chrono::seconds(5)));
  ferry::Status got = recv.wait(ferry::after(std::chrono::seconds(5)));
  if (!sent.ok() || !got.ok()) return std::fprintf(stderr, "%s\n", (sent.ok() ? got : sent).to_string().c_str()), 1;
  std::printf("received \"%s\"\n", in);
  return std::strcmp(in, out) == 0 ? 0 : 1;
}
