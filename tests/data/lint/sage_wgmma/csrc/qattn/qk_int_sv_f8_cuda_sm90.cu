#include <cuda_fp8.h>
#include "../wgmma.cuh"

__global__ void qk_int_sv_f8_attn_kernel(float* out, uint64_t desc) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  uint32_t a[4] = {0, 0, 0, 0};
  wgmma::warpgroup_arrive();
  wgmma::wgmma_m64n8k32_f8f8f32(d, a, desc);
  wgmma::warpgroup_commit_batch();
  wgmma::warpgroup_wait<0>();
  out[threadIdx.x] = d[0];
}
