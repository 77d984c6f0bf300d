#include "wgmma.cuh"

__global__ void scaled_mm_sm90(float* out) {
  warpgroup_arrive();
  out[threadIdx.x] = 0.f;
}
