// One translation unit of cmake_ext, in a folder of its own: one kernel and its host launcher.
#include <cuda_runtime.h>

__global__ void fill_kernel(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}

extern "C" void cmake_ext_fill(float* x, float v, int n) { fill_kernel<<<(n + 255) / 256, 256>>>(x, v, n); }
