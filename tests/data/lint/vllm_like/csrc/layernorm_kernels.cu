#include <cuda_bf16.h>

__global__ void rms_norm(__nv_bfloat16* out, const __nv_bfloat16* in) {
#ifdef USE_ROCM
  __trap();  // a HIP build's branch: never compiled by nvcc
#else
  out[threadIdx.x] = in[threadIdx.x];
#endif
}
