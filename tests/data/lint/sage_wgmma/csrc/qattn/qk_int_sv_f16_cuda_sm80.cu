#include <cuda_fp16.h>

__global__ void qk_int_sv_f16_attn_kernel(const half* v, float* out) {
  out[threadIdx.x] = __half2float(v[threadIdx.x]);
}
