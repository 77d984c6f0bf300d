// A header no compiled source includes: not compiled, not linted.
#pragma once
#include <cuda_fp8.h>
__device__ void convert(__nv_fp8_e4m3* out, float x) {
#if __CUDA_ARCH__ >= 890
  *out = __nv_fp8_e4m3(x);
#else
  __trap();
#endif
}
