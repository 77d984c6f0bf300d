// One translation unit of shard_ext: one kernel and its host launcher.
#include <cuda_runtime.h>

__global__ void add_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

extern "C" void shard_ext_add(float* x, int n) { add_kernel<<<(n + 255) / 256, 256>>>(x, n); }
