#include <nv/target>

__global__ void tma_only(float* x) {
  NV_IF_TARGET(NV_PROVIDES_SM_90, (
    x[threadIdx.x] = __fmaf_rn(x[threadIdx.x], 2.0f, 1.0f);
  ))
}

__global__ void with_fallback(float* x) {
  NV_IF_ELSE_TARGET(NV_PROVIDES_SM_90,
    (x[threadIdx.x] = __fmaf_rn(x[threadIdx.x], 2.0f, 1.0f);),
    (x[threadIdx.x] = x[threadIdx.x] * 2.0f + 1.0f;))
}
