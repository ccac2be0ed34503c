// CU: the driver-API probes' check of a CUDA driver call (a failure names the
// call and where, and ends the process), and kPokePtx, a kernel that stores
// one word, as PTX the probes load themselves.
#pragma once

#include <cuda.h>

#include <cstdio>
#include <cstdlib>

#define CU(x)                                                             \
  do {                                                                    \
    CUresult r_ = (x);                                                    \
    if (r_ != CUDA_SUCCESS) {                                             \
      const char* n_ = nullptr;                                           \
      cuGetErrorName(r_, &n_);                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, n_); \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

inline const char kPokePtx[] = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry poke(.param .u64 p) {
  .reg .b64 %rd<2>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [p];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, 7;
  st.global.u32 [%rd1], %r1;
  ret;
}
)";
