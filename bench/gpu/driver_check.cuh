// CU: the driver-API probes' check of a CUDA driver call (a failure names the
// call and where, and ends the process); use_primary_context, their start on
// GPU 0; and kPokePtx, a kernel that stores one word, as PTX the probes load
// themselves.
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

// Initialises the driver and makes GPU 0's primary context current; its
// device goes to `device` when asked for.
inline CUcontext use_primary_context(CUdevice* device = nullptr) {
  CU(cuInit(0));
  CUdevice d;
  CU(cuDeviceGet(&d, 0));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, d));
  CU(cuCtxSetCurrent(ctx));
  if (device != nullptr) *device = d;
  return ctx;
}

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
