#pragma once
#include <cuda_fp8.h>

__device__ __forceinline__ void mma_fp8_accumulate(const __nv_fp8_e4m3* v, float* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t a = 0;
  asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(*(unsigned short*)&a) : "f"(out[0]), "f"(out[1]));
  out[0] = static_cast<float>(v[0]) + a;
#endif
}
