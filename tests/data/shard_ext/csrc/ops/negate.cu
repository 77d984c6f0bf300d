// One translation unit of shard_ext: one kernel and its host launcher.
#include <cuda_runtime.h>

__global__ void negate_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = -x[i];
}

extern "C" void shard_ext_negate(float* x, int n) { negate_kernel<<<(n + 255) / 256, 256>>>(x, n); }
